// Package controlapi is the supervisor's control protocol, one definition for both sides: the paths, what
// they carry, and a Client the JobController calls supervisors with. It serves a gang restart in place
// (failurePolicy.restartStrategy InPlace): the JobController learns a held failure and orders each
// worker's supervisor to restart, and the kubelet restarts every container of the pod on the restart
// code (a RestartAllContainers rule), keeping the pod.
//
//	GET  /exit     how the program's last run ended while the supervisor holds it (Exit)
//	POST /restart  an Order: stop the program and exit with the restart code
//
// Both need "Authorization: Bearer <token>", a token derived from the job's control token (TokenEnv), which
// only the operator (from a key only it holds) and the job's own pods know: for GET /exit ExitToken, bound
// to the pod; for POST /restart OrderToken, bound to the pod and the order's attempt. One seen on the wire
// opens no other pod and orders no other attempt. A supervisor given no token serves neither.
package controlapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// The protocol's paths.
const (
	ExitPath    = "/exit"
	RestartPath = "/restart"
)

// The environment of a supervisor that takes orders.
const (
	// TokenEnv holds the job's control token.
	TokenEnv = "TRAININGJOB_CONTROL_TOKEN"
	// RestartCodeEnv is the exit code the container's RestartAllContainers rule matches.
	RestartCodeEnv = "TRAININGJOB_RESTART_CODE"
	// AttemptEnv is the attempt (status.attempt) the pod was created in.
	AttemptEnv = "TRAININGJOB_ATTEMPT"
	// CurrentAttemptEnv is the job's attempt when the container was created (from the job's ConfigMap): a
	// pod that Kubernetes' Job controller created for a rank that was gone, after the gang moved on, is behind it
	// and waits for its order before it runs the program.
	CurrentAttemptEnv = "TRAININGJOB_CURRENT_ATTEMPT"
	// StateDirEnv is a directory that outlives the containers (an emptyDir of the pod) where the
	// supervisor keeps the attempt its last order named.
	StateDirEnv = "TRAININGJOB_STATE_DIR"
	// PodUIDEnv is the pod's UID (the downward API's metadata.uid): the supervisor takes only the tokens
	// of its pod.
	PodUIDEnv = "TRAININGJOB_POD_UID"
	// HoldEnv is how many seconds a failed program is held for an order (the supervisor's default when
	// unset).
	HoldEnv = "TRAININGJOB_HOLD_SECONDS"
)

// RestartCode is the exit code a supervisor exits with on an order to restart: none of the codes a shell, a
// signal or Python gives (126-128, 128+n up to 159, 1, 2).
const RestartCode = 215

// MaxAttemptLead bounds how far past the attempt a supervisor runs in (or the job's, when its container
// was created) an order may name: the operator orders the next attempt.
const MaxAttemptLead = 64

// ExitToken returns the token GET /exit of the pod podUID takes: hex(HMAC-SHA256(token, "exit" NUL
// podUID)); token itself when podUID is "" (a pod made without PodUIDEnv).
func ExitToken(token, podUID string) string {
	return derived(token, "exit\x00"+podUID, podUID)
}

// OrderToken returns the token POST /restart of the pod podUID takes for the order o: bound to all of it
// (the attempt, the grace period, RESUME_FROM), so a token seen on the wire carries no other order.
func OrderToken(token, podUID string, o Order) string {
	return derived(token, "restart\x00"+podUID+"\x00"+strconv.Itoa(int(o.Attempt))+"\x00"+
		strconv.FormatInt(o.GraceSeconds, 10)+"\x00"+o.ResumeFrom, podUID)
}

func derived(token, msg, podUID string) string {
	if podUID == "" || token == "" {
		return token
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// MaxBody bounds what either side reads of a request or an answer.
const MaxBody = 16 << 10

// MaxMessage bounds Exit.Message: the kubelet's termination message limit.
const MaxMessage = 4 << 10

// Exit is what GET /exit answers: the attempt the supervisor runs in and, while it holds a program that
// ended with a non-zero code (Held), how the program ended. Message is the program's termination message
// or, when it wrote none, the end of its output (as FallbackToLogsOnError).
type Exit struct {
	Attempt    int32     `json:"attempt"`
	Held       bool      `json:"held"`
	ExitCode   int32     `json:"exitCode,omitempty"`
	Signal     int32     `json:"signal,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Message    string    `json:"message,omitempty"`
}

// Order is what POST /restart carries: the attempt the pod restarts into (an order for an attempt the
// supervisor already runs changes nothing), how long the program gets between SIGTERM and SIGKILL, and
// RESUME_FROM for the attempt (what the ConfigMap names; the supervisor gives it to the restarted program
// even when the kubelet read the ConfigMap before it changed).
type Order struct {
	Attempt      int32  `json:"attempt"`
	GraceSeconds int64  `json:"graceSeconds"`
	ResumeFrom   string `json:"resumeFrom,omitempty"`
}

// Client calls supervisors; addr is host:port.
type Client struct {
	HTTP    *http.Client
	Timeout time.Duration
}

// Exit reads how a supervisor's program ended.
func (c *Client) Exit(ctx context.Context, addr, token string) (Exit, error) {
	var e Exit
	err := c.do(ctx, http.MethodGet, "http://"+addr+ExitPath, token, nil, func(body io.Reader) error {
		return json.NewDecoder(body).Decode(&e)
	})
	return e, err
}

// Restart orders a supervisor to restart its pod into o.Attempt.
func (c *Client) Restart(ctx context.Context, addr, token string, o Order) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, "http://"+addr+RestartPath, token, body, func(io.Reader) error { return nil })
}

// do sends one request with the token (never put in an error) and reads at most MaxBody of the answer.
func (c *Client) do(ctx context.Context, method, u, token string, body []byte, read func(io.Reader) error) error {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// An order may be sent twice (a repeat changes nothing): the client may then resend it on a new
		// connection when the supervisor closed the idle one it went out on (its idle timeout is 2 s).
		req.Header.Set("Idempotency-Key", "")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("supervisor: %s %s: answered %d %s", method, u, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return read(io.LimitReader(resp.Body, MaxBody))
}
