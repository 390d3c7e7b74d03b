// This file holds the control's state files in Control.StateDir, a directory that outlives the
// containers: the last order obeyed, and how the program before a restart ended.

package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/trainingjob-operator/trainingjob-operator/internal/supervisor/controlapi"
)

// stateFile keeps the last order obeyed: the attempt the restarted containers run in and the
// RESUME_FROM it named.
const stateFile = "restart.json"

// endedFile keeps how the program of the containers an order restarted ended, for the restarted
// supervisor's log. The kubelet removes those containers: there is no `kubectl logs --previous`.
const endedFile = "ended.txt"

// maxEndedNote bounds endedFile as read (the trainer shares the directory).
const maxEndedNote = 256

// resumeLastOrder takes the last order obeyed (the restart that started these containers) when it
// is for the pod's attempt or later. It runs in that attempt and gives the program the order's
// RESUME_FROM.
func (c *restartControl) resumeLastOrder() {
	o, ok := c.lastOrder()
	if !ok || o.Attempt < c.attempt {
		return
	}
	c.attempt = o.Attempt
	if o.ResumeFrom != "" {
		_ = os.Setenv("RESUME_FROM", o.ResumeFrom)
	}
	c.sayHowItEnded(o)
}

// lastOrder returns the last order obeyed in this pod, and reports whether there is one.
func (c *restartControl) lastOrder() (controlapi.Order, bool) {
	var o controlapi.Order
	if c.cfg.StateDir == "" {
		return o, false
	}
	b, err := readRegular(filepath.Join(c.cfg.StateDir, stateFile), controlapi.MaxBody)
	if err != nil || json.Unmarshal(b, &o) != nil {
		return o, false
	}
	return o, true
}

// writeOrder keeps the order in the state directory, replacing the last one at once.
func (c *restartControl) writeOrder(o controlapi.Order) error {
	if c.cfg.StateDir == "" {
		return nil
	}
	b, _ := json.Marshal(o)
	tmp := filepath.Join(c.cfg.StateDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("keeping the order: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(c.cfg.StateDir, stateFile)); err != nil {
		return fmt.Errorf("keeping the order: %w", err)
	}
	return nil
}

// keepHowItEnded writes down how the program of the containers an order restarts ended (endedFile).
func (c *restartControl) keepHowItEnded(how string) {
	if c.cfg.StateDir != "" {
		_ = os.WriteFile(filepath.Join(c.cfg.StateDir, endedFile), []byte(how), 0o600)
	}
}

// sayHowItEnded says in the log that these containers run after the operator's order o, and how the
// program before them ended. It reads endedFile once: a later restart of another cause does not
// repeat it.
func (c *restartControl) sayHowItEnded(o controlapi.Order) {
	if c.cfg.StateDir == "" {
		return
	}
	path := filepath.Join(c.cfg.StateDir, endedFile)
	b, err := readRegular(path, maxEndedNote)
	if err != nil {
		return
	}
	_ = os.Remove(path)
	how := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "?")), " ")
	fmt.Fprintf(os.Stderr, "supervisor: these containers were restarted in place into attempt %d by the operator's order; "+
		"before it, %s\n", o.Attempt, how)
}

// readRegular reads at most limit bytes of path when it is a regular file, not through a link. The
// trainer shares the directory and may have put anything there: a FIFO would block the read for
// ever.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() || info.Size() > limit {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", path, limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
