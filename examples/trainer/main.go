// Command trainer is the example distributed trainer: data-parallel logistic regression on a synthetic
// dataset (standard library, plus the operator's checkpoint package for S3 and GCS). It reads the
// environment the operator injects (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, POD_IP, METRICS_PORT,
// TRAININGJOB_CONFIG, CHECKPOINT_DIR or CHECKPOINT_URI, CHECKPOINT_FREQUENCY, RESUME_FROM): every rank
// computes gradients on its shard, the ranks sum them over TCP through rank 0, rank 0 exposes progress in
// the Prometheus text format on METRICS_PORT, writes a checkpoint every CHECKPOINT_FREQUENCY epochs (to a
// volume, S3 or GCS) and resumes from RESUME_FROM, or without it from the newest complete checkpoint it
// finds. When the job is tracked in MLflow, rank 0 also logs each epoch's wall time into the job's run
// (MLFLOW_RUN_ID).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

type config struct {
	rank, world              int
	masterAddr, podIP        string
	masterPort, metricsPort  int
	epochs, batch            int
	lr                       float64
	samples, features        int
	seed                     uint64
	checkpointAt, resume     string
	frequency                int
	epochDelay, rendezvousTO time.Duration
	storageWait              time.Duration
	// fail is a fault to inject (--fail-at), for the operator's failure-handling tests.
	fail fault
	// blockOnPeerLoss makes a rank that loses a peer wait forever instead of exiting, as a rank blocked in
	// an NCCL collective does until NCCL's timeout (30 minutes by default).
	blockOnPeerLoss bool
}

func main() {
	c, err := loadConfig(os.Args[1:])
	if err == nil {
		err = train(c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(1)
	}
}

// loadConfig reads the environment, the run's config file and the flags (which win).
func loadConfig(args []string) (config, error) {
	c := config{
		rank: envInt("RANK", 0), world: envInt("WORLD_SIZE", 1), masterAddr: envStr("MASTER_ADDR", "127.0.0.1"),
		masterPort: envInt("MASTER_PORT", 29500), metricsPort: envInt("METRICS_PORT", 8080), podIP: os.Getenv("POD_IP"),
		epochs: 10, batch: 64, lr: 0.5, checkpointAt: envStr("CHECKPOINT_DIR", os.Getenv("CHECKPOINT_URI")),
		frequency: envInt("CHECKPOINT_FREQUENCY", 1), resume: os.Getenv("RESUME_FROM"),
	}
	if err := c.readRunConfig(os.Getenv("TRAININGJOB_CONFIG")); err != nil {
		return c, err
	}
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	fs.IntVar(&c.epochs, "epochs", c.epochs, "epochs to train (default: hyperparameters.epochs, else 10)")
	fs.IntVar(&c.batch, "batch-size", c.batch, "samples per rank per step (default: hyperparameters.batchSize)")
	fs.Float64Var(&c.lr, "learning-rate", c.lr, "learning rate (default: hyperparameters.learningRate)")
	fs.IntVar(&c.samples, "samples", 8192, "size of the synthetic dataset")
	fs.IntVar(&c.features, "features", 16, "features per sample")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the synthetic dataset")
	fs.DurationVar(&c.epochDelay, "epoch-delay", 0, "pause after each epoch, to watch progress")
	fs.DurationVar(&c.rendezvousTO, "rendezvous-timeout", 5*time.Minute, "how long ranks wait for each other")
	fs.DurationVar(&c.storageWait, "storage-wait", 5*time.Minute, "how long rank 0 waits for unreachable checkpoint storage when it resumes")
	fs.Var(&c.fail, "fail-at", "inject a fault: RANK:EPOCH:CODE exits (or, for CODE > 128, kills itself with signal CODE-128) "+
		"as that epoch starts, in a run that did not resume from a checkpoint")
	fs.Var(hang{&c.fail}, "hang-at", "inject a hang: RANK:EPOCH stops working (alive, silent) as that epoch starts "+
		"(0: before the rendezvous), in a run that did not resume from a checkpoint")
	fs.BoolVar(&c.fail.always, "fail-always", false, "inject the --fail-at fault in resumed runs too")
	fs.BoolVar(&c.blockOnPeerLoss, "block-on-peer-loss", false,
		"wait forever when a peer is lost, as a rank blocked in an NCCL collective does")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.world < 1 || c.rank < 0 || c.rank >= c.world {
		return c, fmt.Errorf("RANK %d is not in [0, WORLD_SIZE=%d)", c.rank, c.world)
	}
	if c.frequency < 1 {
		c.frequency = 1
	}
	return c, nil
}

// readRunConfig takes epochs, batch size and learning rate from the operator's config.json.
func (c *config) readRunConfig(path string) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var rc struct {
		Hyperparameters struct {
			LearningRate *float64 `json:"learningRate"`
			BatchSize    *int     `json:"batchSize"`
			Epochs       *int     `json:"epochs"`
		} `json:"hyperparameters"`
	}
	if err := json.Unmarshal(data, &rc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	h := rc.Hyperparameters
	if h.LearningRate != nil {
		c.lr = *h.LearningRate
	}
	if h.BatchSize != nil {
		c.batch = *h.BatchSize
	}
	if h.Epochs != nil {
		c.epochs = *h.Epochs
	}
	return nil
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// bindAddr returns where this rank listens: its pod IP when known (several pods may share a host), else every
// interface.
func (c config) bindAddr(port int) string { return net.JoinHostPort(c.podIP, strconv.Itoa(port)) }
