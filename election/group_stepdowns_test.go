package election

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// trustLines is a slog handler that keeps the trust-window step-down
// lines: how many, and the namespaces each stands for (one, or the count
// of a gathered line).
type trustLines struct {
	mu    sync.Mutex
	lines int
	stood int
}

func (h *trustLines) Enabled(context.Context, slog.Level) bool { return true }

func (h *trustLines) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "no renewal within the trust window") {
		return nil
	}
	n := 1
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "namespaces" {
			n = int(a.Value.Int64())
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines++
	h.stood += n
	return nil
}

func (h *trustLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *trustLines) WithGroup(string) slog.Handler      { return h }

func (h *trustLines) counts() (lines, stood int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lines, h.stood
}

// TestGroupGathersTrustStepDowns: when a Group's rounds stall, the trust
// windows of all its seats end together, and it steps down from each;
// the log has a line for the first and one for all the others, whose
// count it gives, not a line for each namespace (28,359 lines in a
// two-minute run at 40,000 x 16, each written under the Group's lock).
func TestGroupGathersTrustStepDowns(t *testing.T) {
	ctx := electorCtx(t)
	db := migratedSQLite(t, ctx, "stepdowns")
	nss := make([]string, 40)
	for i := range nss {
		nss[i] = testdb.Namespace(t)
	}
	lines := &trustLines{}
	var stopped atomic.Int32
	g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{
		Namespaces:       nss,
		OnStoppedLeading: func(Lease) { stopped.Add(1) },
	}, WithExpire(time.Second), WithLogger(slog.New(lines)))
	if err != nil {
		t.Fatal(err)
	}
	var stall atomic.Bool
	release := holdWhile(g, &stall)
	runUntilCleanup(t, ctx, g)
	t.Cleanup(release)
	waitUntil(t, 10*time.Second, "the Group leading every namespace", func() bool { return len(g.Leading()) == len(nss) })

	stall.Store(true)
	waitUntil(t, 10*time.Second, "every leadership ended", func() bool { return len(g.Leading()) == 0 && int(stopped.Load()) == len(nss) })
	waitUntil(t, 3*stepDownsWindow, "the step-downs logged", func() bool {
		_, stood := lines.counts()
		return stood == len(nss)
	})
	n, stood := lines.counts()
	if n > 2 {
		t.Fatalf("%d trust-window lines for %d step-downs at once; want the first and one gathering the others", n, stood)
	}
}

// TestStepDownsGathered: the first step-down after a quiet window has a
// line of its own; those within the window one line when it ends, or when
// the Group shuts down (flushDownsLocked); the next after the window
// starts again. An Elector's box (no Group logger) logs each.
func TestStepDownsGathered(t *testing.T) {
	clk := newFakeClock()
	lines := &trustLines{}
	var b box
	b.downs.log = slog.New(lines)
	machineIn := func(ns string) *machine {
		return &machine{e: &Election{namespace: ns}, log: slog.New(lines), clk: clk}
	}
	down := func(ns string) {
		b.lock()
		b.steppedDownLocked(machineIn(ns), 7, clk.Now())
		b.unlock()
	}
	want := func(step string, wantLines, wantStood int) {
		t.Helper()
		if n, stood := lines.counts(); n != wantLines || stood != wantStood {
			t.Fatalf("%s: %d lines for %d step-downs; want %d for %d", step, n, stood, wantLines, wantStood)
		}
	}

	down("a")
	want("the first", 1, 1)
	for _, ns := range []string{"b", "c", "d"} {
		clk.Advance(100 * time.Millisecond)
		down(ns)
	}
	want("three within the window", 1, 1)
	clk.Advance(stepDownsWindow)
	want("the window's end", 2, 4)

	down("e")
	want("the first after the window", 3, 5)
	down("f")
	b.lock()
	b.flushDownsLocked()
	b.unlock()
	want("a flush on shutdown", 4, 6)
	clk.Advance(2 * stepDownsWindow)
	want("the stopped timer", 4, 6)

	var el box // an Elector's
	el.lock()
	el.steppedDownLocked(machineIn("g"), 7, clk.Now())
	el.steppedDownLocked(machineIn("g"), 8, clk.Now())
	el.unlock()
	want("an Elector's", 6, 8)
}
