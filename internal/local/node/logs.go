package node

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// LogPath returns the log file of a container of the newest pod whose name matches the glob pod: stdout and
// stderr of every run of the container, appended in order.
func LogPath(root, namespace, pod, container string) (string, error) {
	path, ok, err := Newest(logPattern(root, namespace, pod, container))
	if err == nil && !ok {
		err = fmt.Errorf("no log of container %q of pod %s/%s under %s", container, namespace, pod, root)
	}
	return path, err
}

// LogPaths returns the log files of a container of every pod whose name matches the glob pod (the pods of
// every attempt of a rank), in no particular order.
func LogPaths(root, namespace, pod, container string) []string {
	paths, _ := filepath.Glob(logPattern(root, namespace, pod, container)) // the only error is a bad pattern: none
	return paths
}

// AllLogs returns what the container of every pod whose name matches the glob pod printed, one pod after another.
func AllLogs(root, namespace, pod, container string) string {
	var all []byte
	for _, path := range LogPaths(root, namespace, pod, container) {
		data, _ := os.ReadFile(path)
		all = append(all, data...)
	}
	return string(all)
}

func logPattern(root, namespace, pod, container string) string {
	return filepath.Join(root, "pods", fmt.Sprintf("%s_%s_*", namespace, pod), "logs", container+".log")
}

// Newest returns the most recently written file matching the glob pattern; ok is false when none does.
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
