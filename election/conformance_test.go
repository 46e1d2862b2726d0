package election_test

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// shortExpire is the expiry window of tests that wait for a lease to end.
const shortExpire = 600 * time.Millisecond

// TestConformance runs the protocol's rules once per database.
func TestConformance(t *testing.T) {
	testdb.Each(t, exerciseProtocol)
}

// exerciseProtocol is the conformance suite: every rule of the protocol on
// one database. Each case has a namespace of its own and runs in parallel
// with the others.
func exerciseProtocol(t *testing.T, db *gorm.DB) {
	cases := []struct {
		name string
		fn   func(t *testing.T, db *gorm.DB, ns string)
	}{
		{"FirstElect", confFirstElect},
		{"NoPreemption", confNoPreemption},
		{"Renewal", confRenewal},
		{"TakeoverAfterExpiry", confTakeover},
		{"UnregisterLeader", confUnregisterLeader},
		{"UnregisterNonLeader", confUnregisterNonLeader},
		{"Resign", confResign},
		{"NamespacesIsolated", confNamespaces},
		{"IsLeader", confIsLeader},
		{"ListCandidates", confListCandidates},
		{"Heartbeat", confHeartbeat},
		{"Guard", confGuard},
		{"Prune", confPrune},
		{"StaleTermNeverRenews", confStaleTerm},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, db, testdb.Namespace(t))
		})
	}
}

// mustElect calls Elect and fails the test on error.
func mustElect(t *testing.T, e *election.Election, id uuid.UUID) election.Lease {
	t.Helper()
	l, err := e.Elect(testCtx(t), id)
	if err != nil {
		t.Fatalf("Elect(%s): %v", id, err)
	}
	return l
}

// mustLeader calls Leader and fails the test on error.
func mustLeader(t *testing.T, e *election.Election) election.Lease {
	t.Helper()
	l, err := e.Leader(testCtx(t))
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return l
}

func mustIsLeader(t *testing.T, e *election.Election, id uuid.UUID) bool {
	t.Helper()
	ok, err := e.IsLeader(testCtx(t), id)
	if err != nil {
		t.Fatalf("IsLeader(%s): %v", id, err)
	}
	return ok
}

func mustList(t *testing.T, e *election.Election) []uuid.UUID {
	t.Helper()
	ids, err := e.ListCandidates(testCtx(t))
	if err != nil {
		t.Fatalf("ListCandidates: %v", err)
	}
	if ids == nil {
		t.Fatal("ListCandidates returned a nil slice")
	}
	return ids
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sortedIDs returns ids in the order ListCandidates promises.
func sortedIDs(ids ...uuid.UUID) []uuid.UUID {
	out := append([]uuid.UUID{}, ids...)
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// wantLease fails unless got is a live lease of leader in term.
func wantLease(t *testing.T, what string, got election.Lease, ns string, leader uuid.UUID, term int64) {
	t.Helper()
	if got.Namespace != ns || got.Leader != leader || got.Term != term {
		t.Fatalf("%s: got lease {%s %s term %d}, want {%s %s term %d}", what, got.Namespace, got.Leader, got.Term, ns, leader, term)
	}
	if got.ExpiresAt.IsZero() || got.AcquiredAt.IsZero() || !got.ExpiresAt.After(got.AcquiredAt) {
		t.Fatalf("%s: lease times acquired %v, expires %v", what, got.AcquiredAt, got.ExpiresAt)
	}
}

// sameLease fails unless the two leases are identical (times to the
// microsecond, compared as instants).
func sameLease(t *testing.T, what string, got, want election.Lease) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("%s: lease differs (-want +got):\n%s", what, d)
	}
}

func wantNotLeader(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("%s: got %v, want ErrNotLeader", what, err)
	}
}

func confFirstElect(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns)
	a := uuid.New()
	if l := mustLeader(t, e); l != (election.Lease{Namespace: ns}) {
		t.Fatalf("Leader of a new namespace: %+v, want a vacant seat", l)
	}
	la := mustElect(t, e, a)
	wantLease(t, "first Elect", la, ns, a, 1)
	if got := la.ExpiresAt.Sub(la.AcquiredAt); got != e.Expire() {
		t.Fatalf("first lease lasts %v, want the expiry window %v", got, e.Expire())
	}
	sameLease(t, "Leader after Elect", mustLeader(t, e), la)
	if !mustIsLeader(t, e, a) {
		t.Fatal("IsLeader of the new leader is false")
	}
	row, ok := leaderRow(t, db, ns)
	if !ok || row.LeaderID == nil || *row.LeaderID != a || row.Term != 1 || row.LeaseExpiresAt == nil || !row.LeaseExpiresAt.Equal(la.ExpiresAt) {
		t.Fatalf("leader row %+v does not match the lease %+v", row, la)
	}
	if _, ok := candidateRows(t, db, ns)[a]; !ok {
		t.Fatal("Elect did not register the candidate")
	}
}

