package images

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
)

// The images the local stack builds, under the names the operator and the examples use, so that the
// examples run unchanged once the images are imported.
const (
	// Operator is the operator's image (the Dockerfile's), also the checkpoint agent's.
	Operator = builders.DefaultAgentImage
	// Trainer is the example trainer's image (examples/trainer/Dockerfile).
	Trainer = "ghcr.io/trainingjob-operator/example-trainer:v0.1.0"
	// Pause is the pod sandbox image of the local stack's real nodes.
	Pause = "localhost/trainingjob-operator/pause:local"
	// Runner is the default runner's image (Dockerfile.runner), on the Debian root filesystem.
	Runner = builders.DefaultRunnerImage
	// MPIExamples is the Debian root filesystem (Open MPI, mpi4py, OpenSSH) with examples/python in
	// /workspace, its working directory: `mpirun ... python3 examples/python/mpi_allreduce.py` runs there.
	MPIExamples = "localhost/trainingjob-operator/mpi-examples:local"
)

// debianPath is the PATH of Debian's images (the same as distroless's).
const debianPath = pathEnv

// nonroot is the user of distroless's nonroot images, which the Dockerfiles start from.
const nonroot = "65532:65532"

// pathEnv is the PATH of distroless images.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// base returns the files distroless/static gives every image: users, groups and CA certificates.
func base() []File {
	files := []File{
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files = append(files, File{Path: "/etc/ssl/certs/ca-certificates.crt", Source: "/etc/ssl/certs/ca-certificates.crt"})
	}
	return files
}

// Binaries builds the static programs the images hold (manager, supervisor, trainer, pause) into dir.
func Binaries(repoRoot, dir string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", dir+"/", "./cmd/manager", "./cmd/supervisor", "./examples/trainer",
		"./internal/local/images/pause")
	cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the images' programs: %w\n%s", err, out)
	}
	return nil
}

// All returns the images of the local stack, made of the programs Binaries built into bin.
func All(bin string) []Image {
	return []Image{
		{Name: Operator, Files: append(base(), File{Path: "/manager", Source: filepath.Join(bin, "manager"), Mode: 0o755},
			File{Path: "/supervisor", Source: filepath.Join(bin, "supervisor"), Mode: 0o755}),
			Config: Config{Entrypoint: []string{"/manager"}, User: nonroot, Env: []string{pathEnv}}},
		{Name: Trainer, Files: append(base(), File{Path: "/usr/local/bin/trainer", Source: filepath.Join(bin, "trainer"), Mode: 0o755}),
			Config: Config{Entrypoint: []string{"/usr/local/bin/trainer"}, User: nonroot, Env: []string{pathEnv}}},
		{Name: Pause, Files: []File{{Path: "/pause", Source: filepath.Join(bin, "pause"), Mode: 0o755}},
			Config: Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}},
	}
}

// Debian returns the images on the Debian root filesystem rootfs (a layer tarball made by hack/rootfs.sh) with
// files of the repository at repoRoot: the default runner and the MPI examples.
func Debian(repoRoot, rootfs string) ([]Image, error) {
	runner, err := Tree(filepath.Join(repoRoot, "runner", "trainingjob_runner"), "/opt/trainingjob/trainingjob_runner")
	if err != nil {
		return nil, err
	}
	examples, err := Tree(filepath.Join(repoRoot, "examples", "python"), "/workspace/examples/python")
	if err != nil {
		return nil, err
	}
	return []Image{
		{Name: Runner, Base: rootfs, Files: runner, Config: Config{Cmd: []string{"python3", "-m", "trainingjob_runner"},
			Env: []string{debianPath, "PYTHONPATH=/opt/trainingjob", "PYTHONUNBUFFERED=1"}}},
		{Name: MPIExamples, Base: rootfs, Files: examples, Config: Config{Cmd: []string{"/bin/bash"},
			Env: []string{debianPath, "PYTHONUNBUFFERED=1"}, WorkingDir: "/workspace"}},
	}, nil
}

// CacheDir returns where built images are kept, beside the control plane's binaries.
func CacheDir() string {
	if d := os.Getenv("TESTBIN_CACHE"); d != "" {
		return filepath.Join(d, "images")
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "trainingjob-operator", "images")
}

// Build builds the programs of the repository at repoRoot and writes every image of All into dir, once
// per content, and with a Debian root filesystem (rootfs, not empty) the images of Debian too; it returns
// the tarballs, for `ctr images import`.
func Build(repoRoot, dir, rootfs string) ([]string, error) {
	bin, err := os.MkdirTemp("", "trainingjob-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(bin) }() // the images hold copies
	if err := Binaries(repoRoot, bin); err != nil {
		return nil, err
	}
	all := All(bin)
	if rootfs != "" {
		debian, err := Debian(repoRoot, rootfs)
		if err != nil {
			return nil, err
		}
		all = append(all, debian...)
	}
	var tars []string
	for _, img := range all {
		tar, err := img.Write(dir)
		if err != nil {
			return nil, err
		}
		tars = append(tars, tar)
	}
	return tars, nil
}
