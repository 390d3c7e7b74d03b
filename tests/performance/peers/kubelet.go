package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// nodeName is the one node the played kubelet runs every pod on.
const nodeName = "bench-node"

// podRecord is what the played kubelet saw of one pod, and when.
type podRecord struct {
	pod                         *corev1.Pod
	job                         string
	added, bound, running, gone time.Time
	// stopping is when the pod's deletion was first seen.
	stopping time.Time
	// removed is when the played kubelet's final delete (grace 0) was answered; restarting when it began
	// restarting the pod's containers in place.
	removed, restarting time.Time
	deleting, ended     bool
}

// kubelet plays the scheduler and the kubelet for the bench namespace, the same for every operator and at
// the cost the real ones have at least: a new pod is bound to the node (one binding, as the scheduler
// writes) and reported Running and Ready (one status write, as a kubelet's first); a pod being deleted is
// removed stopDelay later (the graceful stop of its containers; one delete, as a kubelet's last). finish and
// fail write a pod's end as a kubelet would.
type kubelet struct {
	cs        kubernetes.Interface
	stopDelay time.Duration
	jobOf     func(*corev1.Pod) string
	work      chan func()
	mu        sync.Mutex
	// pods are every pod seen, by job; a deleted pod's record stays (gone set).
	pods map[string]map[types.UID]*podRecord
	// sup are the pods' played supervisors (inplace.go).
	sup supervisors
}

// startKubelet registers the node and starts the played kubelet with workers goroutines until ctx is done.
func startKubelet(ctx context.Context, cs kubernetes.Interface, stopDelay time.Duration, jobOf func(*corev1.Pod) string) (*kubelet, error) {
	if err := createNode(ctx, cs); err != nil {
		return nil, err
	}
	k := &kubelet{cs: cs, stopDelay: stopDelay, jobOf: jobOf, work: make(chan func(), 1<<16),
		pods: map[string]map[types.UID]*podRecord{}, sup: supervisors{byIP: map[string]*played{}}}
	if err := k.serveSupervisors(ctx); err != nil {
		return nil, err
	}
	for w := 0; w < clients; w++ {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case f := <-k.work:
					f()
				}
			}
		}()
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.observe(o.(*corev1.Pod), false) },
		UpdateFunc: func(_, o any) { k.observe(o.(*corev1.Pod), false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				k.observe(p, true)
			}
		},
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the played kubelet's pod informer did not sync")
	}
	return k, nil
}

func createNode(ctx context.Context, cs kubernetes.Interface) error {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resourceQty("10000"), corev1.ResourceMemory: resourceQty("100Ti"),
		corev1.ResourcePods: resourceQty("100000")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}}
	node, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	// As a kubelet 1.36 declares it: the operator then restarts gangs in place where a job asks (the
	// scheduler places pods with a RestartAllContainers rule only on such nodes).
	node.Status.DeclaredFeatures = []string{"RestartAllContainersOnContainerExits"}
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func (k *kubelet) observe(p *corev1.Pod, deleted bool) {
	now, job := time.Now(), k.jobOf(p)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pods[job] == nil {
		k.pods[job] = map[types.UID]*podRecord{}
	}
	r := k.pods[job][p.UID]
	if r == nil {
		r = &podRecord{job: job, added: now}
		k.pods[job][p.UID] = r
		if !deleted && p.DeletionTimestamp == nil {
			k.work <- func() { k.run(p) }
		}
	}
	r.pod = p
	switch {
	case deleted:
		r.gone = now
	case p.DeletionTimestamp != nil && !r.deleting:
		r.deleting, r.stopping = true, now
		k.remove(p)
	}
}

// mark records the time of a step of the pod (bound, running) or that it ended.
func (k *kubelet) mark(p *corev1.Pod, step func(r *podRecord)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r := k.pods[k.jobOf(p)][p.UID]; r != nil {
		step(r)
	}
}

// records returns copies of the job's pod records.
func (k *kubelet) records(job string) []podRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]podRecord, 0, len(k.pods[job]))
	for _, r := range k.pods[job] {
		out = append(out, *r)
	}
	return out
}

// run binds a new pod to the node and reports it Running and Ready.
func (k *kubelet) run(p *corev1.Pod) {
	ctx := context.Background()
	if p.Spec.NodeName == "" {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: nodeName}}
		if err := k.cs.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			return // deleted meanwhile
		}
	}
	k.mark(p, func(r *podRecord) { r.bound = time.Now() })
	now := metav1.Now()
	ip := k.sup.podIP(p)
	st := corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	for _, c := range p.Spec.InitContainers {
		s := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}}}
		if ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways {
			s.State, s.Ready, s.Started = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}, true, ptr.To(true)
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, s)
	}
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	if k.patchStatus(ctx, p, st) == nil {
		k.mark(p, func(r *podRecord) { r.running = time.Now() })
	}
}

func (k *kubelet) patchStatus(ctx context.Context, p *corev1.Pod, st corev1.PodStatus) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID}, "status": st})
	if err != nil {
		return err
	}
	_, err = k.cs.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}

// remove ends a pod being deleted after the graceful stop, as a kubelet does once its containers exited
// (at once when they had: a pod that succeeded or failed).
func (k *kubelet) remove(p *corev1.Pod) {
	var delay time.Duration
	if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		delay = k.stopDelay
	}
	time.AfterFunc(delay, func() { k.work <- func() { k.delete(p) } })
}

func (k *kubelet) delete(p *corev1.Pod) {
	err := k.cs.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
		Preconditions: &metav1.Preconditions{UID: &p.UID}})
	k.mark(p, func(r *podRecord) { r.removed = time.Now() })
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		fmt.Println("peer-bench: played kubelet: deleting", p.Name+":", err)
	}
}

// end reports the pod's containers exited with code (0: Succeeded, else Failed), as a kubelet does.
func (k *kubelet) end(ctx context.Context, p *corev1.Pod, code int32) error {
	now := metav1.Now()
	st := corev1.PodStatus{Phase: corev1.PodSucceeded, HostIP: "127.0.0.1", PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}},
		StartTime: p.Status.StartTime,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}}}
	reason := "Completed"
	if code != 0 {
		st.Phase, reason = corev1.PodFailed, "Error"
	}
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: now}}})
	}
	k.mark(p, func(r *podRecord) { r.ended = true })
	return k.patchStatus(ctx, p, st)
}
