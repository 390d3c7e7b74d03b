package images

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recipe is what the last stage of a Dockerfile says about its image.
type recipe struct {
	Paths      []string // COPY destinations
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
}

// finalStage reads the last stage of a Dockerfile.
func finalStage(t *testing.T, path string) recipe {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r recipe
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		rest := strings.TrimSpace(strings.TrimPrefix(sc.Text(), fields[0]))
		switch fields[0] {
		case "FROM":
			r = recipe{}
		case "COPY":
			r.Paths = append(r.Paths, fields[len(fields)-1])
		case "USER":
			r.User = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &r.Entrypoint); err != nil {
				t.Fatalf("%s: ENTRYPOINT %s: %v", path, rest, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &r.Cmd); err != nil {
				t.Fatalf("%s: CMD %s: %v", path, rest, err)
			}
		case "ENV":
			r.Env = append(r.Env, fields[1:]...)
		}
	}
	return r
}

// recipeOf returns what an image built here says, its own files only (not the base's users and certificates); a
// file under a directory the Dockerfile copies (copied, its COPY destinations) counts as that directory.
func recipeOf(img Image, copied []string) recipe {
	r := recipe{Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, User: img.Config.User}
	for _, f := range img.Files {
		p := f.Path
		for _, dir := range copied {
			if strings.HasPrefix(p, dir+"/") {
				p = dir
			}
		}
		if !strings.HasPrefix(p, "/etc/") && !slices.Contains(r.Paths, p) {
			r.Paths = append(r.Paths, p)
		}
	}
	for _, e := range img.Config.Env {
		if !strings.HasPrefix(e, "PATH=") { // distroless's own, not the Dockerfile's
			r.Env = append(r.Env, e)
		}
	}
	return r
}

// TestImagesFollowTheirDockerfiles: the images built here and the published recipes (the Dockerfiles)
// say the same things: where the programs are, the entrypoint, the user and the environment.
func TestImagesFollowTheirDockerfiles(t *testing.T) {
	debian, err := Debian(filepath.Join("..", "..", ".."), "rootfs.tar")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Image{}
	for _, img := range append(All("bin"), debian...) {
		byName[img.Name] = img
	}
	for dockerfile, name := range map[string]string{
		"Dockerfile": Operator, "examples/trainer/Dockerfile": Trainer, "Dockerfile.runner": Runner,
	} {
		want := finalStage(t, filepath.Join("..", "..", "..", dockerfile))
		if diff := cmp.Diff(want, recipeOf(byName[name], want.Paths)); diff != "" {
			t.Errorf("%s vs the image %s built here (-Dockerfile +here):\n%s", dockerfile, name, diff)
		}
	}
}
