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
	path, ok, err := Newest(filepath.Join(root, "pods", fmt.Sprintf("%s_%s_*", namespace, pod), "logs", container+".log"))
	if err == nil && !ok {
		err = fmt.Errorf("no log of container %q of pod %s/%s under %s", container, namespace, pod, root)
	}
	return path, err
}

// Newest is the most recently written file matching the glob pattern; ok is false when none does.
func Newest(pattern string) (path string, ok bool, err error) {
	matches, err := filepath.Glob(pattern)
	if err != nil || len(matches) == 0 {
		return "", false, err
	}
	sort.Slice(matches, func(i, j int) bool { return modTime(matches[i]) > modTime(matches[j]) })
	return matches[0], true, nil
}

func modTime(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.ModTime().UnixNano()
}
