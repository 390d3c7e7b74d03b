package supervisor

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// move is a transition as the tests print it.
type move struct {
	From, Event, To string
}

func moveOf(t transition) move {
	return move{From: t.from.String(), Event: t.on.String(), To: t.to.String()}
}

// TestControlStateTransitions: each move of the table, as the control's hooks and orders make them;
// the table holds these and no other.
func TestControlStateTransitions(t *testing.T) {
	tests := []struct {
		name string
		from controlState
		on   event
		want controlState
	}{
		{name: "an order for a pod behind", from: behind, on: evOrder, want: restartBehind},
		{name: "the program starts", from: starting, on: evStarted, want: running},
		{name: "an order before the program starts", from: starting, on: evOrder, want: restartStarting},
		{name: "the pod is deleted while the program runs", from: running, on: evEndSignal, want: terminating},
		{name: "the program ends", from: running, on: evReaped, want: ended},
		{name: "an order while the program runs", from: running, on: evOrder, want: restartRunning},
		{name: "the program ends as the pod is deleted", from: terminating, on: evReaped, want: terminated},
		{name: "an order while the pod is deleted", from: terminating, on: evOrder, want: restartRunning},
		{name: "the program failed", from: ended, on: evFailed, want: held},
		{name: "an order while the output drains", from: ended, on: evOrder, want: restartEnded},
		{name: "an order after the pod was deleted", from: terminated, on: evOrder, want: restartEnded},
		{name: "an order ends a hold", from: held, on: evOrder, want: restartHeld},
		{name: "a hold ends with no order", from: held, on: evHoldEnded, want: released},
		{name: "an ordered program starts", from: restartStarting, on: evStarted, want: restartRunning},
		{name: "an ordered program ends", from: restartRunning, on: evReaped, want: restartEnded},
	}
	var listed []move
	for _, tt := range tests {
		listed = append(listed, moveOf(transition{from: tt.from, on: tt.on, to: tt.want}))
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.from.next(tt.on)
			if !ok {
				t.Errorf("%s refuses %s", tt.from, tt.on)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s on %s (-want +got):\n%s", tt.from, tt.on, diff)
			}
		})
	}
	var table []move
	for _, tr := range transitions {
		table = append(table, moveOf(tr))
	}
	if diff := cmp.Diff(listed, table); diff != "" {
		t.Errorf("the transitions (-want +got):\n%s", diff)
	}
}

// TestControlStateRefuses: every (state, event) pair the table does not list is refused, and leaves
// the state as it is.
func TestControlStateRefuses(t *testing.T) {
	type pair struct {
		from controlState
		on   event
	}
	listed := map[pair]bool{}
	for _, tr := range transitions {
		if listed[pair{tr.from, tr.on}] {
			t.Errorf("%s on %s is in the table twice", tr.from, tr.on)
		}
		listed[pair{tr.from, tr.on}] = true
	}
	for s := range controlState(len(stateNames)) {
		for ev := range event(len(eventNames)) {
			if listed[pair{s, ev}] {
				continue
			}
			t.Run(fmt.Sprintf("%s on %s", s, ev), func(t *testing.T) {
				to, ok := s.next(ev)
				want, got := refusal{State: s.String()}, refusal{State: to.String(), Accepted: ok}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			})
		}
	}
}

// refusal is the state an event leaves, and whether the table accepted the event.
type refusal struct {
	State    string
	Accepted bool
}

// TestControlStateNames: every state and event has a name of its own.
func TestControlStateNames(t *testing.T) {
	seen := map[string]bool{}
	for s := range controlState(len(stateNames)) {
		seen[s.String()] = true
	}
	for ev := range event(len(eventNames)) {
		seen["event "+ev.String()] = true
	}
	if want := len(stateNames) + len(eventNames); len(seen) != want || seen[""] || seen["event "] {
		t.Errorf("%d distinct names, want %d: %v", len(seen), want, seen)
	}
	if got := controlState(-1).String(); got != "controlState(-1)" {
		t.Errorf("an unknown state is named %q", got)
	}
}