func confNoPreemption(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns)
	other := mustElection(t, db, ns) // no cached lease
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	sameLease(t, "Elect of another candidate", mustElect(t, e, b), la)
	sameLease(t, "Elect of another candidate through another Election", mustElect(t, other, b), la)
	sameLease(t, "Leader", mustLeader(t, e), la)
	if mustIsLeader(t, e, b) {
		t.Fatal("IsLeader of the candidate that lost is true")
	}
	if got, want := mustList(t, e), sortedIDs(a, b); !cmp.Equal(got, want) {
		t.Fatalf("ListCandidates = %v, want %v (Elect registers the loser too)", got, want)
	}
}

func confRenewal(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns)
	other := mustElection(t, db, ns)
	a := uuid.New()
	prev := mustElect(t, e, a)
	// Each renewal: through the Election that granted the lease (one
	// guarded statement), through another one (the full transaction), and
	// back.
	for i, via := range []*election.Election{e, other, e, other} {
		time.Sleep(3 * time.Millisecond) // let the database clock tick
		l := mustElect(t, via, a)
		wantLease(t, "renewal", l, ns, a, 1)
		if !l.AcquiredAt.Equal(prev.AcquiredAt) {
			t.Fatalf("renewal %d moved AcquiredAt from %v to %v", i, prev.AcquiredAt, l.AcquiredAt)
		}
		if !l.ExpiresAt.After(prev.ExpiresAt) {
			t.Fatalf("renewal %d: ExpiresAt %v is not after %v", i, l.ExpiresAt, prev.ExpiresAt)
		}
		sameLease(t, "Leader after renewal", mustLeader(t, e), l)
		prev = l
	}
}

func confTakeover(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns, election.WithExpire(shortExpire))
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	wantLease(t, "first Elect", la, ns, a, 1)
	if l := mustElect(t, e, b); l.Leader != a {
		t.Fatalf("b took a live lease: %+v", l)
	}
	waitSeatVacant(t, testCtx(t), e)
	if mustIsLeader(t, e, a) {
		t.Fatal("IsLeader is true after the lease expired")
	}
	lb := mustElect(t, e, b)
	wantLease(t, "takeover", lb, ns, b, la.Term+1)
	if lb.AcquiredAt.Before(la.ExpiresAt) {
		t.Fatalf("term 2 began at %v, before term 1 expired at %v", lb.AcquiredAt, la.ExpiresAt)
	}
	sameLease(t, "Leader after takeover", mustLeader(t, e), lb)
	// The old leader comes back while b's lease is live: no preemption.
	sameLease(t, "Elect of the old leader", mustElect(t, e, a), lb)
}

func confUnregisterLeader(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns)
	ctx := testCtx(t)
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	must(t, "RegisterCandidate(b)", e.RegisterCandidate(ctx, b))
	must(t, "UnregisterCandidate(a)", e.UnregisterCandidate(ctx, a))
	if l := mustLeader(t, e); l != (election.Lease{Namespace: ns}) {
		t.Fatalf("Leader after the leader unregistered: %+v, want vacant", l)
	}
	if mustIsLeader(t, e, a) {
		t.Fatal("IsLeader of an unregistered leader is true")
	}
	if got := mustList(t, e); !cmp.Equal(got, []uuid.UUID{b}) {
		t.Fatalf("ListCandidates = %v, want only b", got)
	}
	if row, ok := leaderRow(t, db, ns); !ok || row.LeaderID != nil || row.LeaseExpiresAt != nil || row.Term != la.Term {
		t.Fatalf("leader row after unregistering: %+v, want vacant and term %d kept", row, la.Term)
	}
	// The lease had a minute to run, yet b takes over at once.
	lb := mustElect(t, e, b)
	wantLease(t, "Elect after the leader left", lb, ns, b, la.Term+1)
	if !lb.AcquiredAt.Before(la.ExpiresAt) {
		t.Fatalf("takeover at %v waited for the old lease's expiry %v", lb.AcquiredAt, la.ExpiresAt)
	}
	// a comes back: it must not renew its forgotten lease.
	sameLease(t, "Elect of the returning candidate", mustElect(t, e, a), lb)
}

