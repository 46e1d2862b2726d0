package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logWriter sends the library's warnings to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var leads = regexp.MustCompile(`^\s*\+[0-9.]+s\s+(\S+)\s+scheduler\s+LEADS in term (\d+)`)

// TestDemo runs the demo on a new SQLite file and reads its timeline: the
// scheduler's first leader is stopped, another member leads in a higher
// term, workers finish jobs before and after the takeover, and the history
// printed from the database agrees. The demo
// returning at all shows that every member's Electors and workers stopped;
// goleak checks that nothing was left running.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	o := options{
		dsn:     "sqlite:" + t.TempDir() + "/demo.db",
		workers: 2,
		expire:  time.Second,
		enqueue: 50 * time.Millisecond,
		reap:    200 * time.Millisecond,
		timeout: 30 * time.Second,
		logs:    logWriter{t},
	}
	err := runDemo(context.Background(), o, &out)
	t.Logf("timeline:\n%s", out.String())
	if err != nil {
		t.Fatalf("runDemo: %v", err)
	}

	type lead struct {
		who  string
		term int64
		line int
	}
	var got []lead
	lines := strings.Split(out.String(), "\n")
	for i, line := range lines {
		if m := leads.FindStringSubmatch(line); m != nil {
			term, _ := strconv.ParseInt(m[2], 10, 64)
			got = append(got, lead{m[1], term, i})
		}
	}
	if len(got) < 2 {
		t.Fatalf("want at least two scheduler leaders in the timeline, got %d", len(got))
	}
	first, last := got[0], got[len(got)-1]
	if last.who == first.who || last.term <= first.term {
		t.Errorf("no takeover: the scheduler was first led by %s in term %d, last by %s in term %d", first.who, first.term, last.who, last.term)
	}
	stops := regexp.MustCompile(`(?m)\s` + first.who + `\s+scheduler\s+stops leading \(term ` + strconv.FormatInt(first.term, 10) + `\)`)
	if !stops.MatchString(out.String()) {
		t.Errorf("the timeline does not show %s stop leading term %d", first.who, first.term)
	}
	var before, after int
	for i, line := range lines {
		if !strings.Contains(line, "done job") {
			continue
		}
		if i < last.line {
			before++
		} else {
			after++
		}
	}
	if before == 0 || after == 0 {
		t.Errorf("want jobs done before and after the takeover, got %d and %d", before, after)
	}
	// The database's history of the scheduler names the same leaders, and
	// every term ended with its leader unregistering.
	for _, l := range []lead{first, last} {
		h := regexp.MustCompile(`history\s+scheduler\s+term ` + strconv.FormatInt(l.term, 10) + `: ` + l.who + `, \S+/\d+, from .* unregistered`)
		if !h.MatchString(out.String()) {
			t.Errorf("the timeline's history does not show term %d of %s, unregistered", l.term, l.who)
		}
	}
	if !strings.Contains(out.String(), "demo: done.") {
		t.Errorf("the demo did not report its end")
	}
}

var leadsShards = regexp.MustCompile(`(\S+)\s+shards\s+leads (\d+) of (\d+) shards`)

// TestDemoShards runs the demo with -namespaces 9: every member runs one
// Group over the nine shards, and the timeline shows the shards led by
// the members; at some point every shard had an owner.
func TestDemoShards(t *testing.T) {
	var out bytes.Buffer
	o := options{
		dsn:        "sqlite:" + t.TempDir() + "/demo.db",
		workers:    1,
		expire:     time.Second,
		enqueue:    50 * time.Millisecond,
		reap:       200 * time.Millisecond,
		timeout:    30 * time.Second,
		logs:       logWriter{t},
		namespaces: 9,
	}
	err := runDemo(context.Background(), o, &out)
	t.Logf("timeline:\n%s", out.String())
	if err != nil {
		t.Fatalf("runDemo: %v", err)
	}
	owned := map[string]int{}
	most := 0
	for _, line := range strings.Split(out.String(), "\n") {
		m := leadsShards.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		owned[m[1]] = n
		total := 0
		for _, k := range owned {
			total += k
		}
		most = max(most, total)
	}
	if most != 9 {
		t.Errorf("at most %d of 9 shards had an owner at once, per the timeline", most)
	}
}
