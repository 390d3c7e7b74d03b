package controllers

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestDescribeLogCutsLongLines: a hang's message quotes each of a rank's last lines cut to maxLogLine bytes,
// at a character's boundary (a trainer prints anything).
func TestDescribeLogCutsLongLines(t *testing.T) {
	got := describeLog("epoch 1\nx"+strings.Repeat("é", 300)+"\n", time.Now())
	_, quoted, _ := strings.Cut(got, "last: ")
	lines := strings.Split(quoted, " | ")
	if !utf8.ValidString(got) || len(lines) != 2 || lines[0] != "epoch 1" ||
		len(lines[1]) > maxLogLine || !strings.HasSuffix(lines[1], "…") {
		t.Errorf("describeLog = %q: want the long line cut to at most %d bytes, marked, valid UTF-8", got, maxLogLine)
	}
}
