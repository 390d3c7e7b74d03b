package controllers

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// rankReads bounds how many ranks' endpoints one stall reads at once.
const rankReads = 8

// ranksProgress reads every running rank's progress endpoint once, at most rankReads at a time,
// each within the scrape timeout. Only a stall reads ranks other than 0.
func (r *StatusReconciler) ranksProgress(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod) []derive.RankProgress {
	out := make([]derive.RankProgress, len(pods))
	sem := make(chan struct{}, rankReads)
	var wg sync.WaitGroup
	for i := range pods {
		p := &pods[i]
		out[i] = derive.RankProgress{Rank: p.Labels[names.RankLabel], Pod: p.Name, Node: p.Spec.NodeName}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			s, _, err := r.readProgress(ctx, tj, p.Status.PodIP, false)
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			out[i].Step, out[i].Epoch = s.Step, s.Epoch
		}()
	}
	wg.Wait()
	return out
}
