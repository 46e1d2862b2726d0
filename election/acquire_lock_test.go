package election

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
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

// TestVacateSeatsBehindAGrant: on PostgreSQL, the statement that vacates
// a Group's seats on shutdown (dialect.VacateSeats) and waits behind a
// transaction that grants one of them to the same candidate anew leaves
// that seat as the transaction left it and reports it moved (the Group
// then vacates it by itself), while it vacates the others and ends their
// terms as unregistered.
func TestVacateSeatsBehindAGrant(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	_, db := testdb.Shared(t, tg)
	ctx := electorCtx(t)
	const expire = 300 * time.Millisecond
	nsA, nsB := testdb.Namespace(t), testdb.Namespace(t)
	ea, eb := newTestElection(t, db, nsA, expire), newTestElection(t, db, nsB, expire)
	a := uuid.New()
	for _, e := range []*Election{ea, eb} {
		if l, err := e.Elect(ctx, a); err != nil || !l.HeldBy(a) || l.Term != 1 {
			t.Fatalf("Elect: %+v, %v", l, err)
		}
	}
	time.Sleep(expire + 100*time.Millisecond)

	// A takes its lapsed seat in B again (term 2) in a transaction; the
	// vacate of both seats waits behind it.
	tx := db.Begin()
	if l, err := eb.Elect(ctx, a, WithTx(tx)); err != nil || !l.HeldBy(a) || l.Term != 2 {
		_ = tx.Rollback()
		t.Fatalf("Elect in a transaction: %+v, %v", l, err)
	}
	type outcome struct {
		vacated, moved []string
		err            error
	}
	got := make(chan outcome, 1)
	go func() {
		var o outcome
		var ok bool
		o.vacated, o.moved, ok, o.err = dialect.VacateSeats(ctx, testdb.Raw(t, db), ea.d, dialect.SeatsVacate{ID: a,
			Namespaces: []string{nsA, nsB}, Payloads: []string{handoff.Payload(a, nsA), handoff.Payload(a, nsB)},
			Reason: string(EndUnregistered), Channel: handoff.Channel("")})
		if !ok && o.err == nil {
			o.err = errors.New("VacateSeats is not supported")
		}
		got <- o
	}()
	queuedOn(t, db, "WITH t AS")
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil || !slices.Equal(o.vacated, []string{nsA}) || !slices.Equal(o.moved, []string{nsB}) {
		t.Fatalf("VacateSeats behind a grant: vacated %v, moved %v, %v; want %s vacated and %s moved", o.vacated, o.moved, o.err, nsA, nsB)
	}
	if l, err := ea.Leader(ctx); err != nil || !l.Vacant() {
		t.Errorf("the vacated seat: %+v, %v, want vacant", l, err)
	}
	if l, err := eb.Leader(ctx); err != nil || !l.HeldBy(a) || l.Term != 2 {
		t.Errorf("the seat that moved: %+v, %v, want A's term 2, as the grant left it", l, err)
	}
	wantHistory(t, ctx, ea, []termWant{{1, a, EndUnregistered}})
	wantHistory(t, ctx, eb, []termWant{{2, a, ""}, {1, a, EndExpired}})
}
