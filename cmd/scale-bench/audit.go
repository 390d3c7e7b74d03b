package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	benchkit "github.com/trainingjob-operator/trainingjob-operator/internal/local/bench"
)

// auditEvent is the part of a kube-apiserver audit event (JSON lines, Metadata level) the bench reads.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// writes are the operator's writes in a time window, from the audit log.
type writes struct {
	total, events, status, conflicts int
	byKind                           map[string]int
}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// operatorWrites reads the audit log for the writes the operator's user made between from and to: by
// kind ("update trainingjobs/status"), with events and 409 conflicts apart.
func (b *bench) operatorWrites(from, to time.Time) (writes, error) {
	f, err := os.Open(filepath.Join(b.dir, "audit.log"))
	if err != nil {
		return writes{}, err
	}
	defer f.Close()
	w := writes{byKind: map[string]int{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != operatorUser || !writeVerbs[ev.Verb] || ev.ObjectRef == nil {
			continue
		}
		if ev.StageTimestamp.Before(from) || ev.StageTimestamp.After(to) {
			continue
		}
		kind := strings.TrimSuffix(ev.Verb+" "+ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource, "/")
		switch {
		case ev.ResponseStatus != nil && ev.ResponseStatus.Code == 409:
			w.conflicts++
		case ev.ObjectRef.Resource == "events":
			w.events++
		default:
			w.total++
			w.byKind[kind]++
			if ev.ObjectRef.Subresource == "status" {
				w.status++
			}
		}
	}
	return w, sc.Err()
}

// countWrites puts the lifecycle's writes per job into res: from the audit log, and from the manager's
// own client metric (successful and conflicting writes, events included) as a cross-check, plus the
// errors the manager logged.
func (b *bench) countWrites(res *result) error {
	w, err := b.operatorWrites(time.Time{}, time.Now())
	if err != nil {
		return err
	}
	n := float64(b.n)
	res.Writes, res.StatusWrites, res.Events, res.Conflicts = float64(w.total)/n, float64(w.status)/n, float64(w.events)/n, w.conflicts
	res.WritesByKind = map[string]float64{}
	for k, v := range w.byKind {
		res.WritesByKind[k] = float64(v) / n
	}
	m, err := benchkit.Metrics(b.metrics, "")
	if err != nil {
		return err
	}
	var client float64
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		client += benchkit.Sum(m, "rest_client_requests_total", map[string]string{"method": verb, "code": "2*"})
		client += benchkit.Sum(m, "rest_client_requests_total", map[string]string{"method": verb, "code": "409"})
	}
	res.ClientWrites = client / n
	res.ErrorsLogged, err = countErrors(filepath.Join(b.dir, fmt.Sprintf("manager-%d.log", b.runs)))
	return err
}

// countErrors counts the ERROR lines of a manager's log.
func countErrors(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "\tERROR\t") || strings.Contains(line, `"level":"error"`) {
			n++
		}
	}
	return n, nil
}

// keyOf is the key of a bench namespace object.
func keyOf(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
