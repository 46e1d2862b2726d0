package main

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestPlotSVG: the plot is well-formed XML with one line per process
// count and balancing mode, a point per measured size, and the title
// escaped.
func TestPlotSVG(t *testing.T) {
	pts := []point{
		{m: 1, p: 2, perProcInterval: 1.2}, {m: 16, p: 2, perProcInterval: 1.4}, {m: 1000, p: 2, perProcInterval: 1.5},
		{m: 1, p: 2, balance: true, perProcInterval: 1.3}, {m: 1000, p: 2, balance: true, perProcInterval: 1.6},
		{m: 128, p: 8, perProcInterval: 7.5},
	}
	svg := string(plotSVG("postgres <TTL 2s>", pts, 2))
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("not well-formed: %v\n%s", err, svg)
			}
			break
		}
	}
	if n := strings.Count(svg, "<path "); n != 3 {
		t.Errorf("%d lines, want 3 (P=2 off, P=2 on, P=8 off)", n)
	}
	if n := strings.Count(svg, "<circle "); n != len(pts) {
		t.Errorf("%d points, want %d", n, len(pts))
	}
	if !strings.Contains(svg, "postgres &lt;TTL 2s&gt;") {
		t.Error("the title is not escaped")
	}
	if !strings.Contains(svg, "M=128 P=8: 7.50") {
		t.Error("the P=8 point is missing")
	}
	if !strings.Contains(svg, "target 2") {
		t.Error("the target line is missing")
	}
	if strings.Contains(string(plotSVG("sqlite", pts, 0)), "target") {
		t.Error("a target line drawn without a target")
	}
}
