// Command supervisor runs a training program as its container's first process: it passes the program's
// output through unchanged, recognising the progress it shows (tqdm bars, Hugging Face, Lightning and
// Keras logs, "epoch N/M" lines, the job's own pattern in TRAININGJOB_PROGRESS_PATTERN), forwards the
// signals it receives to the program, reaps orphans, exits with the program's exit code, and serves what
// it recognised in the Prometheus text format at GET /metrics.
//
//	supervisor [--listen ADDR] -- CMD [ARGS...]
//	supervisor install DEST
//
// The operator wraps the trainer's command in it; an init container runs `supervisor install DEST` from
// the operator's image to copy it into the pod (builders).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor"
)

// patternEnv carries the job's monitoring.progressPattern.
const patternEnv = "TRAININGJOB_PROGRESS_PATTERN"

func main() {
	os.Exit(run(os.Args[1:]))
}

// run runs the command line's subcommand and returns the exit code.
func run(args []string) int {
	if len(args) > 0 && args[0] == "install" {
		return install(args[1:])
	}
	fs := flag.NewFlagSet("supervisor", flag.ContinueOnError)
	listen := fs.String("listen", ":8084", "`address` to serve GET /metrics and /healthz on; empty serves nothing")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: supervisor [--listen ADDR] -- CMD [ARGS...]\n       supervisor install DEST")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	return supervisor.Run(supervisor.Config{Command: fs.Args(), Listen: *listen, Pattern: os.Getenv(patternEnv),
		Control: supervisor.ControlFromEnv()})
}

// install copies the supervisor to the one path it is given.
func install(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: supervisor install DEST")
		return 2
	}
	if err := supervisor.Install(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: %v\n", err)
		return 1
	}
	return 0
}
