package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAuditWrites reads audit events as kube-apiserver writes them: only the chosen users' writes in the
// window count, by kind, with events and conflicts apart; reads and unparsable lines are skipped.
func TestAuditWrites(t *testing.T) {
	lines := []string{
		`{"verb":"create","user":{"username":"op"},"objectRef":{"resource":"jobs"},` +
			`"responseStatus":{"code":201},"stageTimestamp":"2026-11-26T10:00:01Z"}`,
		`{"verb":"patch","user":{"username":"op"},"objectRef":{"resource":"trainingjobs","subresource":"status"},` +
			`"responseStatus":{"code":200},"stageTimestamp":"2026-11-26T10:00:02Z"}`,
		`{"verb":"patch","user":{"username":"op"},"objectRef":{"resource":"trainingjobs","subresource":"status"},` +
			`"responseStatus":{"code":409},"stageTimestamp":"2026-11-26T10:00:02Z"}`,
		`{"verb":"create","user":{"username":"op2"},"objectRef":{"resource":"events"},` +
			`"responseStatus":{"code":201},"stageTimestamp":"2026-11-26T10:00:03Z"}`,
		`{"verb":"get","user":{"username":"op"},"objectRef":{"resource":"jobs"},` +
			`"responseStatus":{"code":200},"stageTimestamp":"2026-11-26T10:00:03Z"}`,
		`{"verb":"create","user":{"username":"someone"},"objectRef":{"resource":"pods"},` +
			`"responseStatus":{"code":201},"stageTimestamp":"2026-11-26T10:00:03Z"}`,
		`{"verb":"delete","user":{"username":"op"},"objectRef":{"resource":"pods"},` +
			`"responseStatus":{"code":200},"stageTimestamp":"2026-11-26T10:09:00Z"}`,
		`not json`,
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	data := []byte{}
	for _, l := range lines {
		data = append(append(data, l...), '\n')
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	from, to := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 10, 5, 0, 0, time.UTC)
	got, err := AuditWrites(path, from, to, func(u string) bool { return u == "op" || u == "op2" })
	if err != nil {
		t.Fatal(err)
	}
	want := Writes{Total: 2, Events: 1, Status: 1, Conflicts: 1, ByKind: map[string]int{"create jobs": 1, "patch trainingjobs/status": 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AuditWrites (-want +got):\n%s", diff)
	}
}
