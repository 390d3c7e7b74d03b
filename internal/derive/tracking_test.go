package derive

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
)

func TestTrackingReason(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{err: fmt.Errorf("creating run: %w", &mlflow.Error{Status: 401, Code: "UNAUTHENTICATED"}), want: ReasonTrackingCredentialsInvalid},
		{err: &mlflow.Error{Status: 403, Code: "PERMISSION_DENIED"}, want: ReasonTrackingCredentialsInvalid},
		{err: &MissingCredentialsError{Message: "secret ml/mlflow does not exist"}, want: ReasonTrackingCredentialsMissing},
		{err: &mlflow.Error{Status: 400, Code: mlflow.InvalidParameterValue}, want: ReasonTrackingRequestRejected},
		{err: &mlflow.Error{Status: 404, Code: mlflow.ResourceDoesNotExist}, want: ReasonTrackingRequestRejected},
		{err: &mlflow.Error{Status: 429, Code: "Too Many Requests"}, want: ReasonTrackingServerUnavailable},
		{err: &mlflow.Error{Status: 503, Code: "TEMPORARILY_UNAVAILABLE"}, want: ReasonTrackingServerUnavailable},
		{err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}, want: ReasonTrackingServerUnavailable},
		{err: context.DeadlineExceeded, want: ReasonTrackingServerUnavailable},
	}
	for _, tc := range cases {
		if got := TrackingReason(tc.err); got != tc.want {
			t.Errorf("TrackingReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestApplyTracking(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	run := func(status string) *mlv1.MLflowStatus {
		return &mlv1.MLflowStatus{ExperimentID: "1", RunID: "r1", URL: "http://m/#/experiments/1/runs/r1", RunStatus: status}
	}
	cases := []struct {
		name string
		run  *mlv1.MLflowStatus
		err  error
		want []string // status, reason, message
	}{
		{name: "no run yet, no error: nothing said", run: nil, err: nil, want: nil},
		{
			name: "running",
			run:  run(mlflow.RunRunning),
			err:  nil,
			want: []string{"True", ReasonRunActive, "MLflow run r1 of experiment 1 is kept in step: http://m/#/experiments/1/runs/r1"},
		},
		{
			name: "closed",
			run:  run(mlflow.RunFailed),
			err:  nil,
			want: []string{"True", ReasonRunClosed, "MLflow run r1 closed as FAILED: http://m/#/experiments/1/runs/r1"},
		},
		{
			name: "server down",
			run:  nil,
			err:  errors.New("mlflow: POST runs/create: connection refused"),
			want: []string{"False", ReasonTrackingServerUnavailable,
				"mlflow: POST runs/create: connection refused; the training goes on without it, " +
					"the operator tries again in 30s and then logs the metrics still in the status"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &mlv1.TrainingJobStatus{MLflow: tc.run}
			ApplyTracking(st, tc.err, 30*time.Second, now)
			var got []string
			for _, c := range st.Conditions {
				got = append(got, string(c.Status), c.Reason, c.Message)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ExperimentTracked (-want +got):\n%s", diff)
			}
		})
	}
}
