package election_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/models"
)

// TestWithLabelRefused: a label that is too long, not UTF-8, or holds
// control characters is refused by New with ErrInvalidOption.
func TestWithLabelRefused(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	for name, label := range map[string]string{
		"too long":   strings.Repeat("é", election.MaxLabelLen/2+1),
		"not UTF-8":  "pod-\xff",
		"NUL":        "pod\x00",
		"newline":    "pod\n1",
		"DEL":        "pod\x7f",
		"tab":        "pod\t1",
		"C1 NEL":     "pod\u00851",
		"C1 CSI":     "pod\u009b[31m",
		"long ASCII": strings.Repeat("a", election.MaxLabelLen+1),
	} {
		if _, err := election.New(db, election.WithLabel(label)); !errors.Is(err, election.ErrInvalidOption) {
			t.Errorf("WithLabel(%s): %v, want ErrInvalidOption", name, err)
		}
	}
	for _, label := range []string{"", strings.Repeat("a", election.MaxLabelLen), "worker-7 v1.2.3 (ü)"} {
		e, err := election.New(db, election.WithLabel(label))
		if err != nil {
			t.Fatalf("WithLabel(%q): %v", label, err)
		}
		if got := e.Identity().Label; got != label {
			t.Errorf("Identity().Label = %q, want %q", got, label)
		}
	}
	if _, err := election.New(db, election.WithHistoryRetention(time.Millisecond)); !errors.Is(err, election.ErrInvalidOption) {
		t.Errorf("WithHistoryRetention(1ms): %v, want ErrInvalidOption", err)
	}
}

// TestCandidatesIdentity: Candidates lists the live candidates with the
// identity of the Election that wrote them (hostname, process id, label)
// and their times by the database clock, marks the leader, and agrees
// with ListCandidates; LeaderInfo names the leader's identity.
func TestCandidatesIdentity(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		ns := testdb.Namespace(t)
		label := "pod-a v1.2.3 ✓"
		ea := mustElection(t, db, ns, election.WithLabel(label))
		eb := mustElection(t, db, ns)
		host, _ := os.Hostname()
		if id := ea.Identity(); id.Hostname != host || id.PID != os.Getpid() || id.Label != label {
			t.Fatalf("Identity() = %+v, want %s/%d [%s]", id, host, os.Getpid(), label)
		}
		a, b := uuid.New(), uuid.New()
		before := dbNow(t, db)
		la := mustElect(t, ea, a)
		must(t, "RegisterCandidate", eb.RegisterCandidate(ctx, b))
		after := dbNow(t, db)

		got, err := ea.Candidates(ctx)
		must(t, "Candidates", err)
		if len(got) != 2 {
			t.Fatalf("Candidates = %+v, want 2", got)
		}
		ids := mustList(t, ea)
		for i, c := range got {
			if c.ID != ids[i] {
				t.Errorf("Candidates[%d] is %s, ListCandidates says %s", i, c.ID, ids[i])
			}
			want := eb.Identity()
			if c.ID == a {
				want = ea.Identity()
			}
			if c.Identity != want {
				t.Errorf("candidate %s: identity %+v, want %+v", c.ID, c.Identity, want)
			}
			if c.Leader != (c.ID == a) {
				t.Errorf("candidate %s: Leader = %v", c.ID, c.Leader)
			}
			// SQLite's clock ticks in milliseconds.
			if c.LastHeartbeatAt.Before(before.Truncate(time.Millisecond)) || c.LastHeartbeatAt.After(after) ||
				c.RegisteredAt.After(c.LastHeartbeatAt) || !c.ExpiresAt.Equal(c.LastHeartbeatAt.Add(election.DefaultExpire)) {
				t.Errorf("candidate %s: times %v / %v / %v, want a heartbeat in [%v, %v] expiring a window later",
					c.ID, c.RegisteredAt, c.LastHeartbeatAt, c.ExpiresAt, before, after)
			}
		}

		info, err := eb.LeaderInfo(ctx)
		must(t, "LeaderInfo", err)
		sameLease(t, "LeaderInfo", info.Lease, mustLeader(t, eb))
		if info.Lease.Leader != a || info.Lease.Term != la.Term || info.Identity != ea.Identity() {
			t.Fatalf("LeaderInfo = %+v, want %s in term %d as %v", info, a, la.Term, ea.Identity())
		}
		// A candidate row refreshed through another Election takes its
		// identity.
		must(t, "Heartbeat", eb.Heartbeat(ctx, a))
		if info, err := ea.LeaderInfo(ctx); err != nil || info.Identity != eb.Identity() {
			t.Fatalf("LeaderInfo after a heartbeat through another Election: %+v, %v", info, err)
		}
		must(t, "Resign", ea.Resign(ctx, a))
		if info, err := ea.LeaderInfo(ctx); err != nil || !info.Lease.Vacant() || info.Identity != (election.Identity{}) {
			t.Fatalf("LeaderInfo of a vacant seat: %+v, %v", info, err)
		}
		must(t, "UnregisterCandidate", ea.UnregisterCandidate(ctx, a))
		must(t, "UnregisterCandidate", eb.UnregisterCandidate(ctx, b))
		if got, err := ea.Candidates(ctx); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Candidates with none live: %#v, %v; want empty, not nil", got, err)
		}
	})
}

