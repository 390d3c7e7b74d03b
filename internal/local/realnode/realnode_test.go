package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartKubelet: a kubelet start returns once the kubelet serves the device plugin socket (the next
// node's may start then), and a kubelet that exits first is reported with the end of its log.
func TestStartKubelet(t *testing.T) {
	tests := []struct {
		name    string
		kubelet string // the shell script standing in for the kubelet; $SOCK is the socket's path
		wantErr []string
	}{
		{name: "serves the socket", kubelet: `touch "$SOCK"; exec sleep 60`},
		{name: "exits first", kubelet: "echo starting; echo 'Failed to start ContainerManager' >&2; exit 1",
			wantErr: []string{"kubelet of real-node-0 exited", "exit status 1", "starting\nFailed to start ContainerManager"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "device-plugins", "kubelet.sock")
			old := deviceSocket
			deviceSocket = sock
			t.Cleanup(func() { deviceSocket = old })
			script := "#!/bin/sh\nSOCK=" + sock + "\n" + tt.kubelet + "\n"
			if err := os.WriteFile(filepath.Join(dir, "kubelet"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
				t.Fatal(err)
			}
			// A socket an earlier kubelet left is not taken for this one's.
			if err := os.WriteFile(sock, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			n := &Node{opts: Options{Assets: dir, Dir: dir, Name: "real-node-0"}}
			err := n.startKubelet(context.Background())
			t.Cleanup(n.StopKubelet)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("startKubelet: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("startKubelet succeeded; want the kubelet's exit")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("startKubelet error %q does not contain %q", err, want)
				}
			}
		})
	}
}