func confUnregisterNonLeader(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns)
	ctx := testCtx(t)
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	must(t, "RegisterCandidate(b)", e.RegisterCandidate(ctx, b))
	must(t, "UnregisterCandidate(b)", e.UnregisterCandidate(ctx, b))
	must(t, "UnregisterCandidate(unknown)", e.UnregisterCandidate(ctx, uuid.New()))
	sameLease(t, "Leader after a non-leader left", mustLeader(t, e), la)
	if got := mustList(t, e); !cmp.Equal(got, []uuid.UUID{a}) {
		t.Fatalf("ListCandidates = %v, want only a", got)
	}
	if _, ok := candidateRows(t, db, ns)[b]; ok {
		t.Fatal("the unregistered candidate's row is still there")
	}
}

func confResign(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns)
	ctx := testCtx(t)
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	must(t, "RegisterCandidate(b)", e.RegisterCandidate(ctx, b))
	must(t, "Resign(b) by a non-leader", e.Resign(ctx, b))
	sameLease(t, "Leader after a non-leader resigned", mustLeader(t, e), la)

	must(t, "Resign(a)", e.Resign(ctx, a))
	if l := mustLeader(t, e); !l.Vacant() {
		t.Fatalf("Leader after Resign: %+v, want vacant", l)
	}
	if mustIsLeader(t, e, a) {
		t.Fatal("IsLeader after Resign is true")
	}
	wantNotLeader(t, "Guard after Resign", e.Guard(ctx, la))
	if got, want := mustList(t, e), sortedIDs(a, b); !cmp.Equal(got, want) {
		t.Fatalf("ListCandidates = %v, want %v: a resigned candidate stays one", got, want)
	}
	lb := mustElect(t, e, b)
	wantLease(t, "Elect after Resign", lb, ns, b, la.Term+1)
	must(t, "Resign(a) again", e.Resign(ctx, a))
	sameLease(t, "Leader after the old leader resigned again", mustLeader(t, e), lb)
}

func confNamespaces(t *testing.T, db *gorm.DB, ns string) {
	ctx := testCtx(t)
	ns1, ns2 := ns+".one", ns+".two"
	e1, e2 := mustElection(t, db, ns1), mustElection(t, db, ns2)
	a, b := uuid.New(), uuid.New()
	wantLease(t, "a in ns1", mustElect(t, e1, a), ns1, a, 1)
	lb := mustElect(t, e2, b)
	wantLease(t, "b in ns2, where a does not lead", lb, ns2, b, 1)

	// Terms move on in ns1 only.
	must(t, "Resign(a) in ns1", e1.Resign(ctx, a))
	wantLease(t, "a again in ns1", mustElect(t, e1, a), ns1, a, 2)
	sameLease(t, "ns2 untouched", mustLeader(t, e2), lb)

	// a takes part in ns2 too, but does not preempt b there.
	sameLease(t, "a in ns2", mustElect(t, e2, a), lb)
	if mustIsLeader(t, e2, a) {
		t.Fatal("a leads ns2 because it leads ns1")
	}
	// Unregistering a in ns1 leaves its candidacy in ns2.
	must(t, "UnregisterCandidate(a) in ns1", e1.UnregisterCandidate(ctx, a))
	if got, want := mustList(t, e2), sortedIDs(a, b); !cmp.Equal(got, want) {
		t.Fatalf("ns2 candidates = %v, want %v", got, want)
	}
	if got := mustList(t, e1); len(got) != 0 {
		t.Fatalf("ns1 candidates = %v, want none", got)
	}
	// The same candidate leading two namespaces, giving up one.
	must(t, "Resign(b) in ns2", e2.Resign(ctx, b))
	la2 := mustElect(t, e2, a)
	wantLease(t, "a in ns2", la2, ns2, a, 2)
	wantLease(t, "a back in ns1", mustElect(t, e1, a), ns1, a, 3)
	must(t, "UnregisterCandidate(a) in ns1", e1.UnregisterCandidate(ctx, a))
	if !mustIsLeader(t, e2, a) {
		t.Fatal("leaving ns1 ended a's lease in ns2")
	}
	sameLease(t, "ns2 after a left ns1", mustLeader(t, e2), la2)
}

func confIsLeader(t *testing.T, db *gorm.DB, ns string) {
	e := mustElection(t, db, ns, election.WithExpire(shortExpire))
	a, b := uuid.New(), uuid.New()
	if mustIsLeader(t, e, a) {
		t.Fatal("IsLeader in a namespace without a leader row is true")
	}
	mustElect(t, e, a)
	mustElect(t, e, b)
	if !mustIsLeader(t, e, a) {
		t.Fatal("IsLeader(a) = false while a holds a live lease")
	}
	if mustIsLeader(t, e, b) || mustIsLeader(t, e, uuid.New()) {
		t.Fatal("IsLeader of a non-leader is true")
	}
	waitSeatVacant(t, testCtx(t), e)
	if mustIsLeader(t, e, a) {
		t.Fatal("IsLeader(a) = true after the lease expired")
	}
}

