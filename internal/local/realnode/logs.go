package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/trainingjob-operator/trainingjob-operator/internal/local/node"
)

// podLogsDir returns where a node's kubelet writes its containers' logs (not the machine's /var/log/pods:
// several nodes share the machine, and nothing is left behind).
func (o Options) podLogsDir() string { return filepath.Join(o.Dir, "pod-logs") }

// nodeDirs returns the glob of the real nodes' directories under a state directory.
func nodeDirs(stateDir string) string { return filepath.Join(stateDir, "real-node-*") }

// ClearNodeDirs removes what real nodes of an earlier run left under stateDir (their pod logs, a killed
// run's containerd root and mounts): a run on process nodes starts without them, so that nothing of the
// other mode (trainingjob-local logs reads the real nodes' logs first) is taken for its own.
func ClearNodeDirs(stateDir string) error {
	dirs, _ := filepath.Glob(nodeDirs(stateDir)) // the only error is a bad pattern: none
	var errs []error
	for _, d := range dirs {
		errs = append(errs, unmountUnder(d), os.RemoveAll(d))
	}
	return errors.Join(errs...)
}

// LogPath returns the newest log file of a container of a pod (pod may be a glob of its name) in namespace
// on any real node whose state is under stateDir, as the kubelet keeps it: one file per run.
func LogPath(stateDir, namespace, pod, container string) (string, error) {
	path, ok, err := node.Newest(filepath.Join(nodeDirs(stateDir), "pod-logs", fmt.Sprintf("%s_%s_*", namespace, pod), container, "*.log"))
	if err == nil && !ok {
		err = fmt.Errorf("no log of container %q of pod %s/%s on a real node under %s", container, namespace, pod, stateDir)
	}
	return path, err
}

// CopyLog writes what the container printed, from a log file in the CRI format ("TIME STREAM TAG
// MESSAGE" per line; tag P marks a line continued on the next).
func CopyLog(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 4 {
			continue
		}
		msg := parts[3]
		if parts[2] != "P" {
			msg += "\n"
		}
		if _, err := io.WriteString(w, msg); err != nil {
			return err
		}
	}
	return sc.Err()
}
