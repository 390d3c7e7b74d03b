package supervisor

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install copies the running executable to dest, atomically: into a temporary file in dest's directory
// (made if missing), made executable, then renamed. An init container runs it to put the supervisor into
// the pod's shared volume from an image that has no shell and no cp.
func Install(dest string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("read the supervisor: %w", err)
	}
	defer func() { _ = src.Close() }() // read only: nothing to flush
	dir := filepath.Dir(dest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install the supervisor: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".*")
	if err != nil {
		return fmt.Errorf("install the supervisor: %w", err)
	}
	if err := writeExecutable(tmp, src); err != nil {
		_ = os.Remove(tmp.Name()) // the failure is the error returned
		return fmt.Errorf("install the supervisor to %s: %w", dest, err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		_ = os.Remove(tmp.Name()) // the failure is the error returned
		return fmt.Errorf("install the supervisor: %w", err)
	}
	return nil
}

// writeExecutable copies src into f, makes it executable by all, and closes it.
func writeExecutable(f *os.File, src io.Reader) error {
	_, err := io.Copy(f, src)
	if err == nil {
		err = f.Chmod(0o755)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
