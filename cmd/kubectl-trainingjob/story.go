package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
)

// story renders a TrainingJob for people, in the order they ask: what state and why, how far, how well,
// on what, where its checkpoints and its MLflow run are, then the conditions, the events and the workers.
// It is pure (now is the time ages count from).
func story(tj *mlv1.TrainingJob, pods []corev1.Pod, events []corev1.Event, now time.Time) string {
	tj = goodputNow(tj, now)
	var b strings.Builder
	st := tj.Status
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "TrainingJob\t%s/%s\n", tj.Namespace, tj.Name)
	fmt.Fprintf(w, "State\t%s\n", stateLine(tj))
	if st.FailureReason != "" {
		fmt.Fprintf(w, "Failure\t%s\n", strings.ReplaceAll(st.FailureReason, "\n", "\n\t"))
	}
	gpus := "CPU only"
	if n := tj.GPUsPerWorker(); n > 0 {
		gpus = fmt.Sprintf("%d GPUs each", n)
	}
	fmt.Fprintf(w, "Trains\t%s%s, %d workers, %s\n", trainsWhat(tj), tj.Spec.Framework, tj.Spec.NumWorkers, gpus)
	if l := inputsLine(tj); l != "" {
		fmt.Fprintf(w, "Inputs\t%s\n", l)
	}
	fmt.Fprintf(w, "Progress\t%s\n", progressLine(st, now))
	if m := metricsLine(st.Metrics, st.CurrentEpoch); m != "" {
		fmt.Fprintf(w, "Metrics\t%s\n", m)
	}
	ws := st.Workers
	fmt.Fprintf(w, "Workers\t%d active, %d ready, %d pending, %d succeeded, %d failed (attempt %d, %d restarts)\n",
		ws.Active, ws.Ready, ws.Pending, ws.Succeeded, ws.Failed, st.Attempt, st.RestartCount)
	if st.LastFailure != "" {
		fmt.Fprintf(w, "Last restart\t%s\n", st.LastFailure)
	}
	if l := goodputLine(tj); l != "" {
		fmt.Fprintf(w, "Goodput\t%s\n", l)
	}
	if c := st.Checkpoint; c != nil {
		fmt.Fprintf(w, "Checkpoint\tepoch %d, %d kept, written %s ago: %s\n", c.LatestEpoch, c.Count, ago(toSecond(c.LastTime), now), c.Latest)
	} else if tj.CheckpointEnabled() {
		fmt.Fprintf(w, "Checkpoint\tnone yet\n")
	}
	if m := st.MLflow; m != nil {
		fmt.Fprintf(w, "MLflow\t%s (run %s, %s, epoch %d logged)\n", m.URL, m.RunID, m.RunStatus, m.LoggedEpoch)
	}
	_ = w.Flush()

	b.WriteString("\nConditions:\n")
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, c := range st.Conditions {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, ago(&c.LastTransitionTime, now), firstLine(c.Message))
	}
	_ = w.Flush()

	b.WriteString("\nEvents:\n")
	if len(events) == 0 {
		b.WriteString("  <none>\n")
	}
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	if len(events) > 0 {
		fmt.Fprintln(w, "  AGE\tTYPE\tREASON\tMESSAGE")
	}
	for _, e := range events {
		t := metav1.NewTime(eventTime(e))
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", ago(&t, now), e.Type, e.Reason, firstLine(e.Message))
	}
	_ = w.Flush()

	fmt.Fprintf(&b, "\nWorkers of attempt %d:\n", st.Attempt)
	if len(pods) == 0 {
		b.WriteString("  <none>\n")
		return b.String()
	}
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  RANK\tPOD\tPHASE\tNODE\tRESTARTS")
	for _, p := range pods {
		restarts := int32(0)
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%d\n", p.Labels[names.RankLabel], p.Name, p.Status.Phase, orDash(p.Spec.NodeName), restarts)
	}
	_ = w.Flush()
	return b.String()
}

// stateLine returns the state with the reason and message of the condition that explains it.
func stateLine(tj *mlv1.TrainingJob) string {
	st := tj.Status
	if st.State == "" {
		return "New (not seen by the operator yet)"
	}
	explain := string(st.State)
	switch st.State {
	case mlv1.StatePending, mlv1.StateInitializing, mlv1.StateRunning:
		explain = mlv1.ConditionRunning
	}
	for _, c := range st.Conditions {
		if c.Type == explain && c.Reason != "" {
			return fmt.Sprintf("%s (%s: %s)", st.State, c.Reason, firstLine(c.Message))
		}
	}
	return string(st.State)
}

// trainsWhat returns "MODEL on DATASET, " when the job names them (a script of one's own may not).
func trainsWhat(tj *mlv1.TrainingJob) string {
	if tj.Spec.Model == "" && tj.Spec.Dataset == "" {
		return ""
	}
	return orDash(tj.Spec.Model) + " on " + orDash(tj.Spec.Dataset) + ", "
}