// wantTerm checks one term of the history.
func wantTerm(t *testing.T, what string, got election.TermRecord, term int64, leader uuid.UUID, reason election.EndReason) {
	t.Helper()
	if got.Term != term || got.Leader != leader || got.EndReason != reason || got.Ended() != (reason != "") ||
		got.EndedAt.IsZero() != (reason == "") || (reason != "" && got.EndedAt.Before(got.AcquiredAt)) {
		t.Fatalf("%s: %+v, want term %d of %s ended %q", what, got, term, leader, reason)
	}
}

// TestHistory: every way a term begins and ends is recorded, in the
// transaction that does it; renewals and lost rounds add nothing; History
// is newest first and limited; a grant rolled back with the caller's
// transaction leaves no term behind.
func TestHistory(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		ns := testdb.Namespace(t)
		e := mustElection(t, db, ns, election.WithLabel("long"))
		short := mustElection(t, db, ns, election.WithExpire(shortExpire), election.WithLabel("short"))
		a, b := uuid.New(), uuid.New()
		history := func() []election.TermRecord {
			t.Helper()
			h, err := e.History(ctx, 100)
			must(t, "History", err)
			return h
		}
		if h := history(); len(h) != 0 {
			t.Fatalf("history of a new namespace: %+v", h)
		}

		// Term 1: a leads, renews, b loses; then a resigns.
		l1 := mustElect(t, e, a)
		for i := 0; i < 3; i++ {
			mustElect(t, e, a)
			mustElect(t, e, b)
		}
		h := history()
		if len(h) != 1 {
			t.Fatalf("after renewals and lost rounds: %d terms, want 1: %+v", len(h), h)
		}
		wantTerm(t, "term 1", h[0], 1, a, "")
		if !h[0].AcquiredAt.Equal(l1.AcquiredAt) || h[0].Identity != e.Identity() || h[0].Namespace != ns {
			t.Fatalf("term 1: %+v, want begun at %v by %v", h[0], l1.AcquiredAt, e.Identity())
		}
		must(t, "Resign", e.Resign(ctx, a))
		wantTerm(t, "term 1 after Resign", history()[0], 1, a, election.EndResigned)

		// Term 2: b, until it unregisters.
		wantLease(t, "b", mustElect(t, e, b), ns, b, 2)
		must(t, "UnregisterCandidate", e.UnregisterCandidate(ctx, b))
		wantTerm(t, "term 2", history()[0], 2, b, election.EndUnregistered)

		// Term 3: a on the short window, lapsing; b takes over in term 4.
		l3 := mustElect(t, short, a)
		wantLease(t, "a on the short window", l3, ns, a, 3)
		waitSeatVacant(t, ctx, e)
		wantLease(t, "b after the lapse", mustElect(t, e, b), ns, b, 4)
		h = history()
		wantTerm(t, "term 4", h[0], 4, b, "")
		wantTerm(t, "term 3", h[1], 3, a, election.EndExpired)
		if !h[1].EndedAt.Equal(l3.ExpiresAt) || h[1].Identity.Label != "short" || h[0].Identity.Label != "long" {
			t.Fatalf("term 3 %+v: want ended at its lease's expiry %v, labelled short", h[1], l3.ExpiresAt)
		}

		// An operator vacates term 4: the lease is no longer good.
		l4 := mustLeader(t, e)
		v, err := short.VacateSeat(ctx)
		must(t, "VacateSeat", err)
		if v.Leader != b || v.Term != 4 {
			t.Fatalf("VacateSeat = %+v, want b's term 4", v)
		}
		if err := e.Guard(ctx, l4); !errors.Is(err, election.ErrNotLeader) {
			t.Fatalf("Guard of the vacated lease: %v, want ErrNotLeader", err)
		}
		if l := mustLeader(t, e); !l.Vacant() {
			t.Fatalf("Leader after VacateSeat: %+v", l)
		}
		wantTerm(t, "term 4 after VacateSeat", history()[0], 4, b, election.EndVacated)
		if v, err := short.VacateSeat(ctx); err != nil || !v.Vacant() {
			t.Fatalf("VacateSeat of a vacant seat: %+v, %v", v, err)
		}
		// b's renewal fails; b wins again, in term 5.
		wantLease(t, "b after the vacate", mustElect(t, e, b), ns, b, 5)

		// A grant in the caller's transaction, rolled back: no term 6.
		must(t, "Resign", e.Resign(ctx, b))
		tx := db.Begin()
		must(t, "Begin", tx.Error)
		wantLease(t, "a in a transaction", mustElectTx(t, e, a, tx), ns, a, 6)
		must(t, "Rollback", tx.Rollback().Error)
		h = history()
		if len(h) != 5 || h[0].Term != 5 {
			t.Fatalf("after a rolled-back grant: %+v, want terms 5 to 1", h)
		}
		for i, r := range h {
			if r.Term != int64(5-i) {
				t.Fatalf("history not newest first: %+v", h)
			}
		}
		if h, err := e.History(ctx, 2); err != nil || len(h) != 2 || h[0].Term != 5 || h[1].Term != 4 {
			t.Fatalf("History(2) = %+v, %v", h, err)
		}
		for _, limit := range []int{0, -1} {
			if _, err := e.History(ctx, limit); !errors.Is(err, election.ErrInvalidOption) {
				t.Fatalf("History(%d): %v, want ErrInvalidOption", limit, err)
			}
		}
		// The history through the model agrees.
		var rows []models.Term
		must(t, "reading election_history", db.Where("namespace = ?", ns).Order("term").Find(&rows).Error)
		if len(rows) != 5 || rows[2].EndReason == nil || *rows[2].EndReason != string(election.EndExpired) {
			t.Fatalf("election_history rows: %+v", rows)
		}
	})
}

