package checkpoint

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"

	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// storeError is a storage client's error that reads without what changes from one request to the next
// (S3's RequestID and HostID, GCS's details and response body) and keeps the client's error for errors.Is
// and errors.As. The agent's report, the job's CheckpointStorageReady condition and its Warning event
// then read the same for as long as the fault is the same: a job whose storage refuses it is not written
// again at every read of its agent, and its event still says what its condition says.
type storeError struct {
	err error
	msg string
}

func (e *storeError) Error() string { return e.msg }

func (e *storeError) Unwrap() error { return e.err }

// stable returns err as a storeError when it is an S3 or GCS API error, and err itself otherwise.
func stable(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		msg := fmt.Sprintf("api error %s: %s", api.ErrorCode(), clip(api.ErrorMessage()))
		var resp interface{ HTTPStatusCode() int }
		if errors.As(err, &resp) {
			msg = fmt.Sprintf("StatusCode: %d, %s", resp.HTTPStatusCode(), msg)
		}
		var op *smithy.OperationError
		if errors.As(err, &op) {
			msg = fmt.Sprintf("operation error %s: %s, %s", op.Service(), op.Operation(), msg)
		}
		return &storeError{err: err, msg: msg}
	}
	var g *googleapi.Error
	if errors.As(err, &g) {
		msg := fmt.Sprintf("googleapi: Error %d", g.Code)
		if g.Message != "" {
			msg += ": " + clip(g.Message)
		}
		var reasons []string
		for _, e := range g.Errors {
			if e.Reason != "" {
				reasons = append(reasons, e.Reason)
			}
		}
		if len(reasons) > 0 {
			msg += ", " + strings.Join(reasons, ", ")
		}
		return &storeError{err: err, msg: msg}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Source != nil {
		// A connection's error names its local port, another at every request.
		anon := *op
		anon.Source = nil
		return &storeError{err: err, msg: strings.Replace(err.Error(), op.Error(), anon.Error(), 1)}
	}
	return err
}

// maxServerMessage bounds what an error keeps of the message a storage server sent (the job's server may be
// a tenant's own).
const maxServerMessage = 512

// clip cuts a server's message to maxServerMessage bytes, marking the cut.
func clip(s string) string { return text.Clip(s, maxServerMessage) }
