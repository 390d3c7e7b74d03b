package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
func runFetchInputs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fetch-inputs", flag.ContinueOnError)
	var dir, model, dataset, termLog string
	var wait time.Duration
	fs.StringVar(&dir, "dir", "/inputs/cache", "the input cache")
	fs.StringVar(&model, "model", "", "the model's source, when it is fetched")
	fs.StringVar(&dataset, "dataset", "", "the dataset's source, when it is fetched")
	fs.StringVar(&termLog, "termination-log", "", "file that receives the reports (or the error)")
	fs.DurationVar(&wait, "poll", time.Second, "how often a rank other than 0 looks for rank 0's fetch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	attempt := os.Getenv("ATTEMPT_JOB")
	if rank := os.Getenv("RANK"); rank != "" && rank != "0" {
		return waitReady(ctx, dir, attempt, wait)
	}
	reports, err := fetchAll(ctx, dir, map[string]string{"model": model, "dataset": dataset})
	if err != nil {
		writeTerminationLog(termLog, err.Error())
		return err
	}
	data, _ := json.Marshal(reports) // plain structs
	writeTerminationLog(termLog, string(data))
	fmt.Println(string(data))
	return os.WriteFile(filepath.Join(dir, readyFile), []byte(attempt), 0o644)
}

func fetchAll(ctx context.Context, dir string, uris map[string]string) ([]inputs.Report, error) {
	env := inputs.EnvFromOS()
	var reports []inputs.Report
	for _, name := range []string{"model", "dataset"} {
		if uris[name] == "" {
			continue
		}
		src, err := inputs.Parse(uris[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("fetching %s %s\n", name, src.URI)
		rep, err := inputs.Fetch(ctx, name, src, filepath.Join(dir, name), env, nil)
		if err != nil {
			return nil, fmt.Errorf("fetching %s %s: %w", name, src.URI, err)
		}
		fmt.Printf("%s %s: %d bytes in %d files, %d read in %.1fs\n", name, src.URI, rep.Bytes, rep.Files, rep.Fetched, rep.Seconds)
		reports = append(reports, rep)
	}
	return reports, nil
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