func mustElectTx(t *testing.T, e *election.Election, id uuid.UUID, tx *gorm.DB) election.Lease {
	t.Helper()
	l, err := e.Elect(testCtx(t), id, election.WithTx(tx))
	must(t, "Elect WithTx", err)
	return l
}

// TestHistoryRetention: Prune deletes the terms that ended longer ago than
// the retention, and keeps the others and the running term.
func TestHistoryRetention(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		ns := testdb.Namespace(t)
		keep := mustElection(t, db, ns)
		e := mustElection(t, db, ns, election.WithHistoryRetention(time.Second))
		a := uuid.New()
		for i := 0; i < 3; i++ {
			mustElect(t, e, a)
			must(t, "Resign", e.Resign(ctx, a))
		}
		if n, err := keep.Prune(ctx); err != nil || n != 0 {
			t.Fatalf("Prune with the default retention: %d, %v; want nothing deleted", n, err)
		}
		time.Sleep(1100 * time.Millisecond)
		mustElect(t, e, a) // term 4, running
		n, err := e.Prune(ctx)
		must(t, "Prune", err)
		if n != 3 {
			t.Fatalf("Prune deleted %d rows, want the 3 ended terms", n)
		}
		h, err := e.History(ctx, 10)
		must(t, "History", err)
		if len(h) != 1 || h[0].Term != 4 || h[0].Ended() {
			t.Fatalf("history after pruning: %+v, want the running term 4", h)
		}
	})
}

// checkHistory cross-checks the history table of ns against what the
// participants of a run recorded: the terms 1 to the leader row's term are
// all there (no gaps), each with the holder the participants saw and the
// start they were told; terms follow each other in time; every term but
// the last has ended; and terms recorded as given up were released.
func checkHistory(t *testing.T, db *gorm.DB, ns string, h electiontest.History) {
	t.Helper()
	e := mustElection(t, db, ns)
	terms, err := e.History(testCtx(t), 1_000_000)
	must(t, "History", err)
	row, ok := leaderRow(t, db, ns)
	if !ok {
		t.Fatal("no leader row")
	}
	if int64(len(terms)) != row.Term {
		t.Errorf("history has %d terms, the leader row is at term %d", len(terms), row.Term)
	}
	byTerm := map[int64]election.TermRecord{}
	for i, r := range terms {
		if want := row.Term - int64(i); r.Term != want {
			t.Fatalf("history[%d] is term %d, want %d (gap or disorder)", i, r.Term, want)
		}
		byTerm[r.Term] = r
		if i > 0 && !r.Ended() {
			t.Errorf("term %d is not recorded as ended, though term %d followed", r.Term, terms[i-1].Term)
		}
		if i > 0 && r.Ended() && terms[i-1].AcquiredAt.Before(r.EndedAt) {
			t.Errorf("term %d began at %v, before term %d ended at %v", terms[i-1].Term, terms[i-1].AcquiredAt, r.Term, r.EndedAt)
		}
	}
	if n := len(terms); n > 0 && terms[0].Ended() != (row.LeaderID == nil) {
		t.Errorf("last term %+v, leader row %+v: ended exactly when the seat is vacant", terms[0], row)
	}
	seen := 0
	for _, rt := range h.Terms {
		if rt.Namespace != ns {
			continue
		}
		seen++
		r, ok := byTerm[rt.Term]
		switch {
		case !ok:
			t.Errorf("term %d was seen held by %v but is not in the history", rt.Term, rt.Holders)
		case len(rt.Holders) != 1 || rt.Holders[0] != r.Leader:
			t.Errorf("term %d: history names %s, participants saw %v", rt.Term, r.Leader, rt.Holders)
		case !rt.AcquiredAt.IsZero() && !rt.AcquiredAt.Equal(r.AcquiredAt):
			t.Errorf("term %d: history says it began at %v, participants were told %v", rt.Term, r.AcquiredAt, rt.AcquiredAt)
		case r.EndReason == election.EndUnregistered && !rt.Released && !releasedBetween(h, ns, r):
			t.Errorf("term %d is recorded as unregistered, but no participant released it", rt.Term)
		}
	}
	if seen != len(terms) {
		t.Errorf("the history has %d terms, the participants saw %d", len(terms), seen)
	}
	t.Logf("history cross-checked: %d terms", len(terms))
}

