package main

import (
	"strings"
	"testing"
	"time"
)

// TestWriteTimeline: one line per process, its ready time and its counts,
// then their sums step by step.
func TestWriteTimeline(t *testing.T) {
	var b strings.Builder
	writeTimeline(&b, "4 x 2, balance on, cold start", 250*time.Millisecond,
		[]time.Duration{300 * time.Millisecond, 1250 * time.Millisecond},
		[][]int{{0, 1, 2}, {0, 0, 2}})
	want := "4 x 2, balance on, cold start, namespaces led every 250ms after the start:\n" +
		"  process 0   ready   0.30s |     0     1     2\n" +
		"  process 1   ready   1.25s |     0     0     2\n" +
		"  all                      |     0     1     4\n"
	if got := b.String(); got != want {
		t.Errorf("timeline:\n%s\nwant:\n%s", got, want)
	}
}