func progressLine(st mlv1.TrainingJobStatus, now time.Time) string {
	parts := []string{orDash(st.Progress)}
	if st.TotalEpochs > 0 {
		parts = append(parts, fmt.Sprintf("epoch %d/%d", st.CurrentEpoch, st.TotalEpochs))
	}
	if st.ETA != "" {
		parts = append(parts, "ETA "+st.ETA)
	}
	if st.LastProgressTime != nil {
		parts = append(parts, "read "+ago(st.LastProgressTime, now)+" ago")
	}
	if st.Duration != "" {
		parts = append(parts, "ran "+st.Duration)
	}
	if src := sourceWords(st); src != "" {
		parts = append(parts, src)
	}
	return strings.Join(parts, ", ")
}

// sourceWords says where progress comes from when it is not rank 0's endpoint: its output, or nowhere.
func sourceWords(st mlv1.TrainingJobStatus) string {
	c := meta.FindStatusCondition(st.Conditions, mlv1.ConditionProgressReported)
	switch {
	case c == nil:
		return ""
	case c.Reason == derive.ReasonFromOutput:
		format := ""
		if i := strings.LastIndex(c.Message, " ("); i >= 0 {
			format = " " + c.Message[i+1:]
		}
		return "from rank 0's output" + format
	case c.Reason == derive.ReasonNoProgressSource:
		return "no progress source: rank 0 serves no figures and prints no line recognised as progress (see the ProgressReported condition)"
	}
	return ""
}

// metricsLine lists rank 0's metrics, saying of which epoch when the status's epoch is past it (a run that
// ended between two reads).
func metricsLine(m *mlv1.TrainingMetrics, epoch int32) string {
	if m == nil {
		return ""
	}
	var parts []string
	for _, kv := range []struct {
		name string
		v    *float64
	}{
		{"loss", m.Loss}, {"accuracy", m.Accuracy}, {"learning rate", m.LearningRate},
		{"samples/s", m.Throughput}, {"GPU %", m.GPUUtilization},
	} {
		if kv.v != nil {
			parts = append(parts, kv.name+" "+strconv.FormatFloat(*kv.v, 'g', 4, 64))
		}
	}
	names := make([]string, 0, len(m.Custom))
	for k := range m.Custom {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		parts = append(parts, k+" "+m.Custom[k])
	}
	line := strings.Join(parts, ", ")
	if m.Epoch > 0 && m.Epoch < epoch && line != "" {
		line += fmt.Sprintf(" (read at epoch %d)", m.Epoch)
	}
	return line
}

// checkpointStory returns the `checkpoints` command's output.
func checkpointStory(tj *mlv1.TrainingJob, resumeFrom string, now time.Time) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "TrainingJob\t%s/%s\n", tj.Namespace, tj.Name)
	if !tj.CheckpointEnabled() {
		fmt.Fprintf(w, "Checkpoints\toff (spec.checkpoint.enabled)\n")
		_ = w.Flush()
		return b.String()
	}
	storage := tj.Status.CheckpointStorage
	if c := tj.Spec.Checkpoint; c != nil && c.Storage != nil {
		storage = c.Storage
	}
	fmt.Fprintf(w, "Storage\t%s\n", storageLine(storage, tj))
	if c := tj.Status.Checkpoint; c != nil {
		fmt.Fprintf(w, "Newest\t%s (epoch %d, %d bytes, written %s ago)\n", c.Latest, c.LatestEpoch, c.SizeBytes, ago(toSecond(c.LastTime), now))
		fmt.Fprintf(w, "Kept\t%d\n", c.Count)
	} else {
		fmt.Fprintf(w, "Newest\tnone yet\n")
	}
	fmt.Fprintf(w, "Workers resume from\t%s\n", orText(resumeFrom, "nothing (they start fresh)"))
	_ = w.Flush()
	return b.String()
}

func storageLine(s *mlv1.CheckpointStorage, tj *mlv1.TrainingJob) string {
	if s == nil {
		return "not chosen yet"
	}
	switch s.Type {
	case mlv1.StorageS3:
		return fmt.Sprintf("s3://%s/%s", s.S3Bucket, s.Prefix)
	case mlv1.StorageGCS:
		return fmt.Sprintf("gs://%s/%s", s.GCSBucket, s.Prefix)
	}
	claim := s.ClaimName
	if claim == "" {
		claim = names.CheckpointClaimName(tj)
	}
	return fmt.Sprintf("%s claim %s", s.Type, claim)
}

// toSecond returns a time kept to the microsecond as one kept to the second (nil for nil).
func toSecond(t *metav1.MicroTime) *metav1.Time {
	if t == nil {
		return nil
	}
	return &metav1.Time{Time: t.Time}
}

