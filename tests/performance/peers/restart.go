package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// phases are the steps of a start, each the time from its origin (the submission of a fresh job, or the
// failure of a rank) until it was seen, in seconds: the operator decided the restart (its status showed
// the next attempt), every pod of the old attempt was being deleted, the played kubelet had stopped them
// all, they were gone (their Job tracking finalizers released), the new Job existed, all its pods
// existed, were bound, ran, and the operator's status said Running for the attempt.
type phases struct {
	Detect    float64 `json:"detect,omitempty"`
	Stopping  float64 `json:"oldPodsStopping,omitempty"`
	Stopped   float64 `json:"oldPodsStopped,omitempty"`
	OldGone   float64 `json:"oldPodsGone,omitempty"`
	Job       float64 `json:"jobCreated"`
	Pods      float64 `json:"podsCreated"`
	Scheduled float64 `json:"scheduled"`
	Running   float64 `json:"running"`
	Status    float64 `json:"statusRunning"`
}

// restartResult is one start of a job of Ranks ranks: Kind "fresh" or "restart".
type restartResult struct {
	Ranks int `json:"ranks"`
	// KCMQPS is kube-controller-manager's client rate (0: its default, 20 with a burst of 30).
	KCMQPS    int     `json:"kubeControllerManagerQPS"`
	Kind      string  `json:"kind"`
	Repeat    int     `json:"repeat"`
	StopDelay float64 `json:"stopDelaySeconds"`
	Phases    phases  `json:"phases"`
	// Writes are the API writes made from the origin until the status said Running, by writer and kind
	// (the operator; kube-controller-manager: Kubernetes' Job controller and the garbage collector).
	Writes map[string]map[string]int `json:"writes"`
}

func restartTable(rs []restartResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Gang restart (our operator; the played kubelet stops a deleted pod's containers %.1f s after its deletion): "+
		"seconds from the submission (fresh) or the rank's failure (restart) until each phase was seen\n\n", rs[0].StopDelay)
	b.WriteString("| ranks | kube-controller-manager QPS | start | run | failure acted on | old pods all stopping | old pods stopped | " +
		"old pods gone | Job created | pods created | scheduled | all Running | status Running | operator writes | " +
		"kube-controller-manager writes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		p := r.Phases
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %.2f | %s | %s | %s |\n",
			r.Ranks, kcmRate(r.KCMQPS), r.Kind, r.Repeat, dash(p.Detect), dash(p.Stopping), dash(p.Stopped), dash(p.OldGone),
			dash(p.Job), dash(p.Pods), dash(p.Scheduled), p.Running, dash(p.Status),
			byKindInt(r.Writes["operator"]), byKindInt(r.Writes["kube-controller-manager"]))
	}
	return b.String()
}

func byKindInt(m map[string]int) string {
	f := map[string]float64{}
	for k, v := range m {
		if v > 0 {
			f[k] = float64(v)
		}
	}
	return strings.ReplaceAll(byKind(f), ".00", "")
}

func kcmRate(qps int) string {
	if qps == 0 {
		return "20 (default)"
	}
	return fmt.Sprint(qps)
}

func dash(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", s)
}

// seenJobs records when each Job (by UID) was first seen, and when each TrainingJob's status first said a
// state for an attempt.
type seenJobs struct {
	mu     sync.Mutex
	added  map[string]map[types.UID]time.Time
	states map[string]time.Time // name/attempt/state
}

