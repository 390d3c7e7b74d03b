package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Ordering the supervisors into an attempt, and the attempt labels that follow the orders.

// inPlaceOrder returns the order into tj's current attempt, with cm's RESUME_FROM.
func inPlaceOrder(tj *mlv1.TrainingJob, cm *corev1.ConfigMap) controlapi.Order {
	return controlapi.Order{Attempt: tj.Status.Attempt, GraceSeconds: orderGrace(tj), ResumeFrom: cm.Data[names.ResumeFromKey]}
}

// orderBehind orders the waiting replacements (supervisorAnswers.behind) into the current attempt,
// concurrently, once RESUME_FROM is settled for it. A repeated order changes nothing; a failed one
// counts as a miss (answered).
func (g gangRestart) orderBehind(ctx context.Context, tj *mlv1.TrainingJob, behind []corev1.Pod) error {
	if len(behind) == 0 {
		return nil
	}
	cm := &corev1.ConfigMap{}
	if err := g.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); err != nil {
		return fmt.Errorf("reading the ConfigMap to order a replaced worker: %w", err)
	}
	if tj.CheckpointEnabled() && !resumeSettled(tj, cm) {
		// The CheckpointController's write triggers a reconcile.
		return nil
	}
	token, o := builders.ControlToken(tj, g.opts), inPlaceOrder(tj, cm)
	log := ctrl.LoggerFrom(ctx)
	parallel(len(behind), orderWorkers, func(i int) {
		p := &behind[i]
		addr, order := podAddr(p, builders.SupervisorPort), controlapi.OrderToken(token, tokenPodUID(p), o)
		err := g.control.Restart(ctx, addr, order, o)
		// A supervisor that answers asks but takes no order is asked less often, as a silent one: its
		// wait runs from the order's end and doubles with each refusal.
		g.answered(tj, p, err == nil, g.clock.Now())
		if err != nil {
			log.V(1).Info("Ordering a replacement failed; asked again", "pod", klog.KObj(p), "error", err.Error())
			return
		}
		log.V(1).Info("Ordered a replacement into the attempt", "pod", klog.KObj(p), "attempt", o.Attempt)
		if key, ok := g.heldKey(p); ok {
			// It holds nothing until its containers restart.
			g.remember(tj, p.UID, func(c *childMemory) { c.notHeld = key })
		}
	})
	return nil
}

// orderPods orders every pod not yet labelled with o's attempt, then labels those that took it. It
// returns why a pod could not be ordered, or a label error to retry next reconcile.
func (g gangRestart) orderPods(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod, o controlapi.Order) (string, error) {
	took, failed := g.sendOrders(ctx, tj, pods, o)
	if failed != "" {
		return failed, nil
	}
	var mu sync.Mutex
	var errs []error
	parallel(len(pods), stopWorkers, func(i int) {
		if !took[i] {
			return
		}
		if err := g.labelOnce(ctx, tj, &pods[i], o.Attempt); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	return "", errors.Join(errs...)
}

// sendOrders sends o concurrently to the supervisors of pods not yet in its attempt, skipping pods
// an earlier reconcile ordered. took lists the pods now in the attempt; failed says why one was
// not.
func (g gangRestart) sendOrders(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod, o controlapi.Order) (
	took []bool, failed string) {
	token := builders.ControlToken(tj, g.opts)
	var mu sync.Mutex
	took = make([]bool, len(pods))
	sent := 0
	parallel(len(pods), orderWorkers, func(i int) {
		p := &pods[i]
		if names.JobAttempt(p) == o.Attempt {
			return
		}
		took[i] = true
		if g.child(tj, p.UID).ordered.is(o.Attempt) {
			return
		}
		addr, order := podAddr(p, builders.SupervisorPort), controlapi.OrderToken(token, tokenPodUID(p), o)
		err := g.control.Restart(ctx, addr, order, o)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed, took[i] = fmt.Sprintf("pod %s: %v", p.Name, err), false
			return
		}
		sent++
		g.remember(tj, p.UID, func(c *childMemory) { c.ordered = markOf(o.Attempt) })
	})
	ctrl.LoggerFrom(ctx).V(1).Info("Ordered the workers into the attempt", "attempt", o.Attempt, "orders", sent,
		"resumeFrom", o.ResumeFrom, "graceSeconds", o.GraceSeconds, "failed", failed)
	return took, failed
}

// orderWorkers is how many supervisors the JobController orders at once.
const orderWorkers = 64

// attemptLabelPatch sets the attempt label.
const attemptLabelPatch = `{"metadata":{"labels":{%q:%q}}}`

// labelOnce sets the attempt label of a pod or the Job once per labelledFor, so a lagging cache
// does not cause a second write.
func (g gangRestart) labelOnce(ctx context.Context, tj *mlv1.TrainingJob, obj client.Object, attempt int32) error {
	now := g.clock.Now()
	if c := g.child(tj, obj.GetUID()); c.labelled.is(attempt) && now.Sub(c.labelledAt) < labelledFor {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, attemptLabelPatch, names.AttemptLabel, strconv.Itoa(int(attempt))))
	if err := g.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("labelling %s with attempt %d: %w", klog.KObj(obj), attempt, err)
	}
	g.remember(tj, obj.GetUID(), func(c *childMemory) { c.labelled, c.labelledAt = markOf(attempt), now })
	return nil
}

// labelledFor is how long a label written is taken as there while the cache does not show it.
const labelledFor = 10 * time.Second
