package checkpoint

import (
	"context"
	"fmt"
	"path"
	"strings"
)

// CheckResumeFrom verifies that resumeFrom names a complete checkpoint in s. resumeFrom is a URI
// (s3://bucket/key, gs://bucket/key) or a path under mountDir for a mounted volume.
func CheckResumeFrom(ctx context.Context, s Store, resumeFrom, mountDir string) error {
	key, err := keyOf(resumeFrom, mountDir)
	if err != nil {
		return err
	}
	objs, err := s.List(ctx, key+"/")
	if err != nil {
		return fmt.Errorf("resumeFrom %s: cannot list it: %w", resumeFrom, err)
	}
	if len(objs) == 0 {
		return fmt.Errorf("resumeFrom %s does not exist", resumeFrom)
	}
	for _, c := range Scan(path.Dir(key), objs) {
		if c.Dir == key && c.Complete {
			return nil
		}
	}
	return fmt.Errorf("resumeFrom %s is not a complete checkpoint (no %s marker in a checkpoint-epoch-<N> directory)", resumeFrom, Marker)
}

// keyOf turns resumeFrom into a store key.
func keyOf(resumeFrom, mountDir string) (string, error) {
	for _, scheme := range []string{"s3://", "gs://"} {
		if rest, ok := strings.CutPrefix(resumeFrom, scheme); ok {
			if _, key := bucketKey(rest); key != "" {
				return key, nil
			}
			return "", fmt.Errorf("resumeFrom %s names no object", resumeFrom)
		}
	}
	for _, scheme := range []string{"pvc://", "nfs://"} {
		if rest, ok := strings.CutPrefix(resumeFrom, scheme); ok {
			return strings.Trim(rest, "/"), nil
		}
	}
	rel, ok := strings.CutPrefix(path.Clean(resumeFrom), path.Clean(mountDir)+"/")
	if !ok {
		return "", fmt.Errorf("resumeFrom %s is not under the checkpoint volume %s", resumeFrom, mountDir)
	}
	return rel, nil
}
