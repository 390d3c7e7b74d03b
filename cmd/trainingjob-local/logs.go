package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/trainingjob-operator/trainingjob-operator/crd/names"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
	"github.com/trainingjob-operator/trainingjob-operator/internal/local/realnode"
)

// logs prints the log of a container of a pod that ran on a process node or a real node: the pod named,
// else the newest pod of the given rank of the TrainingJob named.
func logs(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	ns := fs.String("n", "default", "namespace")
	container := fs.String("c", names.ContainerName, "container")
	rank := fs.Int("rank", 0, "rank, when the name is a TrainingJob's")
	dir := fs.String("state-dir", defaultStateDir(), "state directory of `trainingjob-local up`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: trainingjob-local logs [-n namespace] [-c container] [--rank N] <pod or trainingjob>")
	}
	// Worker pods are named <trainingjob>-worker-<rank>-<suffix>.
	pods := []string{fs.Arg(0), fmt.Sprintf("%s-worker-%d-*", fs.Arg(0), *rank)}
	root := filepath.Join(*dir, "data")
	for _, pod := range pods {
		if path, err := realnode.LogPath(*dir, *ns, pod, *container); err == nil {
			return realnode.CopyLog(out, path)
		}
	}
	path, err := node.LogPath(root, *ns, pods[0], *container)
	if err != nil {
		path, err = node.LogPath(root, *ns, pods[1], *container)
	}
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only
	_, err = io.Copy(out, f)
	return err
}
