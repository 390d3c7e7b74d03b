package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// Agent keeps one job's checkpoints rotated and reports them. It runs where the data is reachable with
// the workers' own identity: beside rank 0 (the operator never mounts users' volumes nor needs their
// cloud credentials). It syncs every Interval, and soon after each read of /status, which serves the last
// result as JSON.
//
// Resume safety: the operator puts the newest checkpoint the agent reported into RESUME_FROM (the job's
// ConfigMap), which a restarting worker reads. So the agent never deletes a checkpoint the workers may
// be told to resume from: ResumeFrom (what the ConfigMap named when this agent started, then what the
// operator says it names: PUT /resume-from?uri=<uri>) and every newer checkpoint it has served since.
//
// Only the operator may say so: with a Token, a PUT /resume-from that does not carry it is refused
// (agentapi.Server), so another tenant's pod that reaches this one cannot make it rotate away the
// checkpoint the next attempt resumes from. GET /status stays open (read-only).
type Agent struct {
	Store    Store
	Root     string
	Policy   Policy
	Interval time.Duration
	Log      logr.Logger
	// ResumeFrom is what the workers resume from now (RESUME_FROM when the agent started).
	ResumeFrom string
	// TerminationLog, when set, receives the final report as JSON when the agent stops (the container's
	// termination message), so the operator learns the last checkpoint of a run after its pods stopped.
	TerminationLog string
	// Token is the job's token (agentapi.TokenEnv) that PUT /resume-from must carry; empty (a Job built
	// before tokens) accepts any, as before, and says so once in the log.
	Token string
	// NameRoot, when set, holds the runs of the job's name, Root one of them: Run looks there once for
	// earlier runs' checkpoints (EarlierRuns), which the report names.
	NameRoot string

	kick   chan struct{}
	syncMu sync.Mutex // one Sync at a time
	mu     sync.Mutex
	last   AgentStatus
	served []string // newest checkpoints served on /status that ResumeFrom has not caught up with

	refusedMu   sync.Mutex // the log of refused PUTs, at most one line a minute
	refusedLast time.Time
	refused     int
}

// AgentStatus is the agent's report (see package agentapi).
type AgentStatus = agentapi.Status

// Handler serves the agent's protocol (agentapi): GET /status, and PUT /resume-from with the Token. Run
// serves one; a test may serve one without Run (nothing then syncs but SyncOnce).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	a.kick = make(chan struct{}, 1)
	agentapi.Server{Status: func() AgentStatus {
		select {
		case a.kick <- struct{}{}: // the reader comes back in about one interval of its own: be fresh then
		default:
		}
		return a.Serve()
	}, Acknowledge: a.Acknowledge, Token: a.Token, Refused: a.logRefused}.Register(mux)
	if a.Token == "" {
		a.Log.Info("no token (" + agentapi.TokenEnv + "): PUT " + agentapi.ResumeFromPath + " is accepted from anyone who reaches this pod " +
			"(the Job was built without an agent token: by an operator before tokens, or one without a key)")
	}
	return mux
}

// Run syncs until ctx is done, serving Handler on l.
func (a *Agent) Run(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.Log.Error(err, "status endpoint")
		}
	}()
	a.findEarlierRuns(ctx)
	t := time.NewTicker(a.Interval)
	defer t.Stop()
	for {
		a.SyncOnce(ctx)
		select {
		case <-ctx.Done():
			// One last rotation when the workers are done, so the final checkpoint is accounted for.
			final, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return a.writeTerminationLog(a.SyncOnce(final))
		case <-t.C:
		case <-a.kick:
		}
	}
}

// findEarlierRuns records the earlier runs under NameRoot in the report; one that cannot be listed is
// logged and left out (the run goes on: it is only news for the user).
func (a *Agent) findEarlierRuns(ctx context.Context) {
	if a.NameRoot == "" {
		return
	}
	runs, err := EarlierRuns(ctx, a.Store, a.NameRoot, path.Base(a.Root))
	if err != nil {
		a.Log.Error(err, "looking for earlier runs' checkpoints", "under", a.NameRoot)
		return
	}
	if len(runs) > 0 {
		a.Log.Info("earlier runs of this name left checkpoints; this run does not resume from them unless resumeFrom names one",
			"newest", runs[0].Latest)
	}
	a.mu.Lock()
	a.last.EarlierRuns = runs
	a.mu.Unlock()
}

// maxTerminationMessage is what the kubelet keeps of a termination message.
const maxTerminationMessage = 4096

func (a *Agent) writeTerminationLog(st AgentStatus) error {
	if a.TerminationLog == "" {
		return nil
	}
	data, err := json.Marshal(st)
	if err == nil && len(data) > maxTerminationMessage {
		st.EarlierRuns = nil // the live reads named them; the final report must stay whole
		data, err = json.Marshal(st)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(a.TerminationLog, data, 0o644)
}

// maxReportedError bounds the error a report carries: the report is also the agent's termination message,
// of which the kubelet keeps 4 KiB, and the job's condition shows 1 KiB of it.
const maxReportedError = 1024

// reportedError returns err's message, cut to maxReportedError bytes at a character's boundary.
func reportedError(err error) string { return text.Cut(err.Error(), maxReportedError) }

// SyncOnce runs one Sync and records its status.
func (a *Agent) SyncOnce(ctx context.Context) AgentStatus {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	r, err := Sync(ctx, a.Store, a.Root, a.policy(), time.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.last
	st.Time, st.Error = time.Now(), ""
	if err != nil {
		st.Error = reportedError(err)
		a.Log.Error(err, "listing checkpoints", "root", a.Root)
		a.last = st
		return st
	}
	if r.DeleteError != nil {
		st.Error = reportedError(r.DeleteError)
		a.Log.Error(r.DeleteError, "deleting rotated checkpoints (retried next time)", "root", a.Root)
	}
	st.Deleted += len(r.Deleted)
	// A checkpoint written at preemption has the epoch of the one before it: the newest is told by its name.
	if r.Latest != nil && a.Store.URI(r.Latest.Dir) != st.Latest {
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

// policy returns Policy protecting, besides its own, what workers may be told to resume from.
func (a *Agent) policy() Policy {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.Policy
	p.Protect = append(append(slices.Clone(p.Protect), a.served...), a.ResumeFrom)
	return p
}

// Serve returns the last sync's status, as served to the operator: its latest checkpoint stays protected
// until the operator acknowledges RESUME_FROM at or after it.
func (a *Agent) Serve() AgentStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.last.Latest; l != "" && !slices.Contains(a.served, l) && l != a.ResumeFrom {
		a.served = append(a.served, l)
	}
	return a.last
}

// logRefused logs refused PUTs /resume-from, at most one line a minute (a flood of them is one line a
// minute), with how many were refused since the last line and where the last came from.
func (a *Agent) logRefused(r *http.Request) {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	a.refused++
	if now := time.Now(); now.Sub(a.refusedLast) >= time.Minute {
		a.Log.Info("refused PUT "+agentapi.ResumeFromPath+" without the job's token", "from", r.RemoteAddr, "refused", a.refused)
		a.refusedLast, a.refused = now, 0
	}
}

// Acknowledge records what RESUME_FROM names now. The operator only ever moves it to a checkpoint the
// agent served, newest last, so served checkpoints older than it can no longer be named and lose their
// protection (rotation may then delete them).
func (a *Agent) Acknowledge(resumeFrom string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ResumeFrom = resumeFrom
	if _, ok := agentapi.PositionOf(resumeFrom); !ok {
		return
	}
	a.served = slices.DeleteFunc(a.served, func(s string) bool { return agentapi.Newer(resumeFrom, s) })
}