// TestControlReadiness: what GET /healthz says in each state of a control that takes orders.
func TestControlReadiness(t *testing.T) {
	tests := []struct {
		state controlState
		want  readiness
	}{
		{state: starting, want: readiness{Ready: true}},
		{state: behind, want: readiness{Why: "waiting for the order to join attempt 3"}},
		{state: running, want: readiness{Ready: true}},
		{state: terminating, want: readiness{Ready: true}},
		{state: ended, want: readiness{Ready: true}},
		{state: terminated, want: readiness{Ready: true}},
		{state: held, want: readiness{Why: "held: the program exited with code 3"}},
		{state: restartBehind, want: readiness{Why: "restarting"}},
		{state: restartStarting, want: readiness{Why: "restarting"}},
		{state: restartRunning, want: readiness{Why: "restarting"}},
		{state: restartEnded, want: readiness{Why: "restarting"}},
		{state: restartHeld, want: readiness{Why: "held: the program exited with code 3"}},
		{state: released, want: readiness{Why: "no order came: exiting with the program's code 3"}},
	}
	if len(tests) != len(stateNames) {
		t.Fatalf("%d states tested, want all %d", len(tests), len(stateNames))
	}
	for _, tt := range tests {
		t.Run(tt.state.String(), func(t *testing.T) {
			c := &restartControl{cfg: Control{Current: 3}, state: tt.state}
			c.heldExit.ExitCode = 3
			var got readiness
			got.Ready, got.Why = c.ready()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ready (-want +got):\n%s", diff)
			}
		})
	}
}

// readiness is what ready returns.
type readiness struct {
	Ready bool
	Why   string
}

// TestNewControl: a Control without a token or with a restart code no exit status carries takes no
// orders; one that takes them starts behind the job's attempt or before the program.
func TestNewControl(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Control
		takes     bool
		wantState controlState
	}{
		{name: "no token", cfg: Control{RestartCode: 215}},
		{name: "no restart code", cfg: Control{Token: "t"}},
		{name: "a restart code past 255", cfg: Control{Token: "t", RestartCode: 256}},
		{name: "takes orders", cfg: Control{Token: "t", RestartCode: 215, Attempt: 2, Current: 2}, takes: true,
			wantState: starting},
		{name: "behind", cfg: Control{Token: "t", RestartCode: 215, Attempt: 1, Current: 3}, takes: true,
			wantState: behind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl := newControl(tt.cfg, &tail{})
			c, takes := ctl.(*restartControl)
			if takes != tt.takes {
				t.Fatalf("newControl = %T, want one that takes orders: %v", ctl, tt.takes)
			}
			if !takes {
				return
			}
			got := controlDefaults{State: c.state.String(), Hold: c.cfg.Hold, TerminationLog: c.cfg.TerminationLog}
			want := controlDefaults{State: tt.wantState.String(), Hold: DefaultHold, TerminationLog: "/dev/termination-log"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("control (-want +got):\n%s", diff)
			}
		})
	}
}

// controlDefaults is where a new control starts, and the defaults it fills in.
type controlDefaults struct {
	State          string
	Hold           time.Duration
	TerminationLog string
}

// TestNoControl: a supervisor that takes no orders serves no protocol, is ready, waits at no
// barrier and exits with the program's own code.
func TestNoControl(t *testing.T) {
	var ctl runControl = noControl{}
	mux := http.NewServeMux()
	ctl.register(mux)
	if _, pattern := mux.Handler(mustRequest(t, http.MethodGet, "/exit")); pattern != "" {
		t.Errorf("GET /exit is served (%q)", pattern)
	}
	ctl.running(1)
	ctl.signalled(syscall.SIGTERM)
	ctl.reaped()
	var got noControlRun
	got.Ready, _ = ctl.ready()
	got.Code, got.Waited = ctl.barrier(make(chan os.Signal))
	got.Exited = ctl.exited(syscall.WaitStatus(3<<8), time.Now(), nil)
	got.Killed = ctl.exited(syscall.WaitStatus(syscall.SIGKILL), time.Now(), nil)
	want := noControlRun{Ready: true, Code: 0, Waited: false, Exited: 3, Killed: 137}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("no control (-want +got):\n%s", diff)
	}
}

// noControlRun is what a run under noControl returns: readiness, the barrier's code and whether it
// waited, and the codes of a program that exited with 3 and of one SIGKILL killed.
type noControlRun struct {
	Ready          bool
	Code           int
	Waited         bool
	Exited, Killed int
}

