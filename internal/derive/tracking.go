package derive

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
)

// Reasons of the ExperimentTracked condition.
const (
	ReasonRunActive                  = "RunActive"
	ReasonRunClosed                  = "RunClosed"
	ReasonTrackingServerUnavailable  = "TrackingServerUnavailable"
	ReasonTrackingCredentialsInvalid = "TrackingCredentialsInvalid"
	ReasonTrackingCredentialsMissing = "TrackingCredentialsMissing"
	ReasonTrackingRequestRejected    = "TrackingRequestRejected"
	// ReasonTrackingURIInvalid: the tracking URI is refused before any call (a query, a fragment, user info).
	ReasonTrackingURIInvalid = "TrackingURIInvalid"
)

// MissingCredentialsError says that the Secret holding a job's tracking credentials, or its keys, are
// missing.
type MissingCredentialsError struct{ Message string }

func (e *MissingCredentialsError) Error() string { return e.Message }

// TrackingReason returns the ExperimentTracked reason of an error of the calls to the tracking server:
// credentials the server refuses, credentials missing, a request the server rejects (a bug, or a deleted
// experiment), or else a server that does not answer (connection refused, timeouts, 429, 5xx), which may
// pass on its own.
func TrackingReason(err error) string {
	var apiErr *mlflow.Error
	var missing *MissingCredentialsError
	var uriErr *mlflow.URIError
	switch {
	case errors.As(err, &uriErr):
		return ReasonTrackingURIInvalid
	case errors.As(err, &missing):
		return ReasonTrackingCredentialsMissing
	case errors.As(err, &apiErr) && (apiErr.Status == http.StatusUnauthorized || apiErr.Status == http.StatusForbidden):
		return ReasonTrackingCredentialsInvalid
	case errors.As(err, &apiErr) && apiErr.Status != http.StatusTooManyRequests && apiErr.Status < 500:
		return ReasonTrackingRequestRejected
	}
	return ReasonTrackingServerUnavailable
}

// ApplyTracking sets ExperimentTracked from the outcome of keeping the job's MLflow run in step: err (nil
// for success) and, after a failure, when the operator tries again. It is pure.
func ApplyTracking(st *mlv1.TrainingJobStatus, err error, retry time.Duration, now metav1.Time) {
	if err != nil {
		set(st, mlv1.ConditionExperimentTracked, false, TrackingReason(err), fmt.Sprintf(
			"%v; the training goes on without it, the operator tries again in %s and then logs the metrics still in the status", err, retry), now)
		return
	}
	run := st.MLflow
	if run == nil {
		return
	}
	if run.RunStatus == mlflow.RunRunning || run.RunStatus == "" {
		set(st, mlv1.ConditionExperimentTracked, true, ReasonRunActive,
			fmt.Sprintf("MLflow run %s of experiment %s is kept in step: %s", run.RunID, run.ExperimentID, run.URL), now)
		return
	}
	set(st, mlv1.ConditionExperimentTracked, true, ReasonRunClosed,
		fmt.Sprintf("MLflow run %s closed as %s: %s", run.RunID, run.RunStatus, run.URL), now)
}
