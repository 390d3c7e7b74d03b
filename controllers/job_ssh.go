package controllers

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create

// ensureSSHSecret creates an MPI job's SSH keys (names.SSHSecretName), owned by the job, before the
// Job that mounts them. It never reads an existing Secret, so the operator needs no read access.
func (r *JobReconciler) ensureSSHSecret(ctx context.Context, tj *mlv1.TrainingJob) error {
	if !tj.MPIEnabled() {
		return nil
	}
	secret, err := sshSecret(tj)
	if err != nil {
		return err
	}
	return r.createOwned(ctx, tj, secret)
}

// sshSecret generates a client key (authorized on every rank) and a host key.
func sshSecret(tj *mlv1.TrainingJob) (*corev1.Secret, error) {
	client, err := newKey(tj.Name)
	if err != nil {
		return nil, err
	}
	host, err := newKey(tj.Name + " host")
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: names.SSHSecretName(tj), Namespace: tj.Namespace, Labels: names.Labels(tj)},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			builders.SSHPrivateKey: client.private, builders.SSHPublicKey: client.authorized,
			builders.SSHAuthorizedKeys: client.authorized, builders.SSHHostKey: host.private,
		},
	}, nil
}

type sshKey struct{ private, authorized []byte }

// newKey returns an ed25519 key in OpenSSH's private key format, and its authorized_keys line.
func newKey(comment string) (sshKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return sshKey{}, fmt.Errorf("generating an SSH key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return sshKey{}, fmt.Errorf("encoding an SSH key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return sshKey{}, fmt.Errorf("encoding an SSH public key: %w", err)
	}
	return sshKey{private: pem.EncodeToMemory(block), authorized: ssh.MarshalAuthorizedKey(sshPub)}, nil
}
