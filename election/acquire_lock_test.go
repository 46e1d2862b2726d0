package election

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

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

	// A resigns in a transaction that B's Elect waits behind.
	tx := db.Begin()
	if err := e.Resign(ctx, a, WithTx(tx)); err != nil {
		t.Fatalf("Resign in a transaction: %v", err)
	}
	got := electBehind(t, ctx, db, ns, 10*time.Second, b)
	queuedOn(t, db, "WITH seen AS")
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
	got = electBehind(t, ctx, db, ns, 10*time.Second, a)
	queuedOn(t, db, "WITH seen AS")
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if l := <-got; !l.HeldBy(c) || l.Term != 3 {
		t.Fatalf("Elect behind a granting transaction gave %+v, want C's lease in term 3", l)
	}

	// The history: A's term resigned, B's resigned, C's open.
	wantHistory(t, ctx, e, []termWant{{3, c, ""}, {2, b, EndResigned}, {1, a, EndResigned}})
}

// termWant is a term the history should hold: its leader, and how it
// ended ("" while it is held).
type termWant struct {
	term   int64
	leader uuid.UUID
	reason EndReason
}

// wantHistory checks that e's namespace has exactly the terms want,
// newest first, and returns them.
func wantHistory(t *testing.T, ctx context.Context, e *Election, want []termWant) []TermRecord {
	t.Helper()
	h, err := e.History(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != len(want) {
		t.Fatalf("history %+v, want %d terms", h, len(want))
	}
	for i, w := range want {
		if h[i].Term != w.term || h[i].Leader != w.leader || h[i].Ended() != (w.reason != "") || h[i].EndReason != w.reason {
			t.Errorf("history[%d] = %+v, want term %d of %s, ended as %q", i, h[i], w.term, w.leader, w.reason)
		}
	}
	return h
}

// electBehind runs another process's Elect of id in ns (expiry window
// expire), as a candidate woken by a handoff would (straight to the locked path, without a
// reading of the seat), and returns the lease it gives.
func electBehind(t *testing.T, ctx context.Context, db *gorm.DB, ns string, expire time.Duration, id uuid.UUID) chan Lease {
	t.Helper()
	w := newTestElection(t, db, ns, expire)
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

// queuedOn waits until a statement that begins with prefix waits for a
// row lock on the PostgreSQL server.
func queuedOn(t *testing.T, db *gorm.DB, prefix string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.Raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND starts_with(query, ?)", prefix).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement beginning %q queued on the seat's lock", prefix)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCallsBehindAGrantEndItsTerm: on PostgreSQL, a one-statement call
// queued behind a transaction that grants the seat decides on the term
// that transaction granted, whose history row its statement's snapshot
// does not hold, and still records that term as ended:
//   - an Elect that takes the seat because the new term's lease lapsed
//     before the transaction committed (a holder paused in its
//     transaction) ends it as expired;
//   - an UnregisterCandidate of the candidate the transaction granted the
//     seat to vacates the new term and ends it as unregistered.
//
// A chaos soak once found a term not recorded as ended though the next
// one followed.
func TestCallsBehindAGrantEndItsTerm(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	_, db := testdb.Shared(t, tg)
	ctx := electorCtx(t)
	ns := testdb.Namespace(t)
	const expire = 300 * time.Millisecond
	e := newTestElection(t, db, ns, expire)
	a, b := uuid.New(), uuid.New()
	if l, err := e.Elect(ctx, b); err != nil || !l.HeldBy(b) || l.Term != 1 {
		t.Fatalf("B's Elect: %+v, %v", l, err)
	}
	time.Sleep(expire + 100*time.Millisecond)

	// B takes its lapsed seat again (term 2) in a transaction; A's Elect
	// waits behind it; term 2 lapses before the commit.
	tx := db.Begin()
	l2, err := e.Elect(ctx, b, WithTx(tx))
	if err != nil || !l2.HeldBy(b) || l2.Term != 2 {
		_ = tx.Rollback()
		t.Fatalf("B's Elect in a transaction: %+v, %v", l2, err)
	}
	got := electBehind(t, ctx, db, ns, expire, a)
	queuedOn(t, db, "WITH seen AS")
	time.Sleep(expire + 100*time.Millisecond)
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	l3 := <-got
	if !l3.HeldBy(a) || l3.Term != 3 {
		t.Fatalf("Elect behind a grant that lapsed gave %+v, want A in term 3", l3)
	}

	// A takes its seat again (term 4) in a transaction, after term 3
	// lapsed; A's UnregisterCandidate, from another Election, waits
	// behind it.
	time.Sleep(expire + 100*time.Millisecond)
	tx = db.Begin()
	if l, err := e.Elect(ctx, a, WithTx(tx)); err != nil || !l.HeldBy(a) || l.Term != 4 {
		_ = tx.Rollback()
		t.Fatalf("A's Elect in a transaction: %+v, %v", l, err)
	}
	other := newTestElection(t, db, ns, expire)
	done := make(chan error, 1)
	go func() { done <- other.UnregisterCandidate(ctx, a) }()
	queuedOn(t, db, "WITH ")
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("UnregisterCandidate behind a grant: %v", err)
	}
	if l, err := e.Leader(ctx); err != nil || !l.Vacant() {
		t.Fatalf("after UnregisterCandidate behind the grant of term 4: %+v, %v, want the seat vacant", l, err)
	}

	h := wantHistory(t, ctx, e, []termWant{{4, a, EndUnregistered}, {3, a, EndExpired}, {2, b, EndExpired}, {1, b, EndExpired}})
	if !h[2].EndedAt.Equal(l2.ExpiresAt) {
		t.Errorf("term 2 ended at %v, want its lease's end %v", h[2].EndedAt, l2.ExpiresAt)
	}
}
