package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

func (x *cli) get(ctx context.Context, name string) (*mlv1.TrainingJob, error) {
	tj := &mlv1.TrainingJob{}
	if err := x.c.Get(ctx, client.ObjectKey{Namespace: x.namespace, Name: name}, tj); err != nil {
		return nil, fmt.Errorf("trainingjob %s/%s: %w", x.namespace, name, err)
	}
	tj.Default()
	return tj, nil
}

// pods returns the job's worker pods of its current attempt, by rank.
func (x *cli) pods(ctx context.Context, tj *mlv1.TrainingJob) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := x.c.List(ctx, &list, client.InNamespace(tj.Namespace), client.MatchingLabels{
		names.NameLabel: tj.Name, names.AttemptLabel: strconv.Itoa(int(tj.Status.Attempt))}); err != nil {
		return nil, fmt.Errorf("listing the workers of %s: %w", tj.Name, err)
	}
	pods := list.Items
	sort.Slice(pods, func(i, j int) bool {
		a, _ := strconv.Atoi(pods[i].Labels[names.RankLabel])
		b, _ := strconv.Atoi(pods[j].Labels[names.RankLabel])
		return a < b || a == b && pods[i].CreationTimestamp.After(pods[j].CreationTimestamp.Time)
	})
	return pods, nil
}

// events returns the events recorded about the object, oldest first.
func (x *cli) events(ctx context.Context, obj client.Object) ([]corev1.Event, error) {
	list, err := x.cs.CoreV1().Events(obj.GetNamespace()).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(obj.GetUID())).String()})
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	events := list.Items
	sort.SliceStable(events, func(i, j int) bool { return eventTime(events[i]).Before(eventTime(events[j])) })
	return events, nil
}

func (x *cli) status(ctx context.Context, name string) error {
	tj, err := x.get(ctx, name)
	if err != nil {
		return err
	}
	pods, err := x.pods(ctx, tj)
	if err != nil {
		return err
	}
	events, err := x.events(ctx, tj)
	if err != nil {
		return err
	}
	_, err = io.WriteString(x.out, story(tj, pods, events, x.now))
	return err
}

func (x *cli) checkpoints(ctx context.Context, name string) error {
	tj, err := x.get(ctx, name)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	if err := x.c.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: names.ConfigMapName(tj)}, cm); client.IgnoreNotFound(err) != nil {
		return err
	}
	_, err = io.WriteString(x.out, checkpointStory(tj, cm.Data[names.ResumeFromKey], x.now))
	return err
}

// logs copies the log of the rank's trainer container, in the current attempt's pod.
func (x *cli) logs(ctx context.Context, name string, o options) error {
	tj, err := x.get(ctx, name)
	if err != nil {
		return err
	}
	pods, err := x.pods(ctx, tj)
	if err != nil {
		return err
	}
	pod := rankPod(pods, o.rank)
	if pod == nil {
		return fmt.Errorf("trainingjob %s has no pod of rank %d in attempt %d (%d workers, state %s)",
			name, o.rank, tj.Status.Attempt, tj.Spec.NumWorkers, tj.Status.State)
	}
	opts := &corev1.PodLogOptions{Container: names.ContainerName, Follow: o.follow}
	if o.tail >= 0 {
		opts.TailLines = &o.tail
	}
	stream, err := x.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("log of rank %d (pod %s): %w", o.rank, pod.Name, err)
	}
	defer stream.Close()
	_, err = io.Copy(x.out, stream)
	return err
}

// rankPod returns the newest pod of the rank among pods (sorted by pods).
func rankPod(pods []corev1.Pod, rank int) *corev1.Pod {
	for i := range pods {
		if pods[i].Labels[names.RankLabel] == strconv.Itoa(rank) {
			return &pods[i]
		}
	}
	return nil
}

func (x *cli) setSuspend(ctx context.Context, name string, suspend bool) error {
	tj, err := x.get(ctx, name)
	if err != nil {
		return err
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)))
	if err := x.c.Patch(ctx, tj, patch); err != nil {
		return fmt.Errorf("setting suspend=%t on trainingjob %s: %w", suspend, name, err)
	}
	if suspend {
		fmt.Fprintf(x.out, "trainingjob %s/%s suspended: its workers stop; "+
			"`kubectl trainingjob resume %s` continues from the newest checkpoint\n", tj.Namespace, name, name)
	} else {
		fmt.Fprintf(x.out, "trainingjob %s/%s resumed\n", tj.Namespace, name)
	}
	return nil
}
