package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeReadiness runs a main container's HTTP readiness probe as the kubelet does while the container runs
// (until exited closes): the container is unready until the probe succeeds successThreshold times in a
// row, and again after failureThreshold failures; a change is written at once. Other probe kinds are not
// run: the container stays unready, as it would on a kubelet whose probe never passes.
func (r *podRun) probeReadiness(ctx context.Context, c *corev1.Container, exited <-chan struct{}) {
	pr := c.ReadinessProbe
	if pr.HTTPGet == nil {
		return
	}
	url := fmt.Sprintf("http://%s%s", net.JoinHostPort(PodAddr(r.pod).String(), probePort(c, pr.HTTPGet.Port)), pr.HTTPGet.Path)
	client := &http.Client{Timeout: seconds(pr.TimeoutSeconds, 1)}
	tick := time.NewTimer(seconds(pr.InitialDelaySeconds, 0))
	defer tick.Stop()
	ready, streak := false, 0
	for {
		select {
		case <-exited:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ok := probeOnce(ctx, client, url)
		if ok != ready {
			streak++
		} else {
			streak = 0
		}
		if need := threshold(pr, !ready); streak >= need {
			ready, streak = ok, 0
			r.update(func(s *corev1.PodStatus) { setReady(s, c.Name, ready) })
			_ = r.writeStatus(ctx)
		}
		tick.Reset(seconds(pr.PeriodSeconds, 10))
	}
}

// threshold returns how many results in a row change readiness: successThreshold to become ready,
// failureThreshold to stop being so (the API server's defaults, 1 and 3, when unset).
func threshold(pr *corev1.Probe, toReady bool) int {
	if toReady {
		return int(max(pr.SuccessThreshold, 1))
	}
	if pr.FailureThreshold <= 0 {
		return 3
	}
	return int(pr.FailureThreshold)
}

// probeOnce says whether one GET succeeded: a status from 200 to 399.
func probeOnce(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// probePort returns the port a probe names: a number, or the name of one of the container's ports.
func probePort(c *corev1.Container, p intstr.IntOrString) string {
	if p.Type == intstr.Int {
		return strconv.Itoa(p.IntValue())
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return strconv.Itoa(int(cp.ContainerPort))
		}
	}
	return p.StrVal
}

// seconds returns n seconds, or def seconds when n is not set.
func seconds(n int32, def int32) time.Duration {
	if n <= 0 {
		n = def
	}
	return time.Duration(n) * time.Second
}

// setReady sets a main container's readiness and the pod's conditions that follow from it.
func setReady(s *corev1.PodStatus, name string, ready bool) {
	cs := containerStatus(s, name, false)
	if cs == nil || cs.State.Running == nil {
		return
	}
	cs.Ready = ready
	updateReadiness(s)
}
