package builders_test

import (
	"fmt"
	"testing"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// BenchmarkJob builds the Job of a TrainingJob; tensorflow is the worst case (TF_CONFIG lists every worker).
func BenchmarkJob(b *testing.B) {
	for _, fw := range []mlv1.Framework{mlv1.FrameworkPyTorch, mlv1.FrameworkTensorFlow} {
		for _, n := range []int32{2, 1024} {
			tj := tjtest.NewTJ("ml-training", "resnet50-imagenet").Workers(n).Framework(fw).Obj()
			b.Run(fmt.Sprintf("%s/workers=%d", fw, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_ = builders.Job(tj, opts)
				}
			})
		}
	}
}
