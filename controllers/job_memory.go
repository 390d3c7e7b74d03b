package controllers

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// memory is what the JobController remembers of its jobs between reconciles: one jobMemory per job,
// dropped by forget. It holds only what the API cannot tell; what a restart must keep lives in the
// API. It is safe for concurrent use.
type memory struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]*jobMemory
}

// jobMemory is what the JobController remembers of one TrainingJob. Each field says why the API
// cannot hold it and what an operator restart loses.
type jobMemory struct {
	// details is when the status was first seen to differ from what is written in details only
	// (detailsWait). The API holds what is written, not what waits. A restart waits one more interval
	// to write them.
	details pendingDetails
	// exits are the pods of the newest attempt the watch saw end with a non-zero code or deleted at
	// once while running (attemptExits). A deleted pod leaves the API. A restart judges on the pods
	// left.
	exits attemptExits
	// schedulable are the nodes read for a failing attempt (schedulable): a read of nodes, which the
	// cache does not hold. A restart reads them again.
	schedulable schedulableAt
	// announced is the attempt whose restart in place has had its event. Events are not read back. A
	// restart may send the event again.
	announced attemptMark
	// children are what the in-place restart remembers of the Job and its pods, by UID, bounded
	// (child).
	children map[types.UID]*childMemory
}

// childMemory is what the in-place restart remembers of one pod, or of the Job (labelled only).
type childMemory struct {
	// notHeld is the readiness (heldKey) at which the pod's supervisor said it held nothing: the pod
	// is asked again only once it changes. A restart asks every unready pod once more.
	notHeld string
	// misses are the asks in a row the supervisor left unanswered, lastMiss when the last was
	// (silentFor). A restart asks a silent supervisor at once.
	misses   int
	lastMiss time.Time
	// ordered is the attempt the pod was ordered into, replaced the one it was deleted for on an
	// avoided node (replaceAvoided). They keep a lagging cache from ordering or replacing the pod
	// twice. A restart orders again; the supervisor ignores a repeat.
	ordered, replaced attemptMark
	// labelled is the attempt the object was labelled with, labelledAt when (labelOnce): a cache that
	// does not show the label yet does not write it again. A restart writes it again.
	labelled   attemptMark
	labelledAt time.Time
}

// attemptMark is an attempt, or none.
type attemptMark struct {
	attempt int32
	set     bool
}

// is reports whether the mark is attempt.
func (m attemptMark) is(attempt int32) bool { return m.set && m.attempt == attempt }

func markOf(attempt int32) attemptMark { return attemptMark{attempt: attempt, set: true} }

// with runs f on the job's memory under the memory's lock.
func (m *memory) with(key types.NamespacedName, f func(*jobMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.jobs == nil {
		m.jobs = map[types.NamespacedName]*jobMemory{}
	}
	j := m.jobs[key]
	if j == nil {
		j = &jobMemory{}
		m.jobs[key] = j
	}
	f(j)
}

// peek runs f on the job's memory under the memory's lock, when there is one.
func (m *memory) peek(key types.NamespacedName, f func(*jobMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j := m.jobs[key]; j != nil {
		f(j)
	}
}

// forget drops what is remembered of a job.
func (m *memory) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.jobs, key)
}

// child returns what is remembered of the Job or pod uid of tj, nil when nothing is.
func (j *jobMemory) child(uid types.UID) *childMemory { return j.children[uid] }

// remember returns the entry for uid, creating it when missing. Past childBound(tj) entries, it
// drops the entries of pods that are not silent, then all of them.
func (j *jobMemory) remember(tj *mlv1.TrainingJob, uid types.UID) *childMemory {
	if c := j.children[uid]; c != nil {
		return c
	}
	if j.children == nil {
		j.children = map[types.UID]*childMemory{}
	}
	if len(j.children) >= childBound(tj) {
		for k, c := range j.children {
			if c.misses == 0 {
				delete(j.children, k)
			}
		}
	}
	if len(j.children) >= childBound(tj) {
		clear(j.children)
	}
	c := &childMemory{}
	j.children[uid] = c
	return c
}

// silentRoom returns how many more silent pods the job's memory takes.
func (j *jobMemory) silentRoom(tj *mlv1.TrainingJob) int {
	silent := 0
	for _, c := range j.children {
		if c.misses > 0 {
			silent++
		}
	}
	return max(0, childBound(tj)-silent)
}

// childBound is how many entries a job's memory holds: more pods than the job has had.
func childBound(tj *mlv1.TrainingJob) int { return 4*int(tj.Spec.NumWorkers) + 16 }

// pendingDetails is when a job's details were first seen to differ from what is written and, while
// they are back to it, since when; zero when none differ.
type pendingDetails struct {
	since, back time.Time
}

// schedulableAt are the schedulable nodes read for one attempt of one job; nodes is nil when none
// is read.
type schedulableAt struct {
	uid     types.UID
	attempt int32
	nodes   map[string]int32
}

// attemptExits are the remembered pods of one attempt, by UID: those that exited non-zero (pods),
// and those force-deleted while their trainer ran (forced, kept as first seen); ranks counts the
// pods kept of each rank.
type attemptExits struct {
	attempt int32
	// job is the UID of the Job whose pods are kept.
	job    types.UID
	pods   map[types.UID]corev1.Pod
	forced map[types.UID]corev1.Pod
	ranks  map[string]int
}

// newAttemptExits returns an empty memory of the exits of attempt's pods job made.
func newAttemptExits(attempt int32, job types.UID) attemptExits {
	return attemptExits{attempt: attempt, job: job, pods: map[types.UID]corev1.Pod{}, forced: map[types.UID]corev1.Pod{},
		ranks: map[string]int{}}
}

// has reports whether e keeps the pod with uid.
func (e attemptExits) has(uid types.UID) bool {
	_, exited := e.pods[uid]
	_, forced := e.forced[uid]
	return exited || forced
}

// full reports whether e keeps no further pod of rank: exitsPerRank of it, or maxKeptExits in all.
func (e attemptExits) full(rank string) bool {
	return e.ranks[rank] >= exitsPerRank || len(e.pods)+len(e.forced) >= maxKeptExits
}
