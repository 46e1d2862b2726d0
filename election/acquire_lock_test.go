package election

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestAcquireBehindALock: PostgreSQL's one-statement Elect (Acquire) of a
// candidate woken by a handoff, queued behind a transaction that holds the
// seat's row lock, decides on the row that transaction leaves, not on the
// one its statement's snapshot saw: it takes a seat vacated meanwhile in
// the next term, and does not take one granted meanwhile to another
// candidate.
func TestAcquireBehindALock(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	_, db := testdb.Shared(t, tg)
	ctx := electorCtx(t)
	ns := testdb.Namespace(t)
	e := newTestElection(t, db, ns, 10*time.Second)
	if e.q.Acquire == "" {
		t.Fatal("no Acquire statement on PostgreSQL")
	}
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	if l, err := e.Elect(ctx, a); err != nil || !l.HeldBy(a) || l.Term != 1 {
		t.Fatalf("A's Elect: %+v, %v", l, err)
	}

	// waiter is another process's candidate woken by a handoff: straight
	// to the locked path, which queues behind tx.
	waiter := func(id uuid.UUID) chan Lease {
		w := newTestElection(t, db, ns, 10*time.Second)
		w.forgetSeat()
		out := make(chan Lease, 1)
		go func() {
			l, err := w.Elect(ctx, id)
			if err != nil {
				t.Errorf("Elect behind the lock: %v", err)
			}
			out <- l
		}()
		return out
	}
	// queued waits until a statement waits for a row lock on the server.
	queued := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := db.Raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH seen AS%'").Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the one-statement Elect never queued on the seat's lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// A resigns in a transaction that B's Elect waits behind.
	tx := db.Begin()
	if err := e.Resign(ctx, a, WithTx(tx)); err != nil {
		t.Fatalf("Resign in a transaction: %v", err)
	}
	got := waiter(b)
	queued()
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if l := <-got; !l.HeldBy(b) || l.Term != 2 {
		t.Fatalf("Elect behind a vacating transaction gave %+v, want B in term 2", l)
	}

	// B resigns and C takes the seat in one transaction, which A's Elect
	// waits behind: A must find C's live lease, not take the seat.
	tx = db.Begin()
	if err := e.Resign(ctx, b, WithTx(tx)); err != nil {
		t.Fatalf("Resign in a transaction: %v", err)
	}
	if l, err := e.Elect(ctx, c, WithTx(tx)); err != nil || !l.HeldBy(c) || l.Term != 3 {
		t.Fatalf("C's Elect in the transaction: %+v, %v", l, err)
	}
	got = waiter(a)
	queued()
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if l := <-got; !l.HeldBy(c) || l.Term != 3 {
		t.Fatalf("Elect behind a granting transaction gave %+v, want C's lease in term 3", l)
	}

	// The history: A's term resigned, B's resigned, C's open.
	h, err := e.History(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		term   int64
		leader uuid.UUID
		ended  bool
	}{{3, c, false}, {2, b, true}, {1, a, true}}
	if len(h) != len(want) {
		t.Fatalf("history %+v, want %d terms", h, len(want))
	}
	for i, w := range want {
		if h[i].Term != w.term || h[i].Leader != w.leader || h[i].Ended() != w.ended {
			t.Errorf("history[%d] = %+v, want term %d of %s, ended %v", i, h[i], w.term, w.leader, w.ended)
		}
	}
}
