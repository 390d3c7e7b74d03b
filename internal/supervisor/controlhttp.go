// This file holds the control's HTTP API (package controlapi): GET /exit and POST /restart, and the
// pod's readiness that GET /healthz reports.

package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/trainingjob-operator/trainingjob-operator/checkpoint/agentapi"
	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// maxGrace bounds an order's grace period (a pod's terminationGracePeriodSeconds fits an int32
// too).
const maxGrace = 1<<31 - 1

// maxResumeFrom bounds an order's RESUME_FROM.
const maxResumeFrom = 4096

// register serves the protocol on mux.
func (c *restartControl) register(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.ExitPath, c.serveExit)
	mux.HandleFunc("POST "+controlapi.RestartPath, c.serveRestart)
}

// ready reports whether the pod is ready, and why not. It is not while a failed program is held or
// exits after its hold, a restart is under way or the pod waits for its order.
func (c *restartControl) ready() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.state.holding():
		return false, fmt.Sprintf("held: the program exited with code %d", c.heldExit.ExitCode)
	case c.state.restarting():
		return false, "restarting"
	case c.state == behind:
		return false, fmt.Sprintf("waiting for the order to join attempt %d", c.cfg.Current)
	case c.state == released:
		return false, fmt.Sprintf("no order came: exiting with the program's code %d", c.heldExit.ExitCode)
	}
	return true, ""
}

// serveExit answers GET /exit: the attempt the pod runs in and, while it holds one, how the program
// ended.
func (c *restartControl) serveExit(w http.ResponseWriter, r *http.Request) {
	if !agentapi.Authorized(r, controlapi.ExitToken(c.cfg.Token, c.cfg.PodUID)) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	c.mu.Lock()
	e := controlapi.Exit{Attempt: c.attempt}
	if c.state.holding() {
		e = c.heldExit
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e)
}

// serveRestart answers POST /restart: it takes an order, answers it, then acts on it.
func (c *restartControl) serveRestart(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	o, ok := decodeOrder(r.Body)
	if !ok {
		http.Error(w, "bad order", http.StatusBadRequest)
		return
	}
	if !agentapi.Authorized(r, controlapi.OrderToken(c.cfg.Token, c.cfg.PodUID, o)) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if c.tooFar(o.Attempt) {
		http.Error(w, "the order's attempt is too far ahead", http.StatusBadRequest)
		return
	}
	act, err := c.obey(o)
	switch {
	case errors.Is(err, errReleased):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	accepted(w)
	act()
}

// decodeOrder reads an order from body. It reports whether body holds one JSON order of known
// fields, within bounds, and nothing after it.
func decodeOrder(body io.Reader) (controlapi.Order, bool) {
	var o controlapi.Order
	dec := json.NewDecoder(io.LimitReader(body, controlapi.MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || dec.More() {
		return o, false
	}
	return o, o.Attempt >= 0 && o.GraceSeconds >= 0 && o.GraceSeconds <= maxGrace && len(o.ResumeFrom) <= maxResumeFrom
}

// accepted answers 202 before the order is acted on. The supervisor exits once the order ends its
// hold or its program; an answer not yet written then reaches the operator as EOF (it recreated the
// gang).
func accepted(w http.ResponseWriter) {
	w.WriteHeader(http.StatusAccepted)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// tooFar reports whether an order's attempt is more than controlapi.MaxAttemptLead past both the
// pod's attempt and the job's when the container was created. The operator orders the next attempt:
// it did not give such an order, after which its real orders would change nothing.
func (c *restartControl) tooFar(attempt int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(attempt) > int64(max(c.attempt, c.cfg.Current))+controlapi.MaxAttemptLead
}
