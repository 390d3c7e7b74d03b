package checkpoint_test

import (
	"testing"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint"
	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/storetest"
)

func TestDirStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) checkpoint.Store { return checkpoint.DirStore{Root: t.TempDir()} })
}