func confListCandidates(t *testing.T, db *gorm.DB, ns string) {
	ctx := testCtx(t)
	e := mustElection(t, db, ns)
	short := mustElection(t, db, ns, election.WithExpire(shortExpire))
	if got := mustList(t, e); len(got) != 0 {
		t.Fatalf("ListCandidates of an empty namespace = %v", got)
	}
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	for _, id := range ids {
		must(t, "RegisterCandidate", e.RegisterCandidate(ctx, id))
	}
	want := sortedIDs(ids...)
	if got := mustList(t, e); !cmp.Equal(got, want) {
		t.Fatalf("ListCandidates = %v, want %v", got, want)
	}
	// A candidate that stops heartbeating drops out when it expires.
	gone := uuid.New()
	must(t, "RegisterCandidate", short.RegisterCandidate(ctx, gone))
	if got := mustList(t, e); !cmp.Equal(got, sortedIDs(append(ids, gone)...)) {
		t.Fatalf("ListCandidates = %v, want the short-lived candidate too", got)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := mustList(t, e)
		if cmp.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListCandidates = %v still, want %v", got, want)
		}
	}
	if _, ok := candidateRows(t, db, ns)[gone]; !ok {
		t.Fatal("an expired candidate's row was deleted long before it could be pruned")
	}
	must(t, "UnregisterCandidate", e.UnregisterCandidate(ctx, want[1]))
	if got := mustList(t, e); !cmp.Equal(got, []uuid.UUID{want[0], want[2], want[3]}) {
		t.Fatalf("ListCandidates after unregistering = %v", got)
	}
}

func confHeartbeat(t *testing.T, db *gorm.DB, ns string) {
	ctx := testCtx(t)
	e := mustElection(t, db, ns)
	x := uuid.New()
	must(t, "Heartbeat of a missing candidate", e.Heartbeat(ctx, x))
	if got := mustList(t, e); !cmp.Equal(got, []uuid.UUID{x}) {
		t.Fatalf("ListCandidates = %v, want the heartbeating candidate", got)
	}
	first, ok := candidateRows(t, db, ns)[x]
	if !ok {
		t.Fatal("Heartbeat created no row")
	}
	if got := first.ExpiresAt.Sub(first.LastHeartbeatAt); got != e.Expire() {
		t.Fatalf("candidate row expires %v after its heartbeat, want %v", got, e.Expire())
	}
	time.Sleep(3 * time.Millisecond)
	must(t, "Heartbeat", e.Heartbeat(ctx, x))
	again := candidateRows(t, db, ns)[x]
	if !again.RegisteredAt.Equal(first.RegisteredAt) {
		t.Fatalf("Heartbeat moved registered_at from %v to %v", first.RegisteredAt, again.RegisteredAt)
	}
	if !again.LastHeartbeatAt.After(first.LastHeartbeatAt) || !again.ExpiresAt.After(first.ExpiresAt) {
		t.Fatalf("Heartbeat did not refresh the row: %+v then %+v", first, again)
	}
}

func confGuard(t *testing.T, db *gorm.DB, ns string) {
	ctx := testCtx(t)
	e := mustElection(t, db, ns, election.WithExpire(shortExpire))
	other := mustElection(t, db, ns+".other")
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	must(t, "Guard of the live lease", e.Guard(ctx, la))
	tx := db.Begin()
	must(t, "Guard of the live lease WithTx", e.Guard(ctx, la, election.WithTx(tx)))
	must(t, "rollback", tx.Rollback().Error)

	wantNotLeader(t, "Guard of a zero Lease", e.Guard(ctx, election.Lease{}))
	stale := la
	stale.Term++
	wantNotLeader(t, "Guard with another term", e.Guard(ctx, stale))
	stale = la
	stale.Leader = b
	wantNotLeader(t, "Guard of a lease naming another candidate", e.Guard(ctx, stale))
	wantNotLeader(t, "Guard of the lease in another namespace", other.Guard(ctx, la))

	// Same leader, newer term: the old lease is stale.
	must(t, "Resign", e.Resign(ctx, a))
	la2 := mustElect(t, e, a)
	wantLease(t, "a again", la2, ns, a, la.Term+1)
	wantNotLeader(t, "Guard of a's lease of the previous term", e.Guard(ctx, la))
	must(t, "Guard of a's current lease", e.Guard(ctx, la2))

	waitSeatVacant(t, ctx, e)
	wantNotLeader(t, "Guard after expiry", e.Guard(ctx, la2))
	lb := mustElect(t, e, b)
	wantLease(t, "takeover", lb, ns, b, la2.Term+1)
	wantNotLeader(t, "Guard after takeover", e.Guard(ctx, la2))
	must(t, "Guard of the new leader's lease", e.Guard(ctx, lb))
}

