// This file holds the control's configuration: what a supervisor that takes the operator's orders
// reads from its environment (package controlapi's variables).

package supervisor

import (
	"os"
	"strconv"
	"time"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// Control is what a supervisor that takes the operator's orders (package controlapi) needs: the
// job's token, the code to exit with on an order to restart, the attempt the pod was created in and
// a directory that outlives the containers. A zero Token takes no orders.
type Control struct {
	Token string
	// PodUID is the pod's UID. The tokens taken are derived for it (controlapi.ExitToken,
	// OrderToken); "" takes Token itself.
	PodUID      string
	RestartCode int
	Attempt     int32
	// Current is the job's attempt when the container was created (0: unknown). A pod behind it
	// (created in an older attempt, never ordered) waits for its order before it runs the program.
	Current  int32
	StateDir string
	// Hold is how long a failed program is held for the operator's word (DefaultHold when zero).
	// Then the supervisor exits with the program's code, as without control.
	Hold time.Duration
	// TerminationLog is the container's termination message file (/dev/termination-log when empty).
	TerminationLog string
}

// DefaultHold is how long a failed program waits for the operator's order before the supervisor
// exits with its code. The Job then fails, and the operator restarts the gang the slow way.
const DefaultHold = 2 * time.Minute

// defaultTerminationLog is the kubelet's default terminationMessagePath.
const defaultTerminationLog = "/dev/termination-log"

// ControlFromEnv returns the Control the environment (controlapi's variables) describes. Its Token
// is zero when the environment describes none.
func ControlFromEnv() Control {
	code, _ := strconv.Atoi(os.Getenv(controlapi.RestartCodeEnv))
	attempt, current := envInt32(controlapi.AttemptEnv), envInt32(controlapi.CurrentAttemptEnv)
	hold, _ := strconv.Atoi(os.Getenv(controlapi.HoldEnv))
	return Control{Token: os.Getenv(controlapi.TokenEnv), PodUID: os.Getenv(controlapi.PodUIDEnv), RestartCode: code,
		Attempt: attempt, Current: current,
		StateDir: os.Getenv(controlapi.StateDirEnv), Hold: time.Duration(hold) * time.Second}
}

// envInt32 returns the int32 the environment variable name holds. It returns 0 when name is unset
// or holds no int32 (out of range included).
func envInt32(name string) int32 {
	n, err := strconv.ParseInt(os.Getenv(name), 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// takesOrders reports whether cfg takes orders: it has a token and a restart code an exit status
// carries.
func (cfg Control) takesOrders() bool {
	return cfg.Token != "" && cfg.RestartCode > 0 && cfg.RestartCode <= 255
}

// withDefaults returns cfg with the hold's time and the termination log filled in where unset.
func (cfg Control) withDefaults() Control {
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.TerminationLog == "" {
		cfg.TerminationLog = defaultTerminationLog
	}
	return cfg
}
