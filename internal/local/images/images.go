// Package images builds container images from files of this machine, without a Docker engine or a
// registry: the operator image (what the Dockerfile builds), the example trainer's image and a pause image
// for the local stack's real nodes. Layers are tar streams of the files; the image format (config,
// manifest, the docker-archive that `ctr images import` reads) is go-containerregistry's. An image is
// written once per content: its file name carries a digest of everything that goes in.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of an image: Path in the image, its content from Source (a file here) or Data.
type File struct {
	Path   string
	Source string
	Data   []byte
	Mode   int64
}

// Config is what an image's configuration says about how its containers run.
type Config struct {
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	WorkingDir string
}

// Image is an image of Files in one layer, over an optional base layer.
type Image struct {
	// Name is the reference the image is imported as, e.g. ghcr.io/trainingjob-operator/example-trainer:v0.1.0.
	Name string
	// Base is a layer tarball, gzipped or not (a root filesystem: hack/rootfs.sh), under the files, or empty.
	// Its file name must name its content: the image's cache key reads the name, not the gigabytes.
	Base   string
	Files  []File
	Config Config
}

// contents reads every file's content once, in path order.
func (img Image) contents() ([]File, error) {
	files := make([]File, len(img.Files))
	copy(files, img.Files)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for i, f := range files {
		if f.Data != nil || f.Source == "" {
			continue
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Name, err)
		}
		files[i].Data = data
	}
	return files, nil
}

// key returns a digest of everything that goes into the image: its name, configuration and files.
func key(img Image, files []File) string {
	h := sha256.New()
	cfg, _ := json.Marshal(img.Config)
	fmt.Fprintf(h, "%s\n%s\n%s\n", img.Name, cfg, filepath.Base(img.Base))
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "%s %o %x\n", f.Path, f.Mode, sum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Write writes the image as a docker-archive tarball into dir, unless an image of the same content is
// there already, and returns the tarball's path.
func (img Image) Write(dir string) (string, error) {
	files, err := img.contents()
	if err != nil {
		return "", err
	}
	base := strings.NewReplacer("/", "_", ":", "_").Replace(img.Name)
	out := filepath.Join(dir, base+"-"+key(img, files)[:16]+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	built, err := img.build(files)
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(img.Name)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", img.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, built); err != nil {
		return "", fmt.Errorf("writing image %s: %w", img.Name, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	// Older contents of the image are not kept: one tarball per image name.
	older, _ := filepath.Glob(filepath.Join(dir, base+"-*.tar"))
	for _, o := range older {
		if o != out && len(strings.TrimPrefix(o, filepath.Join(dir, base+"-"))) == len("0123456789abcdef.tar") {
			_ = os.Remove(o)
		}
	}
	return out, nil
}

// build assembles the image: one layer of the files, and the configuration.
func (img Image) build(files []File) (v1.Image, error) {
	data, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, err
	}
	layers := []v1.Layer{layer}
	if img.Base != "" {
		// The docker-archive holds gzipped layers: a gzipped base is copied as it is, another compressed quickly.
		base, err := tarball.LayerFromFile(img.Base, tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return nil, fmt.Errorf("image %s: base layer: %w", img.Name, err)
		}
		layers = []v1.Layer{base, layer}
	}
	withLayer, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := withLayer.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, User: img.Config.User,
		Env: img.Config.Env, WorkingDir: img.Config.WorkingDir}
	return mutate.ConfigFile(withLayer, cf)
}

// layerTar returns a layer's tar stream: the files, with their parent directories first.
func layerTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean(f.Path), "/")
		for _, d := range parents(p) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return nil, err
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(f.Data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Tree returns every file under the directory src (caches and compiled Python left out), placed under dst.
func Tree(src, dst string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "__pycache__":
			return filepath.SkipDir
		case d.IsDir() || strings.HasSuffix(p, ".pyc"):
			return nil
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, File{Path: path.Join(dst, filepath.ToSlash(rel)), Source: p, Mode: int64(info.Mode().Perm())})
		return nil
	})
	return files, err
}

// parents returns the directories above p, outermost first.
func parents(p string) []string {
	var out []string
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}
