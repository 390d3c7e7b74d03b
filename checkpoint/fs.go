package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DirStore is a directory on a mounted volume (pvc, nfs).
type DirStore struct{ Root string }

func (d DirStore) path(key string) (string, error) {
	clean := filepath.Clean("/" + key)
	if strings.Contains(key, "..") {
		return "", fmt.Errorf("key %q leaves the store", key)
	}
	return filepath.Join(d.Root, clean), nil
}

// List walks the directory below prefix.
func (d DirStore) List(ctx context.Context, prefix string) ([]Object, error) {
	base, err := d.path(dirOf(prefix))
	if err != nil {
		return nil, err
	}
	var out []Object
	err = filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(d.Root, p)
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, Object{Key: key, Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	return out, err
}

// dirOf returns the directory part of a key prefix ("a/b/c" lists under "a/b").
func dirOf(prefix string) string {
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		return prefix[:i]
	}
	return ""
}

// Get reads a file.
func (d DirStore) Get(_ context.Context, key string) ([]byte, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// Open streams a file.
func (d DirStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

// Put writes a file, creating its directories.
func (d DirStore) Put(_ context.Context, key string, data []byte) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	// Written beside, synced, then renamed: a reader (or a crash) never sees half a file under its name.
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Delete removes files, then the directories they leave empty (up to the root).
func (d DirStore) Delete(_ context.Context, keys []string) error {
	var errs []error
	dirs := map[string]bool{}
	for _, k := range keys {
		p, err := d.path(k)
		if err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for dir := range dirs {
		for dir != d.Root && strings.HasPrefix(dir, d.Root) {
			if os.Remove(dir) != nil { // not empty, or gone
				break
			}
			dir = filepath.Dir(dir)
		}
	}
	return errors.Join(errs...)
}

// URI returns the file's path.
func (d DirStore) URI(key string) string { return filepath.Join(d.Root, filepath.FromSlash(key)) }
