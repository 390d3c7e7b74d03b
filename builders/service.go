package builders

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Service builds the headless Service that gives every worker a DNS name. It publishes addresses of pods
// that are not Ready, so rank 0 resolves while the ranks rendezvous.
func Service(tj *mlv1.TrainingJob) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: names.ServiceName(tj), Namespace: tj.Namespace, Labels: names.Labels(tj)},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 names.SelectorLabels(tj),
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{
				servicePort(names.MasterPortName, tj.Spec.Networking.MasterPort),
				servicePort(names.MetricsPortName, tj.MetricsPort()),
			},
		},
	}
}

func servicePort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{
		Name: name, Port: port, TargetPort: intstr.FromString(name), Protocol: corev1.ProtocolTCP,
	}
}
