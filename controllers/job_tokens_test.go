package controllers

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/tests/tjtest"
)

// TestTokenSecretBeforeTheJob: with a key, the job's token Secret is there, owned by the job, when its
// Job is created, and holds the tokens the operator derives; without a key there is none.
func TestTokenSecretBeforeTheJob(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key        builders.SecretKey
		wantSecret bool
	}{
		{name: "a key", key: builders.SecretKey("0123456789abcdef0123456789abcdef"), wantSecret: true},
		{name: "no key (tokens off)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj := tjtest.NewTJ("ml", "tok").Obj()
			tj.UID = "uid-tok"
			r := newReconciler(tj)
			r.Options.AgentTokenKey = tc.key
			key := types.NamespacedName{Namespace: "ml", Name: "tok"}
			reconcileN(t, r, key, 3)
			ctx := context.Background()
			if err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: names.JobName(tj)}, &batchv1.Job{}); err != nil {
				t.Fatalf("no Job: %v", err)
			}
			s := &corev1.Secret{}
			err := r.Get(ctx, types.NamespacedName{Namespace: "ml", Name: names.TokenSecretName(tj)}, s)
			if !tc.wantSecret {
				if !apierrors.IsNotFound(err) {
					t.Errorf("a token Secret without a key (%v)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			opts := builders.Options{AgentTokenKey: tc.key}
			type got struct {
				Owner       string
				Control, Ag string
			}
			owner := ""
			if o := metav1.GetControllerOf(s); o != nil {
				owner = o.Kind + "/" + o.Name
			}
			want := got{Owner: "TrainingJob/tok", Control: builders.ControlToken(tj, opts), Ag: builders.AgentToken(tj, opts)}
			if diff := cmp.Diff(want, got{Owner: owner, Control: string(s.Data[names.ControlTokenKey]),
				Ag: string(s.Data[names.AgentTokenKey])}); diff != "" {
				t.Errorf("the token Secret (-want +got):\n%s", diff)
			}
		})
	}
}
