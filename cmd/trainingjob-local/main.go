// Command trainingjob-local runs TrainingJobs on one machine, without a cluster or containers: a local
// control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from pinned modules by
// hack/testbin.sh), one or more process nodes that run pods as local processes, and the operator.
//
//	trainingjob-local up -f examples/trainingjob-local.yaml   start everything, apply, watch
//	trainingjob-local logs <pod> [-n namespace] [-c container] print a container's log
//	trainingjob-local kubeconfig                               print the kubeconfig path for kubectl
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, os.Stdout, os.Args[2:])
	case "logs":
		err = logs(os.Stdout, os.Args[2:])
	case "kubeconfig":
		fmt.Println(filepath.Join(defaultStateDir(), "kubeconfig"))
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainingjob-local:", err)
		stop()
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: trainingjob-local up|logs|kubeconfig [flags]; -h after a command lists its flags")
	os.Exit(2)
}

// defaultStateDir holds the kubeconfig, the components' logs and the process nodes' data.
func defaultStateDir() string {
	if d := os.Getenv("TRAININGJOB_LOCAL_DIR"); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "trainingjob-operator", "local")
}
