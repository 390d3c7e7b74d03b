package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/derive"
	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
)

// inputsRecheck is how often the JobController reads rank 0's fetch progress while it fetches; the
// kubelet reports nothing in between.
const inputsRecheck = 2 * time.Second

// inputsClient reads the fetchers' progress endpoints, with a short timeout so a slow pod cannot
// hold a reconcile.
var inputsClient = &http.Client{Timeout: 2 * time.Second}

// inputsProgress returns what rank 0's running fetch-inputs container reports (GET /status). It
// returns nil when the job fetches nothing or the container does not run or answer; the fetch's end
// comes from the pod's status.
func inputsProgress(ctx context.Context, tj *mlv1.TrainingJob, pods []corev1.Pod) []inputs.Status {
	if len(builders.FetchedInputs(tj)) == 0 {
		return nil
	}
	pod, cs := derive.Rank0Fetcher(pods)
	if cs == nil || cs.State.Running == nil || pod.Status.PodIP == "" {
		return nil
	}
	url := fmt.Sprintf("http://%s/status", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(builders.InputsPort))))
	var out []inputs.Status
	if err := getJSON(ctx, url, &out); err != nil {
		log.FromContext(ctx).V(1).Info("rank 0's fetch progress is not readable", "pod", pod.Name, "error", err)
		return nil
	}
	return out
}

// maxInputsAnswer bounds the fetcher's answer, which is well under 1 KiB, so a pod cannot exhaust
// the operator's memory.
const maxInputsAnswer = 64 << 10

// getJSON decodes url's answer, reading at most maxInputsAnswer bytes of it.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := inputsClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxInputsAnswer)).Decode(v)
}
