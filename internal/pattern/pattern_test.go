package pattern

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestCompile(t *testing.T) {
	long := strings.Repeat("a", 1000)
	tests := []struct {
		name    string
		expr    string
		wantErr string
	}{
		{name: "a rule's message", expr: "NCCL.*[Tt]imeout|CUDA error: an illegal memory access"},
		{name: "a progress pattern", expr: `epoch (?P<epoch>\d+)/(?P<epochs>\d+) loss=(?P<loss>[0-9.eE+-]+)`},
		{name: "bounded repeats", expr: `[a-z]{1,100} \d{3,8}`},
		{name: "a long literal repeated", expr: "^(?:" + long + "){1000}", wantErr: "more than 1000 instructions"},
		{name: "nested repeats", expr: "(?:(?:abcdefgh){20}){40}", wantErr: "more than 1000 instructions"},
		{name: "a short literal repeated often", expr: "(?:ab){999}", wantErr: "more than 1000 instructions"},
		{name: "an open repeat of a long body", expr: "(?:" + strings.Repeat("x", 600) + "){4,}", wantErr: "more than 1000 instructions"},
		{name: "nested stars of empty-matching bodies (the estimate undercounts them)", expr: nest(20, 92),
			wantErr: "more than 1000 instructions"},
		{name: "many large classes", expr: strings.Repeat(`\pL`, 340), wantErr: "more than 1000 instructions"},
		{name: "an alternation of large classes: the parser merges them into one", expr: strings.Repeat(`\pL|`, 255) + "x"},
		{name: "a few large classes", expr: `\pL+ \p{Greek}*`},
		{name: "too long", expr: strings.Repeat("a", MaxBytes+1), wantErr: "over the limit of 4096"},
		{name: "not RE2", expr: "(?<=a)b", wantErr: "is not an RE2 regular expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.expr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Compile: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Compile error = %v, want it to say %q", err, tt.wantErr)
			case err != nil && len(tt.expr) > 100 && strings.Contains(err.Error(), tt.expr[:100]):
				t.Fatalf("the error repeats the pattern: %.200s", err)
			}
		})
	}
}

// nest wraps "a" d times alternately in (?:…)*? and (?:…)*, then repeats it k times before an x.
func nest(d, k int) string {
	s := "a"
	for i := range d {
		if i%2 == 0 {
			s = "(?:" + s + ")*?"
		} else {
			s = "(?:" + s + ")*"
		}
	}
	return "(?:" + s + "){" + strconv.Itoa(k) + "}x"
}

// TestHostilePatternsCostLittle compiles ten hostile patterns at once (the 1.2 GiB of heap before the
// bound) and checks how much the heap grew: a refused pattern is never compiled.
func TestHostilePatternsCostLittle(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 10 {
		expr := "^(?:" + strings.Repeat(string(rune('a'+i)), 1000) + "){1000}"
		if _, err := Compile(expr); err == nil {
			t.Fatalf("pattern %d compiled", i)
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("compiling ten hostile patterns allocated %d MiB, want under 16", grew>>20)
	}
}

func TestCacheBounded(t *testing.T) {
	for i := range CacheEntries * 3 {
		if _, err := Compile("x" + strings.Repeat("y", i%900) + string(rune('A'+i%26))); err != nil {
			t.Fatal(err)
		}
	}
	cache.mu.Lock()
	n := len(cache.m)
	cache.mu.Unlock()
	if n > CacheEntries {
		t.Errorf("the cache holds %d patterns, want at most %d", n, CacheEntries)
	}
}

func TestTail(t *testing.T) {
	s := strings.Repeat("é", MaxTextBytes) // two bytes each
	got := Tail(s)
	if len(got) > MaxTextBytes || !strings.HasPrefix(got, "é") {
		t.Errorf("Tail = %d bytes starting %q, want at most %d from a character's start", len(got), got[:2], MaxTextBytes)
	}
	if Tail("short") != "short" {
		t.Error("Tail cut a short text")
	}
}
