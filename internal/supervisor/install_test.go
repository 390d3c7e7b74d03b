package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInstall: Install copies the running executable byte for byte, executable by all, making the
// directory, replacing what was there, and leaves no temporary file behind.
func TestInstall(t *testing.T) {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		existing bool // a file is already at dest
	}{
		{name: "new directory", existing: false},
		{name: "replaced", existing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run", "bin")
			dest := filepath.Join(dir, "supervisor")
			if tt.existing {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dest, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := Install(dest); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, self) {
				t.Errorf("installed %d bytes, not the %d of the executable", len(got), len(self))
			}
			info, err := os.Stat(dest)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != 0o755 {
				t.Errorf("mode %v, want -rwxr-xr-x", info.Mode().Perm())
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if diff := cmp.Diff([]string{"supervisor"}, names); diff != "" {
				t.Errorf("directory (-want +got):\n%s", diff)
			}
		})
	}
}
