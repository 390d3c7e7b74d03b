package tracking

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainingjob-operator/trainingjob-operator/internal/tracking/mlflow"
)

// CredentialsSecret returns the Secret whose credentials go with the calls to the tracking server at uri:
// the job's own (jobSecret, named by monitoring.mlflowCredentialsSecret) when it names one; else the
// operator-wide Secret (operatorSecret, of --mlflow-credentials-secret), but only when uri is the
// operator-wide server operatorURI (mlflow.SameServer: same scheme, host and port); else none (the zero
// key). The operator-wide credentials are the platform's: a server a job names is never sent them.
func CredentialsSecret(uri string, jobSecret types.NamespacedName,
	operatorURI string, operatorSecret types.NamespacedName) types.NamespacedName {
	switch {
	case jobSecret.Name != "":
		return jobSecret
	case operatorSecret.Name != "" && mlflow.SameServer(uri, operatorURI):
		return operatorSecret
	}
	return types.NamespacedName{}
}
