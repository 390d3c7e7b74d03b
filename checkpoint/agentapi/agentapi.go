// Package agentapi is the checkpoint agent's HTTP protocol, one definition for both sides: the paths, the
// report the agent serves, a Client the operator's CheckpointController calls it with, and Handle, which
// the agent (package checkpoint) serves it with.
//
//	GET /status              the agent's last report (Status) as JSON; the agent syncs again soon after
//	PUT /resume-from?uri=URI what the job's RESUME_FROM names now: older checkpoints lose their protection
//
// GET /status is read-only and open to whoever reaches the pod. PUT /resume-from changes what the agent
// protects from rotation, so an agent given a token (TokenEnv) refuses it with 401 Unauthorized, changing
// nothing, unless the request carries "Authorization: Bearer <token>". The token is per job: the operator
// derives it from a key only it holds (builders.AgentToken) and puts it in the agent container's
// environment, so only the operator and the job's own pod know it.
package agentapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The protocol's paths and parameter.
const (
	StatusPath      = "/status"
	ResumeFromPath  = "/resume-from"
	ResumeFromParam = "uri"
)

// TokenEnv is the agent container's environment variable that holds the job's token, which PUT
// /resume-from must carry as "Authorization: Bearer <token>".
const TokenEnv = "AGENT_TOKEN"

const bearer = "Bearer "

var dirName = regexp.MustCompile(`^checkpoint-epoch-([0-9]{1,9})(?:-step-([0-9]{1,15}))?$`)

// Position is where a checkpoint stands in the run: after Epoch complete epochs, or for one written
// mid-epoch (at preemption: checkpoint-epoch-<E>-step-<S>) at global training step Step of the next.
type Position struct {
	Epoch int
	Step  int64
}

// Before orders positions: by epoch, then an end-of-epoch checkpoint (no step) before a mid-epoch one.
func (p Position) Before(o Position) bool {
	if p.Epoch != o.Epoch {
		return p.Epoch < o.Epoch
	}
	return p.Step < o.Step
}

// PositionOf returns the position of a checkpoint path or URI (…/checkpoint-epoch-<E>[-step-<S>]), and
// whether it names one: the layout Status.Latest and RESUME_FROM follow.
func PositionOf(uri string) (Position, bool) {
	m := dirName.FindStringSubmatch(path.Base(strings.TrimRight(uri, "/")))
	if m == nil {
		return Position{}, false
	}
	e, err := strconv.Atoi(m[1])
	if err != nil {
		return Position{}, false
	}
	p := Position{Epoch: e}
	if m[2] != "" {
		if p.Step, err = strconv.ParseInt(m[2], 10, 64); err != nil {
			return Position{}, false
		}
	}
	return p, true
}

// EpochOf returns the epoch of a checkpoint path or URI, and whether it names one (see PositionOf).
func EpochOf(uri string) (int, bool) {
	p, ok := PositionOf(uri)
	return p.Epoch, ok
}

// Newer reports whether checkpoint a stands after b (b empty: a names a checkpoint).
func Newer(a, b string) bool {
	pa, okA := PositionOf(a)
	if b == "" {
		return a != ""
	}
	pb, okB := PositionOf(b)
	return okA && okB && pb.Before(pa)
}

// maxBody bounds how much of an answer the client reads.
const maxBody = 1 << 20

// Status is the agent's report of one job's checkpoints.
type Status struct {
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
	// EarlierRuns are the newest complete checkpoints of earlier runs under the job's name, newest first,
	// as the agent found them when it started.
	EarlierRuns []EarlierRun `json:"earlierRuns,omitempty"`
}

// EarlierRun is the newest complete checkpoint of an earlier run under a job's name: a deleted
// TrainingJob of the same name.
type EarlierRun struct {
	Latest      string    `json:"latest"`
	LatestEpoch int       `json:"latestEpoch,omitempty"`
	LastTime    time.Time `json:"lastTime,omitzero"`
}

// Handle serves the protocol on mux without a token: status answers GET /status, acknowledge PUT
// /resume-from, from anyone (see Server for an agent that has a token).
func Handle(mux *http.ServeMux, status func() Status, acknowledge func(uri string)) {
	Server{Status: status, Acknowledge: acknowledge}.Register(mux)
}

// Server is the agent's side of the protocol.
type Server struct {
	// Status answers GET /status (always open: it changes nothing the operator relies on).
	Status func() Status
	// Acknowledge answers an authorized PUT /resume-from.
	Acknowledge func(uri string)
	// Token, when not empty, is what PUT /resume-from must carry ("Authorization: Bearer <Token>"); a
	// request without it or with another one gets 401 and Acknowledge is not called. Empty: every PUT is
	// accepted (an agent of a Job built before tokens).
	Token string
	// Refused, when set, is told of each refused PUT.
	Refused func(r *http.Request)
}

// Register serves the protocol on mux.
func (s Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("PUT "+ResumeFromPath, func(w http.ResponseWriter, r *http.Request) {
		if !Authorized(r, s.Token) {
			if s.Refused != nil {
				s.Refused(r)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="checkpoint-agent"`)
			http.Error(w, "checkpoint agent: PUT "+ResumeFromPath+" needs the job's token", http.StatusUnauthorized)
			return
		}
		s.Acknowledge(r.URL.Query().Get(ResumeFromParam))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Status())
	})
}

// Authorized reports whether token is empty, or r carries "Authorization: Bearer <token>". The comparison takes the
// same time whatever the request carries (of equal-length digests: not even the length leaks).
func Authorized(r *http.Request, token string) bool {
	if token == "" {
		return true
	}
	h := r.Header.Get("Authorization")
	if len(h) < len(bearer) || !strings.EqualFold(h[:len(bearer)], bearer) {
		return false
	}
	got, want := sha256.Sum256([]byte(h[len(bearer):])), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// Client calls agents; addr is host:port.
type Client struct {
	HTTP    *http.Client
	Timeout time.Duration
}

// Status reads an agent's report.
func (c *Client) Status(ctx context.Context, addr string) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, "http://"+addr+StatusPath, "", func(body io.Reader) error {
		return json.NewDecoder(body).Decode(&st)
	})
	return st, err
}

// AcknowledgeResumeFrom tells an agent what RESUME_FROM names now, with the job's token (the value of
// TokenEnv in the agent's container; "" sends none, for an agent that has none).
func (c *Client) AcknowledgeResumeFrom(ctx context.Context, addr, uri, token string) error {
	u := "http://" + addr + ResumeFromPath + "?" + url.Values{ResumeFromParam: {uri}}.Encode()
	return c.do(ctx, http.MethodPut, u, token, func(io.Reader) error { return nil })
}

// do sends one request; token, when set, goes in the Authorization header (never in an error).
func (c *Client) do(ctx context.Context, method, u, token string, read func(io.Reader) error) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", bearer+token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("checkpoint agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("checkpoint agent: %s %s: %s", method, u, resp.Status)
	}
	return read(io.LimitReader(resp.Body, maxBody))
}