func (r *run) watchOurs(ctx context.Context) (*seenJobs, error) {
	s := &seenJobs{added: map[string]map[types.UID]time.Time{}, states: map[string]time.Time{}}
	jf := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithNamespace(ns))
	jobs := jf.Batch().V1().Jobs().Informer()
	seeJob := func(o any) {
		j, ok := o.(*batchv1.Job)
		if !ok {
			return
		}
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.added[j.Name] == nil {
			s.added[j.Name] = map[types.UID]time.Time{}
		}
		if _, ok := s.added[j.Name][j.UID]; !ok {
			s.added[j.Name][j.UID] = now
		}
	}
	if _, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seeJob, UpdateFunc: func(_, o any) { seeJob(o) }}); err != nil {
		return nil, err
	}
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(r.dyn, 0, ns, nil)
	tjs := df.ForResource(mlv1.GroupVersion.WithResource("trainingjobs")).Informer()
	seeTJ := func(o any) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return
		}
		state, _, _ := unstructured.NestedString(u.Object, "status", "state")
		attempt, _, _ := unstructured.NestedInt64(u.Object, "status", "attempt")
		key := fmt.Sprintf("%s/%d/%s", u.GetName(), attempt, state)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range []string{key, fmt.Sprintf("%s/%d/", u.GetName(), attempt)} {
			if _, ok := s.states[k]; !ok {
				s.states[k] = time.Now()
			}
		}
	}
	if _, err := tjs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seeTJ, UpdateFunc: func(_, o any) { seeTJ(o) }}); err != nil {
		return nil, err
	}
	jf.Start(ctx.Done())
	df.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), jobs.HasSynced, tjs.HasSynced) {
		return nil, fmt.Errorf("the Job and TrainingJob informers did not sync")
	}
	return s, nil
}

// jobAdded returns when a Job of the name other than old was first seen (zero: none yet).
func (s *seenJobs) jobAdded(name string, old types.UID) (time.Time, types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, t := range s.added[name] {
		if uid != old {
			return t, uid
		}
	}
	return time.Time{}, ""
}

func (s *seenJobs) stateAt(name string, attempt int, state mlv1.State) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[fmt.Sprintf("%s/%d/%s", name, attempt, state)]
}

