package node

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
)

// errPartitioned is what every API request of a partitioned node fails with.
var errPartitioned = errors.New("process node partitioned from the API server")

// partition cuts a node off the API server, as a machine that loses power or its network is: every
// request its clients make fails from then on.
type partition struct{ cut atomic.Bool }

func (p *partition) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if p.cut.Load() {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, errPartitioned)
		}
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Partition cuts the node off the API server and kills its pods' processes at once (SIGKILL): it never
// reports anything again, so the API keeps its pods as they were last reported and its Node as it was
// until the node lifecycle controller notices the lease is not renewed. Stop the node (cancel Start's
// context) afterwards; a new Node for the same name takes its place again (AddNode in package local).
func (n *Node) Partition() {
	n.partition.cut.Store(true)
	for _, r := range n.allRuns() {
		r.shutdown(0)
	}
}
