package election_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// syncBuffer is a bytes.Buffer for a logger on several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// notListening is the start of the line the hub logs when it polls.
const notListening = "election: not listening for handoffs"

// TestHandoffThroughPooler: on PostgreSQL, a leader that stops hands over.
// On a direct connection the successor is woken by a notification, well
// before its next tick. Through a pooler in transaction mode
// (SQLELECT_POSTGRES_POOLER=transaction), where LISTEN succeeds and nothing
// is delivered, the Electors say once that they poll, and the successor
// takes over at its next tick; no warning is logged either way.
func TestHandoffThroughPooler(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	pooled := testdb.TransactionPooler()
	// Two pools, as two processes would have: no in-process wake-up.
	dbA := testdb.Open(t, tg)
	dbB := testdb.OpenDSN(t, tg.DSN)
	ns := testdb.Namespace(t)
	var logsA, logsB syncBuffer
	logger := func(w *syncBuffer) *slog.Logger {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	eA := mustElection(t, dbA, ns, election.WithExpire(20*time.Second), election.WithLogger(logger(&logsA)))
	eB := mustElection(t, dbB, ns, election.WithExpire(20*time.Second), election.WithLogger(logger(&logsB)))
	const interval = 4 * time.Second

	ctx := testCtx(t)
	leading := make(chan uuid.UUID, 4)
	newElector := func(e *election.Election) *election.Elector {
		var el *election.Elector
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{
			Interval:         interval,
			OnStartedLeading: func(context.Context, election.Lease) { leading <- el.ID() },
		})
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	run := func(el *election.Elector) (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- el.Run(rctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	a, b := newElector(eA), newElector(eB)
	stopA := run(a)
	if got := <-leading; got != a.ID() {
		t.Fatalf("%s leads, want A", got)
	}
	stopB := run(b)
	defer stopB()
	// Let B's listener subscribe, or give up on it (the probe's bound).
	time.Sleep(4 * time.Second)
	start := time.Now()
	stopA()
	select {
	case got := <-leading:
		if got != b.ID() {
			t.Fatalf("%s leads, want B", got)
		}
	case <-time.After(3 * interval):
		t.Fatalf("B did not lead within %v of A stopping", 3*interval)
	}
	took := time.Since(start)
	t.Logf("handoff took %v (pooled: %v)", took, pooled)
	out := logsB.String()
	if n := strings.Count(out, notListening); pooled && n != 1 {
		t.Errorf("%q logged %d times by B through the pooler, want once:\n%s", notListening, n, out)
	} else if !pooled && n != 0 {
		t.Errorf("%q logged on a direct connection:\n%s", notListening, out)
	}
	if !pooled && took > interval/2 {
		t.Errorf("handoff took %v on a direct connection, want a notification's wake-up", took)
	}
	for _, out := range []string{logsA.String(), out} {
		if strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
			t.Errorf("warnings logged:\n%s", out)
		}
	}
}
