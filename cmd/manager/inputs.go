package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/inputs"
)

// readyFile, in the input cache, names the attempt (its Job) for which rank 0 last finished the fetch.
const readyFile = ".ready"

// runFetchInputs runs `manager fetch-inputs`, the workers' init container for model and dataset sources
// (builders.inputsInitContainer). Rank 0 fetches each source into DIR/model or DIR/dataset (what the cache
// lacks: inputs.Fetch), writes its reports as its termination message and DIR/.ready naming its attempt;
// the other ranks wait for that. A source that fails ends the container with the source named.
//
// With --per-node, DIR is the job's directory in the node's cache (the only one the pod sees) and every
// rank fetches, one at a time on the node (nodeLock): the first copies, the others and later attempts on
// the node find it there. The node cache pruner (prune-node-cache), not a job's pod, removes old ones.
//
// What the fetches write is bounded by --max-bytes (the model and the dataset together; the error names
// --budget-name) and --max-files per input.
func runFetchInputs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fetch-inputs", flag.ContinueOnError)
	var dir, model, dataset, termLog, listen string
	var wait time.Duration
	var perNode bool
	var budget inputs.Budget
	fs.StringVar(&dir, "dir", "/inputs/cache", "the input cache")
	fs.StringVar(&model, "model", "", "the model's source, when it is fetched")
	fs.StringVar(&dataset, "dataset", "", "the dataset's source, when it is fetched")
	fs.StringVar(&termLog, "termination-log", "", "file that receives the reports (or the error)")
	fs.DurationVar(&wait, "poll", time.Second, "how often a rank other than 0 looks for rank 0's fetch")
	fs.StringVar(&listen, "listen", "", "address of rank 0's progress endpoint (GET /status) while it fetches; empty: none")
	fs.BoolVar(&perNode, "per-node", false, "DIR is the job's directory in a node's cache: every rank fetches, one at a time on the node")
	fs.Int64Var(&budget.MaxBytes, "max-bytes", 0, "the most bytes the inputs may take in DIR (0: no limit)")
	fs.StringVar(&budget.Limit, "budget-name", "", "what --max-bytes is, named in the error past it (for example inputs.cacheSize 50Gi)")
	fs.IntVar(&budget.MaxFiles, "max-files", inputs.DefaultMaxFiles, "the most files one input may list, or one archive hold")
	if err := fs.Parse(args); err != nil {
		return err
	}
	attempt := os.Getenv("ATTEMPT_JOB")
	if perNode {
		unlock, err := nodeLock(ctx, dir, wait)
		if err != nil {
			writeTerminationLog(termLog, err.Error())
			return err
		}
		defer unlock()
	} else if rank := os.Getenv("RANK"); rank != "" && rank != "0" {
		return waitReady(ctx, dir, attempt, wait)
	}
	p := newProgress(map[string]string{"model": model, "dataset": dataset})
	if listen != "" {
		stop, err := p.serve(listen)
		if err != nil {
			return err
		}
		defer stop()
	}
	reports, err := fetchAll(ctx, dir, p, &budget)
	if err != nil {
		writeTerminationLog(termLog, err.Error())
		return err
	}
	data, _ := json.Marshal(reports) // plain structs
	writeTerminationLog(termLog, string(data))
	fmt.Println(string(data))
	if perNode {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, readyFile), []byte(attempt), 0o644)
}

func fetchAll(ctx context.Context, dir string, p *progress, budget *inputs.Budget) ([]inputs.Report, error) {
	env := inputs.EnvFromOS()
	var reports []inputs.Report
	for _, in := range p.inputs {
		src, err := inputs.Parse(in.source)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in.name, err)
		}
		fmt.Printf("fetching %s %s\n", in.name, src.URI)
		rep, err := inputs.Fetch(ctx, in.name, src, filepath.Join(dir, in.name), env, &in.Progress, budget)
		if err != nil {
			return nil, fmt.Errorf("fetching %s %s: %w", in.name, src.URI, err)
		}
		fmt.Printf("%s %s: %d bytes in %d files, %d read in %.1fs\n", in.name, src.URI, rep.Bytes, rep.Files, rep.Fetched, rep.Seconds)
		reports = append(reports, rep)
	}
	return reports, nil
}

// progress is each source's bytes so far, served as a JSON list of inputs.Status.
type progress struct {
	inputs []*sourceProgress
}

type sourceProgress struct {
	name, source string
	inputs.Progress
}

func newProgress(uris map[string]string) *progress {
	p := &progress{}
	for _, name := range []string{"model", "dataset"} {
		if uris[name] != "" {
			p.inputs = append(p.inputs, &sourceProgress{name: name, source: uris[name]})
		}
	}
	return p
}

func (p *progress) status() []inputs.Status {
	out := make([]inputs.Status, len(p.inputs))
	for i, in := range p.inputs {
		out[i] = inputs.Status{Name: in.name, Source: inputs.Redacted(in.source), Done: in.Done.Load(), Total: in.Total.Load()}
	}
	return out
}

// serve answers GET /status on addr until stop is called.
func (p *progress) serve(addr string) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.status())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }, nil
}

// waitReady waits until rank 0 has fetched the inputs for this attempt.
func waitReady(ctx context.Context, dir, attempt string, poll time.Duration) error {
	for {
		if data, err := os.ReadFile(filepath.Join(dir, readyFile)); err == nil && strings.TrimSpace(string(data)) == attempt {
			fmt.Println("rank 0 fetched the inputs")
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

func writeTerminationLog(path, msg string) {
	if path != "" {
		_ = os.WriteFile(path, []byte(msg), 0o644) // best effort: the log has it too
	}
}
