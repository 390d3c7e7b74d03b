package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	benchkit "github.com/trainingjob-operator/trainingjob-operator/tests/performance/bench"
)

// jobSeen is what the bench's watches saw of one TrainingJob and its children, and when.
type jobSeen struct {
	submitted, job time.Time
	service, cm    bool
	state          mlv1.State
	jobObj         *batchv1.Job
}

func (j *jobSeen) wired() bool { return !j.job.IsZero() && j.service && j.cm && j.state != "" }

// seen collects the watches' events by TrainingJob name.
type seen struct {
	mu   sync.Mutex
	jobs map[string]*jobSeen
}

// watchAll watches the bench namespace's TrainingJobs, Jobs, Services and ConfigMaps until ctx is done.
func watchAll(ctx context.Context, k client.WithWatch) (*seen, error) {
	s := &seen{jobs: map[string]*jobSeen{}}
	lists := []func() client.ObjectList{
		func() client.ObjectList { return &mlv1.TrainingJobList{} }, func() client.ObjectList { return &batchv1.JobList{} },
		func() client.ObjectList { return &corev1.ServiceList{} }, func() client.ObjectList { return &corev1.ConfigMapList{} },
	}
	for _, newList := range lists {
		w, err := k.Watch(ctx, newList(), client.InNamespace(ns))
		if err != nil {
			return nil, err
		}
		go s.follow(ctx, k, newList, w)
	}
	return s, nil
}

// follow consumes a watch; when the API server ends it (it drops a watcher that falls behind a burst),
// it lists what it may have missed and watches again from there.
func (s *seen) follow(ctx context.Context, k client.WithWatch, newList func() client.ObjectList, w watch.Interface) {
	for ctx.Err() == nil {
		s.consume(w)
		l := newList()
		if err := k.List(ctx, l, client.InNamespace(ns)); err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			s.observe(o, time.Now())
			return nil
		})
		var err error
		from := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.GetResourceVersion()}}
		if w, err = k.Watch(ctx, newList(), client.InNamespace(ns), from); err != nil {
			w = watch.NewEmptyWatch()
		}
	}
}

func (s *seen) get(name string) *jobSeen {
	j, ok := s.jobs[name]
	if !ok {
		j = &jobSeen{}
		s.jobs[name] = j
	}
	return j
}

func (s *seen) submitted(name string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(name).submitted = at
}

func (s *seen) consume(w watch.Interface) {
	for ev := range w.ResultChan() {
		if ev.Type == watch.Added || ev.Type == watch.Modified {
			s.observe(ev.Object, time.Now())
		}
	}
}

func (s *seen) observe(obj runtime.Object, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch o := obj.(type) {
	case *mlv1.TrainingJob:
		j := s.get(o.Name)
		if o.Status.State != j.state {
			j.state = o.Status.State
		}
	case *batchv1.Job:
		j := s.get(o.Labels[names.NameLabel])
		if j.job.IsZero() {
			j.job = now
		}
		j.jobObj = o
	case *corev1.Service:
		s.get(o.Labels[names.NameLabel]).service = true
	case *corev1.ConfigMap:
		if name, ok := o.Labels[names.NameLabel]; ok {
			s.get(name).cm = true
		}
	}
}

// wait waits until ok holds for every submitted job and returns when the last one came to hold.
func (s *seen) wait(timeout time.Duration, what string, ok func(*jobSeen) bool) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		good, submitted := 0, 0
		for _, j := range s.jobs {
			if j.submitted.IsZero() {
				continue
			}
			submitted++
			if ok(j) {
				good++
			}
		}
		s.mu.Unlock()
		if good == submitted && submitted > 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: %d of %d after %s (seen: %s)", what, good, submitted, timeout, s.summary())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// submitToJob returns the p50 and p99 in seconds from a job's submission to its Job, over jobs from..to-1.
func (s *seen) submitToJob(from, to int) [2]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ds []time.Duration
	for i := from; i < to; i++ {
		if j, ok := s.jobs[jobName(i)]; ok && !j.job.IsZero() {
			ds = append(ds, j.job.Sub(j.submitted))
		}
	}
	q := benchkit.Quantiles(ds)
	return [2]float64{q[0].Seconds(), q[1].Seconds()}
}

// job returns the last Job seen for a TrainingJob.
func (s *seen) job(name string) *batchv1.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobs[name].jobObj.DeepCopy()
}

// summary counts what the watches saw, for an error message.
func (s *seen) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var jobs, services, cms, states int
	for _, j := range s.jobs {
		if !j.job.IsZero() {
			jobs++
		}
		if j.service {
			services++
		}
		if j.cm {
			cms++
		}
		if j.state != "" {
			states++
		}
	}
	return fmt.Sprintf("%d Jobs, %d Services, %d ConfigMaps, %d states", jobs, services, cms, states)
}
