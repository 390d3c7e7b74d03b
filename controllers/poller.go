package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// What the StatusController and the CheckpointController share: both read an endpoint of rank 0
// once per interval per job.

// poller paces the reads of rank 0 and keeps, per job, the reader's state S between reads. The
// state is lost on restart, harmlessly.
type poller[S any] struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]*polled[S]
}

type polled[S any] struct {
	uid   types.UID
	last  time.Time
	state S
}

// due returns how long until the job's next read and the job's state. A wait of 0 means read now,
// and marks the read taken.
func (p *poller[S]) due(tj *mlv1.TrainingJob, now time.Time, interval time.Duration) (time.Duration, *S) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.jobs == nil {
		p.jobs = map[types.NamespacedName]*polled[S]{}
	}
	key := client.ObjectKeyFromObject(tj)
	s := p.jobs[key]
	if s == nil || s.uid != tj.UID {
		s = &polled[S]{uid: tj.UID}
		p.jobs[key] = s
	}
	if wait := s.last.Add(interval).Sub(now); !s.last.IsZero() && wait > 0 {
		return wait, &s.state
	}
	s.last = now
	return 0, &s.state
}

// next returns how long until the job's next read is due. The period counts from the start of the
// last read, so it does not drift.
func (p *poller[S]) next(tj *mlv1.TrainingJob, now time.Time, interval time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.jobs[client.ObjectKeyFromObject(tj)]; s != nil {
		return max(s.last.Add(interval).Sub(now), time.Millisecond)
	}
	return interval
}

// peek returns the job's state without taking a read; ok is false when none is remembered.
func (p *poller[S]) peek(tj *mlv1.TrainingJob) (S, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var zero S
	s := p.jobs[client.ObjectKeyFromObject(tj)]
	if s == nil || s.uid != tj.UID || s.last.IsZero() {
		return zero, false
	}
	return s.state, true
}

// with runs f on the job's state under the poller's lock.
func (p *poller[S]) with(s *S, f func(*S)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(s)
}

func (p *poller[S]) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.jobs, key)
}

// interval returns monitoring.scrapeIntervalSeconds, else def.
func interval(tj *mlv1.TrainingJob, def time.Duration) time.Duration {
	if m := tj.Spec.Monitoring; m.ScrapeIntervalSeconds != nil {
		return time.Duration(*m.ScrapeIntervalSeconds) * time.Second
	}
	return def
}
