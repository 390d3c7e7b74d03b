package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkFiles runs hack/check-tracked-files.sh on the git repository dir.
func checkFiles(t *testing.T, dir string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(root, "hack", "check-tracked-files.sh"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, dir).CombinedOutput()
	return string(out), err
}

// gitRepo makes a git repository in a temporary directory with files (path: content, mode) tracked.
func gitRepo(t *testing.T, files map[string]file) string {
	t.Helper()
	dir := t.TempDir()
	for path, f := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-f", "."}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

type file struct {
	data []byte
	mode os.FileMode
}

// TestTrackedFilesCheck: the check make verify runs rejects a tracked binary (by its header or as an
// executable that is no script) and a file over 1 MB, naming each, and passes a repository of sources
// and scripts.
func TestTrackedFilesCheck(t *testing.T) {
	clean := map[string]file{
		"main.go":         {data: []byte("package main\n"), mode: 0o644},
		"hack/script.sh":  {data: []byte("#!/bin/sh\necho hi\n"), mode: 0o755},
		"docs/README.md":  {data: []byte(strings.Repeat("text\n", 1000)), mode: 0o644},
		"data/small.json": {data: []byte("{}"), mode: 0o644},
	}
	if out, err := checkFiles(t, gitRepo(t, clean)); err != nil {
		t.Fatalf("a repository of sources and scripts was rejected: %v\n%s", err, out)
	}
	for name, bad := range map[string]file{
		"elf":            {data: append([]byte{0x7f, 'E', 'L', 'F'}, make([]byte, 64)...), mode: 0o644},
		"kubectl-plugin": {data: append([]byte{0x7f, 'E', 'L', 'F'}, make([]byte, 64)...), mode: 0o755},
		"macho":          {data: append([]byte{0xcf, 0xfa, 0xed, 0xfe}, make([]byte, 64)...), mode: 0o644},
		"tool.exe":       {data: append([]byte("MZ"), make([]byte, 64)...), mode: 0o644},
		"runme":          {data: []byte("no shebang"), mode: 0o755},
		"data/big.json":  {data: []byte(strings.Repeat("x", 1<<20+1)), mode: 0o644},
	} {
		t.Run(name, func(t *testing.T) {
			files := map[string]file{name: bad}
			for k, v := range clean {
				files[k] = v
			}
			out, err := checkFiles(t, gitRepo(t, files))
			if err == nil || !strings.Contains(out, name) {
				t.Errorf("check-tracked-files.sh passed or did not name %s: %v\n%s", name, err, out)
			}
		})
	}
}

// TestTrackedFilesOfThisRepository: the repository itself passes the check.
func TestTrackedFilesOfThisRepository(t *testing.T) {
	if out, err := checkFiles(t, root); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestBuildOutputsAreIgnored: what `go build ./cmd/NAME` or `go build ./examples/trainer` writes at the
// root is ignored by git, so `git add .` cannot pick it up; the root's tracked files are not.
func TestBuildOutputsAreIgnored(t *testing.T) {
	cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	outputs := []string{"trainer"}
	for _, c := range cmds {
		outputs = append(outputs, c.Name())
	}
	for _, name := range outputs {
		if err := exec.Command("git", "-C", root, "check-ignore", "-q", "--no-index", name).Run(); err != nil {
			t.Errorf("a binary %q at the root is not ignored by .gitignore", name)
		}
	}
	tracked, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--ignored", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(tracked)); s != "" {
		t.Errorf("tracked files that .gitignore ignores (a rule too wide?):\n%s", s)
	}
}