func releasedBetween(h electiontest.History, ns string, r election.TermRecord) bool {
	for _, rl := range h.Releases {
		if rl.Namespace == ns && rl.Candidate == r.Leader {
			return true
		}
	}
	return false
}

// TestVacateSeatStopsElector: an operator's VacateSeat ends the term of a
// running Elector: it stops leading that term at its next round, and the
// history records the term as vacated.
func TestVacateSeatStopsElector(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		ns := testdb.Namespace(t)
		e := mustElection(t, db, ns, election.WithExpire(2*time.Second), election.WithLogger(newLogTally().logger()))
		var (
			mu      sync.Mutex
			started []election.Lease
			stopped []election.Lease
		)
		el, err := e.NewElector(uuid.New(), election.ElectorConfig{
			Interval: 200 * time.Millisecond,
			OnStartedLeading: func(ctx context.Context, l election.Lease) {
				mu.Lock()
				started = append(started, l)
				mu.Unlock()
				<-ctx.Done()
			},
			OnStoppedLeading: func(l election.Lease) {
				mu.Lock()
				stopped = append(stopped, l)
				mu.Unlock()
			},
		})
		must(t, "NewElector", err)
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		waitFor := func(what string, cond func() bool) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("timed out waiting for %s", what)
				}
			}
		}
		waitFor("leadership", func() bool { mu.Lock(); defer mu.Unlock(); return len(started) == 1 })
		mu.Lock()
		first := started[0]
		mu.Unlock()
		v, err := mustElection(t, db, ns).VacateSeat(ctx)
		must(t, "VacateSeat", err)
		if v.Leader != el.ID() || v.Term != first.Term {
			t.Fatalf("VacateSeat = %+v, want the Elector's term %d", v, first.Term)
		}
		waitFor("the old term to stop", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(stopped) >= 1 && stopped[0].Term == first.Term
		})
		h, err := e.History(ctx, 10)
		must(t, "History", err)
		var found bool
		for _, r := range h {
			if r.Term == first.Term {
				found = true
				wantTerm(t, "the vacated term", r, first.Term, el.ID(), election.EndVacated)
			}
		}
		if !found {
			t.Fatalf("term %d not in the history %+v", first.Term, h)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if h, err := e.History(context.Background(), 1); err != nil || len(h) != 1 || (h[0].Term > first.Term && h[0].EndReason != election.EndUnregistered) {
			t.Fatalf("last term after Run returned: %+v, %v; want it unregistered", h, err)
		}
	})
}

// TestListNamespaces: ListNamespaces lists, sorted, each namespace with a candidate
// row or a leader row, whatever namespace the Election is bound to, and not
// a namespace nobody joined.
func TestListNamespaces(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		base := testdb.Namespace(t)
		led, joined, unused := base+".b-led", base+".a-joined", base+".c-unused"
		mustElect(t, mustElection(t, db, led), uuid.New())
		must(t, "RegisterCandidate", mustElection(t, db, joined).RegisterCandidate(ctx, uuid.New()))
		got, err := mustElection(t, db, unused).ListNamespaces(ctx)
		must(t, "Namespaces", err)
		var ours []string
		for i, ns := range got {
			if i > 0 && got[i-1] >= ns {
				t.Fatalf("Namespaces not sorted and distinct: %q after %q", ns, got[i-1])
			}
			if strings.HasPrefix(ns, base+".") {
				ours = append(ours, ns)
			}
		}
		if len(ours) != 2 || ours[0] != joined || ours[1] != led {
			t.Fatalf("Namespaces listed %q of this test's, want [%s %s]", ours, joined, led)
		}
	})
}
