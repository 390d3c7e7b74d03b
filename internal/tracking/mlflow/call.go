package mlflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/go-logr/logr"

	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// maxAnswerBytes bounds what is read of an answer: a run with its tags, params and latest metrics fits
// well within it.
const maxAnswerBytes = 4 << 20

// ErrMalformedAnswer: the server answered 2xx with something that is not the JSON the call expects.
var ErrMalformedAnswer = errors.New("the answer is not MLflow's JSON")

// ErrNoHTTPAnswer: the server's answer is not valid HTTP (or TLS failed); what it sent is left out.
var ErrNoHTTPAnswer = errors.New("no valid HTTP answer")

// errorCode is what an error_code of MLflow looks like; anything else is dropped.
var errorCode = regexp.MustCompile(`^[A-Z_]{1,64}$`)

// call sends one request, retrying what may succeed later, and decodes the answer into out. Nothing is
// sent when BaseURL is refused.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	target, err := c.endpoint(path, query)
	if err != nil {
		return err
	}
	var payload []byte
	if body != nil {
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("mlflow: encoding %s: %w", path, err)
		}
	}
	attempts, wait := max(c.Attempts, 1), c.Backoff
	if c.Attempts == 0 {
		attempts = 5
	}
	if wait == 0 {
		wait = 200 * time.Millisecond
	}
	hc, call := c.httpClient(), method+" "+path
	for i := 0; i < attempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(ctx.Err(), err)
			case <-time.After(wait/2 + rand.N(wait/2+1)):
			}
			wait = min(2*wait, c.maxBackoff())
		}
		var retry bool
		if retry, err = c.once(ctx, hc, call, method, target, payload, out); !retry {
			return err
		}
	}
	return err
}

// endpoint returns the URL of an API call: BaseURL's path joined with api/2.0/mlflow and path, and query.
func (c *Client) endpoint(path string, query url.Values) (string, error) {
	base, err := ParseBaseURL(c.BaseURL)
	if err != nil {
		return "", err
	}
	u := base.JoinPath("api/2.0/mlflow", path)
	u.RawQuery = query.Encode()
	return u.String(), nil
}

// httpClient returns HTTP (or a default client) that does not follow redirects: a redirect would take the
// credentials, and the call, to an address nobody configured.
func (c *Client) httpClient() *http.Client {
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &hc
}

func (c *Client) maxBackoff() time.Duration {
	if c.MaxBackoff > 0 {
		return c.MaxBackoff
	}
	return 5 * time.Second
}

// once sends the request once; retry says whether a failure may pass on its own.
func (c *Client) once(ctx context.Context, hc *http.Client, call, method, target string, payload []byte, out any) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(payload))
	if err != nil {
		return false, fmt.Errorf("mlflow: %s: %w", call, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Authorization != "" {
		req.Header.Set("Authorization", c.Authorization)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ctx.Err() == nil, transportError(ctx, call, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return true, fmt.Errorf("mlflow: reading the answer to %s: %w", call, err)
	}
	if resp.StatusCode/100 != 2 {
		debugAnswer(ctx, call, resp.StatusCode, data)
		return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500, answerError(call, resp.StatusCode, data)
	}
	if out == nil {
		return false, nil
	}
	if err := json.Unmarshal(data, out); err != nil { // json's errors quote bytes of the answer
		debugAnswer(ctx, call, resp.StatusCode, data)
		return false, fmt.Errorf("mlflow: %s: HTTP %d: %w", call, resp.StatusCode, ErrMalformedAnswer)
	}
	return false, nil
}

// answerError returns the error of a failed answer: its status and, when the body is MLflow's error JSON with
// an error_code that looks like one, that code. Nothing else of the body is kept.
func answerError(call string, status int, data []byte) *Error {
	e := &Error{Call: call, Status: status}
	var body struct {
		Code string `json:"error_code"`
	}
	if json.Unmarshal(data, &body) == nil && errorCode.MatchString(body.Code) {
		e.Code = body.Code
	}
	return e
}

// transportError returns the error of a request that got no answer. Network errors (dial, read, write) and
// timeouts keep their text, which holds addresses and system errors; any other (a malformed answer, a TLS
// failure) is named by ErrNoHTTPAnswer alone, as Go's text of a malformed answer quotes what the server sent.
func transportError(ctx context.Context, call string, err error) error {
	var opErr *net.OpError
	var netErr net.Error
	if errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("mlflow: %s: %w", call, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("MLflow call got no valid HTTP answer", "call", call, "error", truncate(err.Error()))
	return fmt.Errorf("mlflow: %s: %w", call, ErrNoHTTPAnswer)
}

// debugAnswer logs the start of an answer the caller's error leaves out, at V(1): for the operator's
// logs only, never the job's status.
func debugAnswer(ctx context.Context, call string, status int, data []byte) {
	if log := logr.FromContextOrDiscard(ctx).V(1); log.Enabled() {
		log.Info("MLflow answer left out of the error", "call", call, "status", status, "body", truncate(string(data)))
	}
}

// truncate keeps at most the first 256 bytes of s, cut at a character's boundary and marked.
func truncate(s string) string { return text.Clip(s, 256) }