// measureRestart starts, for each repeat, a fresh job of ranks ranks and times its phases from the
// submission, then fails its highest rank (exit 137, as a kill) and times the gang restart's phases from
// the failure; all on one fresh control plane with our operator.
func measureRestart(ctx context.Context, c config, ranks, kcmQPS int) ([]restartResult, error) {
	op := ours()
	r, err := startRun(ctx, c, func(p *corev1.Pod) string { return p.Labels[op.jobLabel] }, c.stopDelay, true, kcmQPS)
	defer func() { r.stop(fmt.Sprintf("restart-%d", ranks)) }()
	if err != nil {
		return nil, err
	}
	time.Sleep(warmUp)
	if r.procs, err = op.start(r, op.published); err != nil {
		return nil, err
	}
	seen, err := r.watchOurs(ctx)
	if err != nil {
		return nil, err
	}
	var out []restartResult
	for rep := 1; rep <= c.repeats; rep++ {
		for _, strategy := range c.strategies {
			res, err := r.timeRestart(ctx, op, seen, c, strategy, rep, ranks, kcmQPS)
			out = append(out, res...)
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// inPlacePrefix starts the names of the jobs that restart in place (ours().object).
const inPlacePrefix = "inplace-"

// timeRestart times a fresh start of a job of ranks ranks with the restart strategy, then a gang restart.
func (r *run) timeRestart(ctx context.Context, op *operator, seen *seenJobs, c config, strategy mlv1.RestartStrategy, rep, ranks,
	kcmQPS int) ([]restartResult, error) {
	name, kind := fmt.Sprintf("gang-%d", rep), "restart"
	if strategy == mlv1.RestartInPlace {
		name, kind = fmt.Sprintf("%s%d", inPlacePrefix, rep), "restart in place"
	}
	var out []restartResult
	fresh, err := r.freshStart(ctx, op, seen, name, ranks)
	if err != nil {
		return out, err
	}
	restart, err := r.gangRestart(ctx, seen, name, ranks, strategy == mlv1.RestartInPlace)
	if err != nil {
		return out, err
	}
	var alone timed
	if strategy == mlv1.RestartInPlace {
		if alone, err = r.kubeletAlone(ctx, name, ranks); err != nil {
			return out, err
		}
	}
	{
		for _, p := range []struct {
			kind string
			ph   phases
			w    map[string]map[string]int
		}{
			{kind: "fresh", ph: fresh.phases, w: fresh.writes},
			{kind: kind, ph: restart.phases, w: restart.writes},
			{kind: kubeletAloneKind, ph: alone.phases},
		} {
			if p.ph == (phases{}) {
				continue
			}
			res := restartResult{Ranks: ranks, KCMQPS: kcmQPS, Kind: p.kind, Repeat: rep, StopDelay: c.stopDelay.Seconds(),
				Phases: p.ph, Writes: p.w}
			fmt.Fprintln(os.Stderr, restartTable([]restartResult{res}))
			out = append(out, res)
		}
		if err := r.dyn.Resource(op.gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return out, err
		}
	}
	// The next measurement starts on a quiet cluster: this job's pods are gone and kube-controller-manager's
	// requests about them (the garbage collector's, Kubernetes' Job controller's finalizer releases at its client
	// rate, some for pods already gone) are over.
	if err := waitFor(ctx, 5*time.Minute, name+"'s pods gone", func() bool { return r.podsLeft(name) == 0 }); err != nil {
		return out, err
	}
	return out, waitFor(ctx, 5*time.Minute, "kube-controller-manager quiet", r.controllerManagerQuiet)
}

// controllerManagerQuiet says whether kube-controller-manager made no write in the last 2 seconds.
func (r *run) controllerManagerQuiet() bool {
	time.Sleep(500 * time.Millisecond)
	now := time.Now()
	w, err := benchkit.AuditWrites(filepath.Join(r.dir, "audit.log"), now.Add(-2*time.Second), now,
		func(u string) bool { return u == "kube-controller-manager" })
	return err == nil && w.Total+w.Events+w.Conflicts == 0
}

// kubeletAloneKind is the row of kubeletAlone.
const kubeletAloneKind = "in place, the played kubelet alone"

// kubeletAlone times the played kubelet restarting every running pod of the job in place at once, as on an
// order, with no failure and no order (the operator only watches): the floor of a restart in place on this
// machine, its two status writes per pod and the stop.
func (r *run) kubeletAlone(ctx context.Context, name string, ranks int) (timed, error) {
	time.Sleep(2 * time.Second) // the restart's last writes settle
	start := time.Now()
	for _, rec := range r.kl.records(name) {
		if rec.gone.IsZero() && !rec.ended {
			p := rec.pod
			r.kl.work <- func() { r.kl.restartAll(p) }
		}
	}
	restarted := func() bool {
		n := 0
		for _, rec := range r.kl.records(name) {
			if rec.running.After(start) {
				n++
			}
		}
		return n >= ranks
	}
	if err := waitFor(ctx, 2*time.Minute, name+" restarted by the played kubelet alone", restarted); err != nil {
		return timed{}, err
	}
	return timed{phases: r.inPlacePhases(name, start, ranks, phases{})}, nil
}

// podsLeft counts the job's pods the played kubelet has not seen removed.
func (r *run) podsLeft(job string) int {
	n := 0
	for _, rec := range r.kl.records(job) {
		if rec.gone.IsZero() {
			n++
		}
	}
	return n
}

// freshStart submits a job of ranks ranks and times its phases from the submission.
// timed are a start's phases and the writes made meanwhile.
type timed struct {
	phases phases
	writes map[string]map[string]int
}

func (r *run) freshStart(ctx context.Context, op *operator, seen *seenJobs, name string, ranks int) (timed, error) {
	start := time.Now()
	if err := r.submit(ctx, op, name, ranks); err != nil {
		return timed{}, err
	}
	running := func() bool { return !seen.stateAt(name, 0, mlv1.StateRunning).IsZero() }
	if err := waitFor(ctx, 5*time.Minute, name+" Running", running); err != nil {
		return timed{}, err
	}
	jobAt, _ := seen.jobAdded(names.JobName(&mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name}}), "")
	p := r.podPhases(name, start, ranks)
	p.Job, p.Status = jobAt.Sub(start).Seconds(), seen.stateAt(name, 0, mlv1.StateRunning).Sub(start).Seconds()
	w, err := r.writesBetween(start, seen.stateAt(name, 0, mlv1.StateRunning))
	return timed{phases: p, writes: w}, err
}

// writesBetween returns the operator's and kube-controller-manager's writes in the window, by kind.
func (r *run) writesBetween(from, to time.Time) (map[string]map[string]int, error) {
	time.Sleep(2 * time.Second) // the last writes reach the audit log
	out := map[string]map[string]int{}
	for who, user := range map[string]string{"operator": ours().users[0], "kube-controller-manager": "kube-controller-manager"} {
		w, err := benchkit.AuditWrites(filepath.Join(r.dir, "audit.log"), from, to, func(u string) bool { return u == user })
		if err != nil {
			return nil, err
		}
		w.ByKind["events"] = w.Events
		out[who] = w.ByKind
	}
	return out, nil
}

// gangRestart fails the highest rank of the running job and times the restart's phases from the failure.
// In place, the rank's supervisor holds its exit (the pod turns unready) and the pods' restarts are timed.
func (r *run) gangRestart(ctx context.Context, seen *seenJobs, name string, ranks int, inPlace bool) (timed, error) {
	jobName := names.JobName(&mlv1.TrainingJob{ObjectMeta: metav1.ObjectMeta{Name: name}})
	_, oldUID := seen.jobAdded(jobName, "")
	recs := r.kl.records(name)
	slices.SortFunc(recs, func(a, b podRecord) int { return podRank(b.pod) - podRank(a.pod) })
	failed := time.Now()
	fail := r.kl.end
	if inPlace {
		fail = r.kl.hold
	}
	if err := fail(ctx, recs[0].pod, 137); err != nil {
		return timed{}, err
	}
	runningAgain := func() bool { return !seen.stateAt(name, 1, mlv1.StateRunning).IsZero() }
	if err := waitFor(ctx, 5*time.Minute, name+" Running again", runningAgain); err != nil {
		return timed{}, err
	}
	var p phases
	p.Detect = seen.stateAt(name, 1, "").Sub(failed).Seconds()
	p.Status = seen.stateAt(name, 1, mlv1.StateRunning).Sub(failed).Seconds()
	if inPlace {
		p = r.inPlacePhases(name, failed, ranks, p)
		w, err := r.writesBetween(failed, seen.stateAt(name, 1, mlv1.StateRunning))
		return timed{phases: p, writes: w}, err
	}
	pods := r.podPhases(name, failed, ranks)
	p.Pods, p.Scheduled, p.Running = pods.Pods, pods.Scheduled, pods.Running
	newAt, _ := seen.jobAdded(jobName, oldUID)
	p.Job = newAt.Sub(failed).Seconds()
	var gone, stopping, removed time.Time
	for _, rec := range r.kl.records(name) {
		if rec.added.Before(failed) {
			gone, stopping, removed = later(gone, rec.gone), later(stopping, rec.stopping), later(removed, rec.removed)
		}
	}
	p.Stopped = removed.Sub(failed).Seconds()
	p.Stopping = stopping.Sub(failed).Seconds()
	p.OldGone = gone.Sub(failed).Seconds()
	w, err := r.writesBetween(failed, seen.stateAt(name, 1, mlv1.StateRunning))
	return timed{phases: p, writes: w}, err
}

// podPhases returns the times from origin until the last of the ranks pods added after it was created, bound
// and reported Running.
func (r *run) podPhases(job string, origin time.Time, ranks int) phases {
	var created, bound, running time.Time
	n := 0
	for _, rec := range r.kl.records(job) {
		if !rec.added.After(origin) {
			continue
		}
		n++
		created, bound, running = later(created, rec.added), later(bound, rec.bound), later(running, rec.running)
	}
	if n < ranks {
		fmt.Fprintf(os.Stderr, "peer-bench: %s: %d of %d pods seen\n", job, n, ranks)
	}
	return phases{Pods: created.Sub(origin).Seconds(), Scheduled: bound.Sub(origin).Seconds(), Running: running.Sub(origin).Seconds()}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func podRank(p *corev1.Pod) int {
	var n int
	_, _ = fmt.Sscan(p.Labels[names.RankLabel], &n)
	return n
}

// inPlacePhases returns, for a restart in place, the time from origin until every pod of the job had begun
// restarting (as "old pods all stopping") and ran again (as "all Running"); a pod created after origin (there
// should be none) is reported.
func (r *run) inPlacePhases(job string, origin time.Time, ranks int, p phases) phases {
	var restarting, running time.Time
	n, created := 0, 0
	for _, rec := range r.kl.records(job) {
		if rec.added.After(origin) {
			created++
		}
		if rec.restarting.After(origin) && rec.running.After(origin) {
			n++
			restarting, running = later(restarting, rec.restarting), later(running, rec.running)
		}
	}
	if n < ranks || created > 0 {
		fmt.Fprintf(os.Stderr, "peer-bench: %s: %d of %d pods restarted in place, %d pods created\n", job, n, ranks, created)
	}
	p.Stopping, p.Running = restarting.Sub(origin).Seconds(), running.Sub(origin).Seconds()
	return p
}
