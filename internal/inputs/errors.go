package inputs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"syscall"
	"time"

	"cloud.google.com/go/storage"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"google.golang.org/api/googleapi"
)

// Error is a fetch's failure with whether trying again can help: a missing bucket or object, a refused
// credential (403), a hub's 404 or a full volume cannot, and fail the run at once; a server's 5xx, a
// throttle (429) or a broken connection can, a few times.
type Error struct {
	Transient bool
	Err       error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func permanentf(format string, args ...any) error {
	return &Error{Err: fmt.Errorf(format, args...)}
}

func transientf(format string, args ...any) error {
	return &Error{Transient: true, Err: fmt.Errorf(format, args...)}
}

// IsTransient says whether err may go away when tried again.
func IsTransient(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Transient
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return transientStatus(re.HTTPStatusCode())
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return transientStatus(ge.Code)
	}
	if errors.Is(err, storage.ErrBucketNotExist) || errors.Is(err, storage.ErrObjectNotExist) || errors.Is(err, syscall.ENOSPC) {
		return false
	}
	return !errors.Is(err, context.Canceled) // a connection refused or reset, a timeout: the network's
}

func transientStatus(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// classifyFS names a full volume; a file operation the cache refuses (a path that would leave it
// through a link, a permission) fails for good too.
func classifyFS(err error) error {
	var pathErr *fs.PathError
	var linkErr *os.LinkError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC):
		return &Error{Err: fmt.Errorf("the input cache volume is full: %w", err)}
	case errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN):
		return err
	case errors.As(err, &pathErr) || errors.As(err, &linkErr):
		return &Error{Err: fmt.Errorf("the input cache: %w", err)}
	}
	return err
}

// Tries is how many times an operation is tried before its transient error fails the fetch, and
// firstBackoff the wait after the first try (doubled each time).
var (
	Tries        = 5
	firstBackoff = time.Second
)

// retry runs f until it succeeds, fails for good, or Tries tries failed transiently.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	wait := firstBackoff
	for try := 1; ; try++ {
		v, err := f()
		if err == nil || !IsTransient(err) || try == Tries {
			if err != nil && IsTransient(err) {
				err = fmt.Errorf("%w (tried %d times)", err, try)
			}
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
}