func confPrune(t *testing.T, db *gorm.DB, ns string) {
	ctx := testCtx(t)
	const window = 300 * time.Millisecond
	short := mustElection(t, db, ns, election.WithExpire(window))
	long := mustElection(t, db, ns)
	a, keep := uuid.New(), uuid.New()
	crashed := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for _, id := range crashed {
		must(t, "RegisterCandidate", short.RegisterCandidate(ctx, id))
	}
	must(t, "RegisterCandidate", long.RegisterCandidate(ctx, keep))
	mustElect(t, short, a)
	if rows := candidateRows(t, db, ns); len(rows) != 5 {
		t.Fatalf("%d candidate rows right after registering, want 5 (nothing is pruned while live)", len(rows))
	}
	// Wait more than two windows, then the leader's Elect prunes.
	time.Sleep(2*window + 100*time.Millisecond)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l := mustElect(t, short, a)
		if l.Leader != a {
			t.Fatalf("a lost the lease to %s", l.Leader)
		}
		rows := candidateRows(t, db, ns)
		left := 0
		for _, id := range crashed {
			if _, ok := rows[id]; ok {
				left++
			}
		}
		if left == 0 {
			if _, ok := rows[a]; !ok {
				t.Fatal("pruning deleted the leader's row")
			}
			if _, ok := rows[keep]; !ok {
				t.Fatal("pruning deleted a live candidate")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d long-expired candidate rows were never pruned", left)
		}
	}
	// Prune called directly finds nothing more.
	n, err := short.Prune(ctx)
	must(t, "Prune", err)
	if n != 0 {
		t.Fatalf("Prune deleted %d rows after the leader pruned", n)
	}
}

func confStaleTerm(t *testing.T, db *gorm.DB, ns string) {
	ctx := testCtx(t)
	e1 := mustElection(t, db, ns, election.WithExpire(shortExpire))
	e2 := mustElection(t, db, ns)
	a, b := uuid.New(), uuid.New()
	var lastTerm int64
	step := func(what string, wantLeader uuid.UUID, wantTerm int64) {
		t.Helper()
		row, ok := leaderRow(t, db, ns)
		if !ok {
			t.Fatalf("%s: no leader row", what)
		}
		if row.Term < lastTerm {
			t.Fatalf("%s: term went back from %d to %d", what, lastTerm, row.Term)
		}
		lastTerm = row.Term
		if row.Term != wantTerm {
			t.Fatalf("%s: term %d, want %d", what, row.Term, wantTerm)
		}
		switch {
		case wantLeader == uuid.Nil && row.LeaderID != nil:
			t.Fatalf("%s: leader %s, want vacant", what, *row.LeaderID)
		case wantLeader != uuid.Nil && (row.LeaderID == nil || *row.LeaderID != wantLeader):
			t.Fatalf("%s: leader %v, want %s", what, row.LeaderID, wantLeader)
		}
	}
	wantLease(t, "a leads", mustElect(t, e1, a), ns, a, 1) // e1 caches a's term-1 lease
	step("a leads", a, 1)
	waitSeatVacant(t, ctx, e1)
	wantLease(t, "b takes over", mustElect(t, e2, b), ns, b, 2)
	step("b leads", b, 2)
	must(t, "UnregisterCandidate(b)", e2.UnregisterCandidate(ctx, b))
	step("b left", uuid.Nil, 2)
	// a's cached lease names term 1: it must not be renewed.
	wantLease(t, "a returns", mustElect(t, e1, a), ns, a, 3)
	step("a leads again", a, 3)
	// a's own lease expires with nobody else around: coming back is a new
	// term too, not a renewal.
	waitSeatVacant(t, ctx, e1)
	wantLease(t, "a after its lease expired", mustElect(t, e1, a), ns, a, 4)
	step("a leads a fourth term", a, 4)
	must(t, "Resign(a)", e1.Resign(ctx, a))
	step("a resigned", uuid.Nil, 4)
	wantLease(t, "a after resigning", mustElect(t, e1, a), ns, a, 5)
	step("a leads a fifth term", a, 5)
}
