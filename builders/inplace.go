package builders

import (
	"math"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// A gang restart in place (failurePolicy.restartStrategy InPlace): the supervisor holds a trainer that
// failed (the pod turns unready through its readiness probe) and takes the JobController's orders
// (package controlapi); on an order it exits with controlapi.RestartCode, which the trainer's
// RestartAllContainers rule matches, and the kubelet runs every container of the pod again, init
// containers included, keeping the pod.
const (
	// StateVolume is a small in-memory emptyDir that outlives the containers: the supervisor keeps the
	// order it obeyed there for the containers that restart.
	StateVolume = "trainingjob-state"
	// StateDir is where the trainer mounts it.
	StateDir = "/var/run/trainingjob-state"
)

// InPlace reports whether a gang restart of tj restarts the workers' pods in place.
func InPlace(tj *mlv1.TrainingJob, opts Options) bool {
	return tj.RestartStrategy() == mlv1.RestartInPlace && tj.RestartPolicy() == mlv1.RestartGang && InPlaceUnavailable(tj, opts) == ""
}

// InPlaceUnavailable returns why a gang restart of tj recreates the workers' pods although its
// restartStrategy is InPlace; "" when it restarts them in place or asks for Recreate.
func InPlaceUnavailable(tj *mlv1.TrainingJob, opts Options) string {
	switch {
	case tj.RestartStrategy() != mlv1.RestartInPlace || tj.RestartPolicy() != mlv1.RestartGang:
		return ""
	case !opts.InPlaceRestart:
		return "the cluster does not restart all of a pod's containers in place (RestartAllContainers, Kubernetes 1.35+)"
	case len(opts.AgentTokenKey) == 0:
		return "the operator has no token key to order restarts with"
	case !Supervised(tj):
		return "the trainer does not run under the supervisor (monitoring or progressFromOutput off, or no command)"
	case tj.Spec.Elastic != nil:
		return "an elastic job's torchrun restarts its own workers"
	case tj.MPIEnabled():
		return "MPI jobs are recreated"
	}
	return ""
}

// controlTokenContext separates the control tokens from anything else the key derives.
const controlTokenContext = "trainingjob-operator/supervisor-control-token/v1\x00"

// ControlToken returns the job's control token: hex(HMAC-SHA256(opts.AgentTokenKey, context || the job's
// UID)), as AgentToken but for another use; "" without a key.
func ControlToken(tj *mlv1.TrainingJob, opts Options) string {
	return jobToken(controlTokenContext, tj, opts)
}

// restartInPlace makes the trainer c restartable in place: the restart rule, the supervisor's control
// environment, its state directory and the readiness probe a held trainer fails (polled every second, so
// the JobController learns of a failure within about a second).
func restartInPlace(tj *mlv1.TrainingJob, opts Options, c *corev1.Container) {
	if !InPlace(tj, opts) {
		return
	}
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	c.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn,
			Values: []int32{controlapi.RestartCode}}}}
	c.Env = append(c.Env, tokenEnv(tj, controlapi.TokenEnv, names.ControlTokenKey, ControlToken(tj, opts)),
		value(controlapi.RestartCodeEnv, strconv.Itoa(controlapi.RestartCode)),
		value(controlapi.AttemptEnv, strconv.Itoa(int(tj.Status.Attempt))), value(controlapi.StateDirEnv, StateDir),
		corev1.EnvVar{Name: controlapi.PodUIDEnv, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		configMapKeyEnv(tj, names.CurrentAttemptKey))
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: StateVolume, MountPath: StateDir})
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "/healthz", Port: intstr.FromString(SupervisorPortName)}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
}

// inPlaceJob lets the Job of a job that restarts in place outlive its pods' failures: the JobController
// decides every restart from the pods (a failed trainer is held, its pod never fails), and a pod that is
// gone for good (deleted, evicted, its node lost, failed outside the trainer) is replaced alone by the Job
// controller while the others restart in place. A pod failure policy that failed the Job on a disruption
// would stop every pod.
func inPlaceJob(tj *mlv1.TrainingJob, opts Options, job *batchv1.Job) {
	if !InPlace(tj, opts) {
		return
	}
	job.Spec.BackoffLimit = ptr.To(int32(math.MaxInt32))
	job.Spec.PodFailurePolicy = nil
	job.Annotations[names.InPlaceAnnotation] = "true"
}

// stateVolumes returns the supervisor's state emptyDir; none when the job does not restart in place.
func stateVolumes(tj *mlv1.TrainingJob, opts Options) []corev1.Volume {
	if !InPlace(tj, opts) {
		return nil
	}
	return []corev1.Volume{{Name: StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))}}}}
}
