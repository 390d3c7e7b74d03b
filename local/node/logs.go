package node

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// LogPath is the log file of a container of the newest pod whose name matches the glob pod: stdout and
// stderr of every run of the container, appended in order.
func LogPath(root, namespace, pod, container string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(root, "pods", fmt.Sprintf("%s_%s_*", namespace, pod), "logs", container+".log"))
	if err != nil {
		return "", err
	}
	if len(matches) == 0 {
		return "", fmt.Errorf("no log of container %q of pod %s/%s under %s", container, namespace, pod, root)
	}
	sort.Slice(matches, func(i, j int) bool { return modTime(matches[i]) > modTime(matches[j]) })
	return matches[0], nil
}

func modTime(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.ModTime().UnixNano()
}