func ago(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func orDash(s string) string { return orText(s, "-") }

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// inputsLine says where the fetched model and dataset stand: InputsReady's message while they are fetched
// or when they failed ("fetching dataset s3://… 1.2 GiB of 3.4 GiB"), the bytes once ready; "" when the job
// fetches nothing.
func inputsLine(tj *mlv1.TrainingJob) string {
	c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionInputsReady)
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s: %s", c.Reason, firstLine(c.Message))
}

// goodputNow returns tj with its goodput as of now (derive.GoodputAt): the status holds it as of the last
// write, which the operator makes only when something else changes.
func goodputNow(tj *mlv1.TrainingJob, now time.Time) *mlv1.TrainingJob {
	live := derive.GoodputAt(tj, now)
	if live == tj.Status.Goodput {
		return tj
	}
	c := *tj
	c.Status.Goodput = live
	return &c
}

// goodputLine tells where the job's time went, largest badput first: "82% goodput: 6m queued, 3m
// restarting (3 restarts), 4m of training done again after restarts; 1.5 of 2.0 GPU-hours productive".
// Time the workers ran with no progress source comes first, saying why its productivity is unknown.
func goodputLine(tj *mlv1.TrainingJob) string {
	g := tj.Status.Goodput
	if g == nil || g.Percent == "" {
		return ""
	}
	b := g.BadputSeconds
	parts := []struct {
		secs float64
		what string
	}{
		{b.Queued, "queued"}, {b.Scheduling, "scheduling and pulling images"}, {b.Startup, "starting up"},
		{b.Restart, restartWords(tj.Status)}, {b.LostWork, "of training done again after restarts"},
		{b.Hang, "hung"}, {b.Checkpoint, "saving checkpoints"},
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].secs > parts[j].secs })
	var said []string
	for _, p := range parts {
		if p.secs >= 1 {
			said = append(said, seconds(p.secs)+" "+p.what)
		}
	}
	if u := unknownWords(tj); u != "" && len(said) > 0 {
		said = []string{u + "; " + strings.Join(said, ", ")}
	} else if u != "" {
		said = []string{u}
	}
	line := g.Percent + " goodput"
	if len(said) > 0 {
		line += ": " + strings.Join(said, ", ")
	}
	line += gpuHoursWords(g)
	if g.Category != "" && g.Category != mlv1.GoodputProductive && g.Category != mlv1.GoodputUnknown {
		line += " (now: " + strings.ToLower(g.Category) + ")"
	}
	return line
}

// unknownWords says that productive time is unknown, for how long the workers ran with no progress
// source and why; "" when they did not (for a second or more).
func unknownWords(tj *mlv1.TrainingJob) string {
	g := tj.Status.Goodput
	if g.UnknownSeconds < 1 {
		return ""
	}
	why := "the program serves no progress endpoint and prints nothing recognised as progress"
	if c := meta.FindStatusCondition(tj.Status.Conditions, mlv1.ConditionProgressReported); c != nil && c.Reason == derive.ReasonScrapeFailed {
		why = "rank 0's progress could never be read"
	}
	if m := tj.Spec.Monitoring; m != nil && m.Enabled != nil && !*m.Enabled {
		why = "monitoring.enabled is false: progress is not read"
	}
	ran := "ran"
	if g.Category == mlv1.GoodputUnknown {
		ran = "have run"
	}
	return fmt.Sprintf("productive time unknown for the %s the workers %s with no progress source (%s)", seconds(g.UnknownSeconds), ran, why)
}

// gpuHoursWords returns the GPU-hours held and how many were productive (at least, when some time is unknown).
func gpuHoursWords(g *mlv1.GoodputStatus) string {
	switch {
	case g.GPUSeconds <= 0:
		return ""
	case g.UnknownSeconds >= 1 && g.ProductiveGPUSeconds <= 0:
		return fmt.Sprintf("; %.1f GPU-hours held", g.GPUSeconds/3600)
	case g.UnknownSeconds >= 1:
		return fmt.Sprintf("; at least %.1f of %.1f GPU-hours productive", g.ProductiveGPUSeconds/3600, g.GPUSeconds/3600)
	}
	return fmt.Sprintf("; %.1f of %.1f GPU-hours productive", g.ProductiveGPUSeconds/3600, g.GPUSeconds/3600)
}

func seconds(s float64) string {
	return duration.HumanDuration(time.Duration(s * float64(time.Second)))
}

// restartWords names the gang restarts (every attempt after the first) and, when some were not counted
// against backoffLimit (a disruption: preemption, a lost node, a pod deleted at once), how many were.
func restartWords(st mlv1.TrainingJobStatus) string {
	n, counted := max(st.Attempt, st.RestartCount), st.RestartCount
	words := fmt.Sprintf("%d restarts", n)
	if n == 1 {
		words = "1 restart"
	}
	switch counted {
	case n:
		return "restarting (" + words + ")"
	case 0:
		return "restarting (" + words + ", not counted)"
	}
	return fmt.Sprintf("restarting (%s, %d counted)", words, counted)
}
