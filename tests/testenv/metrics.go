package testenv

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/deploy"
	"github.com/trainingjob-operator/trainingjob-operator/metrics"
)

// ScraperToken returns the token of the ServiceAccount ns/name, a scraper of the operator's metrics as a
// cluster's Prometheus is: created with its namespace when missing, and bound to the metrics-reader
// ClusterRole of deploy/rbac (installed when missing) when reader is true.
func ScraperToken(ctx context.Context, c client.Client, ns, name string, reader bool) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, sa}
	if reader {
		role, err := readerRole()
		if err != nil {
			return "", err
		}
		objs = append(objs, role, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name + "-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metrics.ReaderClusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("a token of %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// readerRole returns the metrics-reader ClusterRole of deploy/rbac.
func readerRole() (client.Object, error) {
	objs, err := deploy.RBAC()
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == metrics.ReaderClusterRole {
			return o, nil
		}
	}
	return nil, fmt.Errorf("deploy/rbac has no ClusterRole %s", metrics.ReaderClusterRole)
}
