// Package images checks the Dockerfiles without a Docker engine: each build stage's context (its COPY
// lines) is copied into an empty directory and its `go build` is run there, so a package the image
// forgets to copy fails here instead of in a release.
package images

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trainingjob-operator/trainingjob-operator/tests/testenv"
)

// stage is the build stage of a Dockerfile: its golang image version, what it copies and its go build.
type stage struct {
	goVersion string
	copies    [][2]string // source (repo-relative), destination (relative to WORKDIR)
	build     string
}

var (
	fromGolang = regexp.MustCompile(`^FROM golang:([0-9.]+)`)
	outputFlag = regexp.MustCompile(`-o (\S+)`)
)

func parse(t *testing.T, path string) stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var s stage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		switch {
		case fromGolang.MatchString(line):
			s.goVersion = fromGolang.FindStringSubmatch(line)[1]
		case len(fields) >= 3 && fields[0] == "COPY" && !strings.HasPrefix(fields[1], "--from"):
			for _, src := range fields[1 : len(fields)-1] {
				s.copies = append(s.copies, [2]string{src, fields[len(fields)-1]})
			}
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build"):
			s.build = strings.TrimPrefix(line, "RUN ")
		}
	}
	return s
}

func TestDockerfilesBuild(t *testing.T) {
	root := testenv.RepoRoot()
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go ([0-9.]+)$`).FindSubmatch(goMod)[1]
	for _, df := range []string{"Dockerfile", "examples/trainer/Dockerfile"} {
		t.Run(df, func(t *testing.T) {
			s := parse(t, filepath.Join(root, df))
			if s.goVersion != string(goVersion) || s.build == "" {
				t.Fatalf("build stage: golang %q (go.mod says %s), build %q", s.goVersion, goVersion, s.build)
			}
			ctx := t.TempDir()
			for _, c := range s.copies {
				dst := filepath.Join(ctx, c[1])
				if strings.HasSuffix(c[1], "/") && !strings.HasSuffix(c[0], "/") {
					dst = filepath.Join(dst, filepath.Base(c[0])) // a file into a directory
				}
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("cp", "-r", filepath.Join(root, c[0]), dst).CombinedOutput(); err != nil {
					t.Fatalf("copying %s: %v: %s", c[0], err, out)
				}
			}
			build := outputFlag.ReplaceAllString(s.build, "-o "+filepath.Join(ctx, "out", "binary"))
			cmd := exec.Command("sh", "-c", build)
			cmd.Dir, cmd.Env = ctx, append(os.Environ(), "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s in a context of only its COPY lines: %v\n%s", build, err, out)
			}
		})
	}
}
