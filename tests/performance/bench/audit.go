package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// auditEvent is the part of a kube-apiserver audit event (JSON lines, Metadata level) the benchmarks read.
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

// Writes are the writes an audit log holds for some users in a time window: by kind ("update
// trainingjobs/status"), with events and 409 conflicts counted apart (neither is in Total or ByKind).
type Writes struct {
	Total, Events, Status, Conflicts int
	ByKind                           map[string]int
}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// AuditWrites reads the audit log at path for the writes of the users who accepts made between from and to.
func AuditWrites(path string, from, to time.Time, who func(user string) bool) (Writes, error) {
	f, err := os.Open(path)
	if err != nil {
		return Writes{}, err
	}
	defer func() { _ = f.Close() }() // read only
	w := Writes{ByKind: map[string]int{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !who(ev.User.Username) || !writeVerbs[ev.Verb] || ev.ObjectRef == nil {
			continue
		}
		if ev.StageTimestamp.Before(from) || ev.StageTimestamp.After(to) {
			continue
		}
		kind := strings.TrimSuffix(ev.Verb+" "+ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource, "/")
		switch {
		case ev.ResponseStatus != nil && ev.ResponseStatus.Code == 409:
			w.Conflicts++
		case ev.ObjectRef.Resource == "events":
			w.Events++
		default:
			w.Total++
			w.ByKind[kind]++
			if ev.ObjectRef.Subresource == "status" {
				w.Status++
			}
		}
	}
	return w, sc.Err()
}

// PeakRSS returns the highest resident set of a process so far (VmHWM), in bytes; 0 when it cannot be read.
func PeakRSS(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kib, _ := strconv.ParseFloat(f[1], 64)
			return kib * 1024
		}
	}
	return 0
}

// WriteReport prints the readable report md and, when dir is not empty, writes it there as report.md
// beside report.json, the figures v as JSON.
func WriteReport(dir string, v any, md string) error {
	fmt.Print(md)
	if dir == "" {
		return nil
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644)
}
