package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestCounts(t *testing.T) {
	got, err := Counts("1, 100,1000")
	if err != nil || !cmp.Equal(got, []int{1, 100, 1000}) {
		t.Errorf("Counts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-5"} {
		if _, err := Counts(bad); err == nil {
			t.Errorf("Counts(%q) accepted", bad)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	want := [3]time.Duration{51 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	if diff := cmp.Diff(want, Quantiles(ds)); diff != "" {
		t.Errorf("p50, p99, max (-want +got):\n%s", diff)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Quantiles sorted its argument")
	}
}

func TestSum(t *testing.T) {
	text := `# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",method="PUT"} 7
rest_client_requests_total{code="201",method="POST"} 3
rest_client_requests_total{code="409",method="PUT"} 2
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1024
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	type sums struct {
		SuccessfulPuts, Requests, HeapInUse, Missing float64
	}
	got := sums{
		SuccessfulPuts: Sum(families, "rest_client_requests_total", map[string]string{"method": "PUT", "code": "2*"}),
		Requests:       Sum(families, "rest_client_requests_total", nil),
		HeapInUse:      Sum(families, "go_memstats_heap_inuse_bytes", nil),
		Missing:        Sum(families, "missing", nil),
	}
	if diff := cmp.Diff(sums{SuccessfulPuts: 7, Requests: 12, HeapInUse: 1024, Missing: 0}, got); diff != "" {
		t.Errorf("sums (-want +got):\n%s", diff)
	}
}
