package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Agent keeps one job's checkpoints rotated and reports them. It runs where the data is reachable with
// the workers' own identity: beside rank 0 (the operator never mounts users' volumes nor needs their
// cloud credentials). It syncs every Interval and serves the last result as JSON at /status.
type Agent struct {
	Store    Store
	Root     string
	Policy   Policy
	Interval time.Duration
	Log      logr.Logger

	mu   sync.Mutex
	last AgentStatus
}

// AgentStatus is what /status returns.
type AgentStatus struct {
	// Latest is the URI of the newest complete checkpoint, LatestEpoch its epoch.
	Latest      string    `json:"latest,omitempty"`
	LatestEpoch int       `json:"latestEpoch,omitempty"`
	LastTime    time.Time `json:"lastTime,omitzero"`
	// Count and SizeBytes cover the complete checkpoints kept.
	Count     int   `json:"count"`
	SizeBytes int64 `json:"sizeBytes"`
	// Deleted counts checkpoints rotation removed since the agent started; Created counts new complete
	// checkpoints it saw.
	Deleted int `json:"deleted"`
	Created int `json:"created"`
	// Error is why the last sync (listing) or a deletion failed; empty when all went well.
	Error string    `json:"error,omitempty"`
	Time  time.Time `json:"time"`
}

// Run syncs until ctx is done, serving /status on l.
func (a *Agent) Run(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.Log.Error(err, "status endpoint")
		}
	}()
	t := time.NewTicker(a.Interval)
	defer t.Stop()
	for {
		a.SyncOnce(ctx)
		select {
		case <-ctx.Done():
			// One last rotation when the workers are done, so the final checkpoint is accounted for.
			final, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a.SyncOnce(final)
			return nil
		case <-t.C:
		}
	}
}

// SyncOnce runs one Sync and records its status.
func (a *Agent) SyncOnce(ctx context.Context) AgentStatus {
	r, err := Sync(ctx, a.Store, a.Root, a.Policy, time.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.last
	st.Time, st.Error = time.Now(), ""
	if err != nil {
		st.Error = err.Error()
		a.Log.Error(err, "listing checkpoints", "root", a.Root)
		a.last = st
		return st
	}
	if r.DeleteError != nil {
		st.Error = r.DeleteError.Error()
		a.Log.Error(r.DeleteError, "deleting rotated checkpoints (retried next time)", "root", a.Root)
	}
	st.Deleted += len(r.Deleted)
	if r.Latest != nil && r.Latest.Epoch != st.LatestEpoch {
		st.Created++
		st.Latest, st.LatestEpoch, st.LastTime = a.Store.URI(r.Latest.Dir), r.Latest.Epoch, r.Latest.Time
	}
	st.Count, st.SizeBytes = 0, 0
	for _, c := range r.Checkpoints {
		if c.Complete {
			st.Count++
			st.SizeBytes += c.Size
		}
	}
	a.last = st
	return st
}

// Status is the last sync's status.
func (a *Agent) Status() AgentStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}
