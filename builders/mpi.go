package builders

import (
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// MPI (networking.backend: mpi) follows the MPI Operator's conventions in one Indexed Job: rank 0 is the
// launcher and runs the user's command (mpirun ...) once every other rank's SSH server answers; ranks 1..N
// run an SSH server (the image must contain openssh-server, as MPI Operator's workers must) on
// MPISSHPort, with the job's key pair from the Secret <name>-ssh, which the JobController generates. The
// hostfile lists every rank's stable host name with slots = gpusPerWorker (1 without GPUs); rank 0 writes
// it from MPI_HOSTS, so that it holds the names as the pod sees them. The Job succeeds when rank 0 does
// (a Job success policy on index 0): the SSH servers are stopped then.

// MPISSHPort is the port of the workers' SSH server (not 22, so that a non-root user can run it).
const MPISSHPort = 2222

// MPI paths: the Secret's mount and a per-pod scratch directory for the hostfile and the SSH client's
// configuration.
const (
	MPISSHDir    = "/etc/mpi/ssh"
	MPIRunDir    = "/etc/mpi/run"
	mpiSSHVolume = "mpi-ssh"
	mpiRunVolume = "mpi-run"
	MPIPortName  = "ssh"
)

// Keys of the SSH Secret.
const (
	SSHPrivateKey     = "id_ed25519"
	SSHPublicKey      = "id_ed25519.pub"
	SSHAuthorizedKeys = "authorized_keys"
	SSHHostKey        = "ssh_host_ed25519_key"
)

// mpiLauncher runs as `sh -c mpiLauncher mpi "$@"` with the user's command as "$@". Every rank runs the
// SSH server (Open MPI may reach rank 0's own slots through it too); rank 0 then waits until every
// server answers, writes the hostfile and runs the command, and stops its server when the command ends
// (the function execs the server, so that $! is the server and not a subshell that would leave it running).
// Only $VAR and ${...} are used: the kubelet would expand $(...). The {port} and {...key} placeholders are
// MPISSHPort and the Secret's file names.
var mpiLauncher = strings.NewReplacer("{port}", strconv.Itoa(MPISSHPort), "{host_key}", SSHHostKey,
	"{authorized_keys}", SSHAuthorizedKeys, "{key}", SSHPrivateKey).Replace(`sshd() {
  mkdir -p /run/sshd 2>/dev/null || true
  exec /usr/sbin/sshd -D -e -p {port} -o ListenAddress="$POD_IP" -h "$MPI_SSH_DIR/{host_key}" \
    -o AuthorizedKeysFile="$MPI_SSH_DIR/{authorized_keys}" -o StrictModes=no -o PidFile=none -o PermitRootLogin=prohibit-password
}
if [ "$RANK" != 0 ]; then sshd; exit; fi
sshd & server=$!
printf '%s\n' $MPI_HOSTS | sed 's/:/ slots=/' > "$MPI_RUN_DIR/hostfile"
for host in $MPI_HOSTS; do
  host=${host%%:*} waited=
  until ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes \
      -o ConnectTimeout=2 -i "$MPI_SSH_DIR/{key}" -p {port} "$host" true; do
    waited=x$waited
    [ ${#waited} -lt 120 ] || { echo "mpi: no SSH server answers on $host:{port} after 120 tries" >&2; kill $server; exit 1; }
    sleep 1
  done
done
"$@"
status=$?
kill $server
exit $status`)

// mpiCommand returns the user's command and args wrapped in the launcher; the kubelet's $(VAR) expansion
// of the user's own arguments is kept (they stay separate arguments).
func mpiCommand(tj *mlv1.TrainingJob) (command, args []string) {
	return []string{"/bin/sh", "-c", mpiLauncher, "mpi"}, append(append([]string(nil), tj.Spec.Command...), tj.Spec.Args...)
}

// mpiHosts returns MPI_HOSTS: every rank's stable host name and its slots, "host:slots", space-separated.
func mpiHosts(tj *mlv1.TrainingJob) string {
	slots := max(tj.GPUsPerWorker(), 1)
	hosts := make([]string, tj.Spec.NumWorkers)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("%s:%d", names.WorkerDNSName(tj, int32(i)), slots)
	}
	return strings.Join(hosts, " ")
}

// mpiEnv returns what the launcher and the MPI implementations read: Open MPI's hostfile and ssh arguments,
// its consent to run as root (the framework images' user) and to keep the hostfile's names whole (it
// shortens them to the first label by default, and a pod resolves "x-worker-1" only through a node's own
// DNS tricks, never through the cluster DNS: found on real nodes), Intel MPI's and MPICH's (Hydra)
// hostfile and bootstrap.
func mpiEnv(tj *mlv1.TrainingJob) []corev1.EnvVar {
	if !tj.MPIEnabled() {
		return nil
	}
	hostfile := MPIRunDir + "/hostfile"
	ssh := fmt.Sprintf("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -i %s/%s -p %d",
		MPISSHDir, SSHPrivateKey, MPISSHPort)
	return []corev1.EnvVar{
		value("MPI_HOSTS", mpiHosts(tj)),
		value("MPI_SSH_DIR", MPISSHDir),
		value("MPI_RUN_DIR", MPIRunDir),
		value("OMPI_MCA_orte_default_hostfile", hostfile),
		value("OMPI_MCA_plm_rsh_args", ssh),
		value("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
		value("OMPI_ALLOW_RUN_AS_ROOT", "1"),
		value("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
		value("I_MPI_HYDRA_HOST_FILE", hostfile),
		value("I_MPI_HYDRA_BOOTSTRAP", "ssh"),
		value("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", ssh),
		value("HYDRA_HOST_FILE", hostfile),
		value("HYDRA_LAUNCHER_EXTRA_ARGS", ssh),
	}
}

// mpiVolumes returns the SSH Secret's volume (owner-only files: ssh refuses a readable private key) and the scratch dir.
func mpiVolumes(tj *mlv1.TrainingJob) []corev1.Volume {
	if !tj.MPIEnabled() {
		return nil
	}
	return []corev1.Volume{
		{Name: mpiSSHVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: names.SSHSecretName(tj), DefaultMode: ptrTo(int32(0o600)),
		}}},
		{Name: mpiRunVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
}

// mpiMounts returns the worker container's mounts of mpiVolumes.
func mpiMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{{Name: mpiSSHVolume, MountPath: MPISSHDir, ReadOnly: true}, {Name: mpiRunVolume, MountPath: MPIRunDir}}
}

// mpiSuccessPolicy returns the Job's success policy under MPI: the Job succeeds when rank 0 (the launcher)
// does; the SSH servers are then stopped. Nil without MPI.
func mpiSuccessPolicy(tj *mlv1.TrainingJob) *batchv1.SuccessPolicy {
	if !tj.MPIEnabled() {
		return nil
	}
	return &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptrTo("0")}}}
}

// mpiCapabilities returns the capabilities the workers' SSH server needs: root's server switches users and
// chroots for privilege separation (all within Pod Security's baseline level); a non-root server needs none.
func mpiCapabilities(tj *mlv1.TrainingJob) []corev1.Capability {
	if !tj.MPIEnabled() {
		return nil
	}
	if s := tj.Spec.SecurityContext; s != nil && s.RunAsUser != nil && *s.RunAsUser != 0 {
		return nil
	}
	return []corev1.Capability{"SETUID", "SETGID", "SYS_CHROOT"}
}
