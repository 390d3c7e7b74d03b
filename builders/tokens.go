package builders

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// TokenSecret returns the Secret that holds the job's tokens (names.TokenSecretName): the control token
// (ControlToken) and the checkpoint agent token (AgentToken), read by the workers through secretKeyRef
// (tokenEnv). A value in the pod spec is read by whoever may read the job's pods, the view role included,
// and the control token lets its holder restart the workers with a checkpoint of its choosing. It is
// immutable: the tokens are the same for the job's life. nil without a key (no tokens).
func TokenSecret(tj *mlv1.TrainingJob, opts Options) *corev1.Secret {
	control, agent := ControlToken(tj, opts), AgentToken(tj, opts)
	if control == "" && agent == "" {
		return nil
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: names.TokenSecretName(tj), Namespace: tj.Namespace, Labels: names.Labels(tj)},
		Type:       corev1.SecretTypeOpaque,
		Immutable:  ptrTo(true),
		Data:       map[string][]byte{names.ControlTokenKey: []byte(control), names.AgentTokenKey: []byte(agent)},
	}
}

// tokenEnv returns the variable name that holds token, read from the job's token Secret at key; "" when
// token is "" (no key: a Job as before tokens).
func tokenEnv(tj *mlv1.TrainingJob, name, key, token string) corev1.EnvVar {
	if token == "" {
		return value(name, "")
	}
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: names.TokenSecretName(tj)}, Key: key}}}
}