// mustRequest returns a request for path on the supervisor.
func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, "http://supervisor"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOrderAfterTheHold: once a hold ended with no order (its time ran out, or a SIGTERM), an order is
// refused (the container exits with the program's code, not the restart code, so taking it would mislead
// the operator); an order taken before wins.
func TestOrderAfterTheHold(t *testing.T) {
	for _, tt := range []struct {
		name         string
		orderFirst   bool
		signal       bool // a SIGTERM (the pod's deletion) ends the hold
		wantCode     int
		wantRefusal  bool
		wantEndState controlState
	}{
		{name: "no order in time", wantCode: 3, wantRefusal: true, wantEndState: released},
		{name: "an order in time", orderFirst: true, wantCode: 215, wantEndState: restartHeld},
		{name: "a signal ended the hold", signal: true, wantCode: 3, wantRefusal: true, wantEndState: released},
		{name: "an order, then a signal", orderFirst: true, signal: true, wantCode: 215, wantEndState: restartHeld},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &restartControl{cfg: Control{Hold: time.Millisecond, RestartCode: 215, StateDir: t.TempDir()}, state: held, attempt: 1,
				orders: make(chan struct{}, 1)}
			order := func() error {
				act, err := c.obey(controlapi.Order{Attempt: 2})
				if err == nil {
					act()
				}
				return err
			}
			if tt.orderFirst {
				if err := order(); err != nil {
					t.Fatal(err)
				}
			}
			sigs := make(chan os.Signal, 1)
			if tt.signal {
				c.cfg.Hold = time.Minute
				sigs <- syscall.SIGTERM
			}
			code := c.hold(3, sigs)
			err := order()
			type outcome struct {
				Code    int
				Refused bool
				State   string
			}
			want := outcome{Code: tt.wantCode, Refused: tt.wantRefusal, State: tt.wantEndState.String()}
			if diff := cmp.Diff(want, outcome{Code: code, Refused: errors.Is(err, errReleased), State: c.state.String()}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestHoldRaces: an order racing the hold's end, or a signal that ends the container: every order taken
// (202) ends the hold with the restart code, every exit with the program's code refused its order (409).
func TestHoldRaces(t *testing.T) {
	for _, tt := range []struct {
		name   string
		runs   int
		hold   time.Duration
		signal bool
	}{
		{name: "an order as the time runs out", runs: 500, hold: 200 * time.Microsecond},
		{name: "an order taken as SIGTERM comes", runs: 50, hold: time.Minute, signal: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := 0
			for i := range tt.runs {
				c := &restartControl{cfg: Control{Hold: tt.hold, RestartCode: 215, StateDir: t.TempDir()}, state: held, attempt: 1,
					orders: make(chan struct{}, 1)}
				sigs := make(chan os.Signal, 1)
				var err error
				done := make(chan struct{})
				go func() {
					defer close(done)
					if !tt.signal {
						time.Sleep(time.Duration(i%400) * time.Microsecond)
					}
					var act func()
					if act, err = c.obey(controlapi.Order{Attempt: 2}); err == nil {
						act()
					}
				}()
				if tt.signal {
					<-done
					sigs <- syscall.SIGTERM
				}
				code := c.hold(3, sigs)
				<-done
				if taken := err == nil; taken != (code == 215) || !taken && !errors.Is(err, errReleased) {
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d runs: an order's answer and the exit code disagree", bad, tt.runs)
			}
		})
	}
}

// TestBarrierTimeout: a pod behind whose barrier's time runs out with no order says so and returns the
// restart code, to wait anew.
func TestBarrierTimeout(t *testing.T) {
	c := &restartControl{cfg: Control{Hold: time.Millisecond, RestartCode: 215, Current: 2}, state: behind, attempt: 1,
		orders: make(chan struct{}, 1)}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	code, waited := c.barrier(make(chan os.Signal))
	os.Stderr = stderr
	_ = w.Close()
	out, _ := io.ReadAll(r)
	if code != 215 || !waited || !strings.Contains(string(out), "no order from the operator in 1ms") {
		t.Errorf("barrier = %d, %t; said %q", code, waited, out)
	}
}
