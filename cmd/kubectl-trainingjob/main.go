// Command kubectl-trainingjob is a kubectl plugin (install it on the PATH; kubectl runs it as
// `kubectl trainingjob`) for what `kubectl describe` and `kubectl logs` make long-winded with TrainingJobs:
//
//	kubectl trainingjob status NAME         the job as a story: state and why, progress, metrics, workers,
//	                                        checkpoint, MLflow run, conditions, events, the current workers
//	kubectl trainingjob logs NAME [--rank N] [-f] [--tail N]
//	                                        a rank's log, from the current attempt's pod
//	kubectl trainingjob checkpoints NAME    the newest checkpoint, where they are kept, what workers resume from
//	kubectl trainingjob suspend NAME        stop the workers (checkpoints stay); resume continues from the newest
//	kubectl trainingjob resume NAME
//
// Flags: --kubeconfig, --context, -n/--namespace (default: the context's namespace).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainingjob-operator/trainingjob-operator/controllers"
)

const usage = `usage: kubectl trainingjob COMMAND NAME [flags]

commands:
  status NAME        the job as a story: state, progress, workers, checkpoint, MLflow, conditions, events
  logs NAME          a rank's log from the current attempt (--rank N, default 0; -f; --tail N)
  checkpoints NAME   the newest checkpoint, where checkpoints are kept, what workers resume from
  suspend NAME       stop the workers; the job keeps its checkpoints
  resume NAME        start the workers again, from the newest checkpoint

flags (any command): --kubeconfig FILE, --context NAME, -n/--namespace NS
`

// cli is one invocation: the clients, the namespace and where output goes.
type cli struct {
	c         client.Client
	cs        kubernetes.Interface
	namespace string
	out       io.Writer
	now       time.Time
}

// options are the flags of every command.
type options struct {
	kubeconfig, context, namespace string
	rank                           int
	follow                         bool
	tail                           int64
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-trainingjob:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(out, usage)
		return nil
	}
	cmd, o, name, err := parse(args)
	if err != nil {
		return err
	}
	x, err := connect(o, out)
	if err != nil {
		return err
	}
	switch cmd {
	case "status":
		return x.status(ctx, name)
	case "logs":
		return x.logs(ctx, name, o)
	case "checkpoints":
		return x.checkpoints(ctx, name)
	case "suspend":
		return x.setSuspend(ctx, name, true)
	case "resume":
		return x.setSuspend(ctx, name, false)
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

// parse reads COMMAND NAME and the flags, which may come before or after NAME.
func parse(args []string) (cmd string, o options, name string, err error) {
	cmd = args[0]
	fs := flag.NewFlagSet("kubectl-trainingjob "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig")
	fs.StringVar(&o.context, "context", "", "kubeconfig context")
	fs.StringVar(&o.namespace, "namespace", "", "namespace (default: the context's)")
	fs.StringVar(&o.namespace, "n", "", "namespace (short)")
	fs.IntVar(&o.rank, "rank", 0, "rank whose log to show")
	fs.BoolVar(&o.follow, "follow", false, "stream the log")
	fs.BoolVar(&o.follow, "f", false, "stream the log (short)")
	fs.Int64Var(&o.tail, "tail", -1, "lines from the end of the log (-1: all)")
	rest := args[1:]
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return "", o, "", fmt.Errorf("%w\n%s", err, usage)
		}
		if rest = fs.Args(); len(rest) > 0 {
			if name != "" {
				return "", o, "", fmt.Errorf("one TrainingJob name expected, got %q and %q", name, rest[0])
			}
			name, rest = rest[0], rest[1:]
		}
	}
	if name == "" {
		return "", o, "", fmt.Errorf("a TrainingJob name is required\n%s", usage)
	}
	return cmd, o, name, nil
}

// connect loads the kubeconfig as kubectl does (--kubeconfig, $KUBECONFIG, ~/.kube/config).
func connect(o options, out io.Writer) (*cli, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, err
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &cli{c: c, cs: cs, namespace: ns, out: out, now: time.Now()}, nil
}
