package main

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

func wellFormed(t *testing.T, svg string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("not well-formed: %v\n%s", err, svg)
			}
			return
		}
	}
}

// TestPlotSVG: the plot is well-formed XML with a panel per cost (the
// statements, and the rows written and read when the server counted
// them), one line per process count and balancing mode in each, a point
// per measured size with a value, and the title escaped.
func TestPlotSVG(t *testing.T) {
	pts := []point{
		{m: 1, p: 2, perProcInterval: 1.2, rowsWritten: 3, rowsRead: 9}, {m: 16, p: 2, perProcInterval: 1.4, rowsWritten: 40, rowsRead: 0},
		{m: 1000, p: 2, perProcInterval: 1.5, rowsWritten: 2000, rowsRead: 90000},
		{m: 1, p: 2, balance: true, perProcInterval: 1.3, rowsWritten: 3, rowsRead: 12}, {m: 1000, p: 2, balance: true, perProcInterval: 1.6, rowsWritten: 2100, rowsRead: 120000},
		{m: 128, p: 8, perProcInterval: 7.5, rowsWritten: 1100, rowsRead: 8000},
	}
	svg := string(plotSVG("postgres <TTL 2s>", pts, 2))
	wellFormed(t, svg)
	if n := strings.Count(svg, "<path "); n != 9 {
		t.Errorf("%d lines, want 9 (P=2 off, P=2 on, P=8 off in each of three panels)", n)
	}
	if n := strings.Count(svg, "<circle "); n != 3*len(pts) {
		t.Errorf("%d points, want %d", n, 3*len(pts))
	}
	if !strings.Contains(svg, "postgres &lt;TTL 2s&gt;") {
		t.Error("the title is not escaped")
	}
	for _, want := range []string{"M=128 P=8: 7.50", "M=128 P=8: 1100.00", "M=1000 P=2: 120000.00", "target 2",
		"rows written per interval", "rows read per interval"} {
		if !strings.Contains(svg, want) {
			t.Errorf("%q is missing", want)
		}
	}
	if strings.Contains(string(plotSVG("sqlite", pts, 0)), "target") {
		t.Error("a target line drawn without a target")
	}

	// Without row counts (SQLite, or MariaDB without statistics): the
	// statements panel alone.
	for i := range pts {
		pts[i].rowsWritten, pts[i].rowsRead = -1, -1
	}
	svg = string(plotSVG("sqlite", pts, 0))
	wellFormed(t, svg)
	if n := strings.Count(svg, "<path "); n != 3 {
		t.Errorf("without rows: %d lines, want 3", n)
	}
	if strings.Contains(svg, "rows written") {
		t.Error("without rows: a rows panel drawn")
	}
}

func TestTickLabel(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1: "1", 0.5: "0.5", 999: "999", 1000: "1,000", 100000: "100,000", 1e6: "1,000,000"} {
		if got := tickLabel(v); got != want {
			t.Errorf("tickLabel(%g) = %q, want %q", v, got, want)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable": "postgres://postgres@127.0.0.1:5432/sqlelect_scale?sslmode=disable",
		"mysql://root@tcp(127.0.0.1:3306)/test":                   "mysql://root@tcp(127.0.0.1:3306)/sqlelect_scale",
		"root:pw@tcp(localhost:3306)/test?parseTime=true":         "root:pw@tcp(localhost:3306)/sqlelect_scale?parseTime=true",
	} {
		if got, err := withDatabase(dsn, "sqlelect_scale"); err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
	if _, err := withDatabase("host=localhost dbname=test", "x"); err == nil {
		t.Error("a keyword/value DSN was rewritten")
	}
}
