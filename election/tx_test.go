package election_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/models"
	"github.com/sqlelect/sqlelect/session"
)

// txKind begins a caller's transaction one way or another and returns a
// handle for WithTx with its commit and rollback.
type txKind struct {
	name  string
	begin func(t *testing.T, db *gorm.DB) (h *gorm.DB, commit, rollback func() error)
}

var txKinds = []txKind{
	{"gorm", func(t *testing.T, db *gorm.DB) (*gorm.DB, func() error, func() error) {
		tx := db.Begin()
		if tx.Error != nil {
			t.Fatalf("Begin: %v", tx.Error)
		}
		return tx, func() error { return tx.Commit().Error }, func() error { return tx.Rollback().Error }
	}},
	{"sql.Tx", func(t *testing.T, db *gorm.DB) (*gorm.DB, func() error, func() error) {
		tx, err := testdb.Raw(t, db).BeginTx(context.Background(), nil)
		if err != nil {
			t.Fatalf("BeginTx: %v", err)
		}
		h, err := session.FromTx(db, tx)
		if err != nil {
			t.Fatalf("FromTx: %v", err)
		}
		return h, tx.Commit, tx.Rollback
	}},
}

// TestWithTx shows that calls made WithTx run in the caller's transaction:
// its rollback undoes them, its commit keeps them, and the library commits
// nothing itself.
func TestWithTx(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		for _, k := range txKinds {
			t.Run(k.name, func(t *testing.T) {
				t.Run("Elect", func(t *testing.T) { txElect(t, db, k) })
				t.Run("UnregisterResign", func(t *testing.T) { txUnregisterResign(t, db, k) })
			})
		}
		t.Run("gorm.Transaction", func(t *testing.T) { txCallback(t, db) })
		t.Run("NotATransaction", func(t *testing.T) { txInvalid(t, db) })
	})
}

func txElect(t *testing.T, db *gorm.DB, k txKind) {
	ctx := testCtx(t)
	for _, outcome := range []string{"rollback", "commit"} {
		ns := testdb.Namespace(t) + "." + outcome
		e := mustElection(t, db, ns)
		a, b := uuid.New(), uuid.New()
		tx, commit, rollback := k.begin(t, db)
		la, err := e.Elect(ctx, a, election.WithTx(tx))
		must(t, "Elect WithTx", err)
		wantLease(t, "Elect WithTx", la, ns, a, 1)
		must(t, "RegisterCandidate WithTx", e.RegisterCandidate(ctx, b, election.WithTx(tx)))
		// A renewal in the same transaction takes the one-statement path.
		la2, err := e.Elect(ctx, a, election.WithTx(tx))
		must(t, "renewing Elect WithTx", err)
		wantLease(t, "renewing Elect WithTx", la2, ns, a, 1)

		// Nothing is committed: other connections see nothing.
		if l := mustLeader(t, e); !l.Vacant() {
			t.Fatalf("another connection sees the uncommitted lease %+v", l)
		}
		if ids := mustList(t, e); len(ids) != 0 {
			t.Fatalf("another connection sees uncommitted candidates %v", ids)
		}
		// The transaction is still usable and sees its own writes.
		var n int64
		must(t, "counting in the transaction", tx.Model(&models.Candidate{}).Where("namespace = ?", ns).Count(&n).Error)
		if n != 2 {
			t.Fatalf("the transaction sees %d candidate rows, want 2", n)
		}
		inside, err := e.Leader(ctx, election.WithTx(tx))
		must(t, "Leader WithTx", err)
		sameLease(t, "Leader WithTx", inside, la2)
		must(t, "Guard WithTx", e.Guard(ctx, la2, election.WithTx(tx)))

		if outcome == "rollback" {
			must(t, "rollback", rollback())
			if l := mustLeader(t, e); !l.Vacant() {
				t.Fatalf("Leader after rollback: %+v, want vacant", l)
			}
			if ids := mustList(t, e); len(ids) != 0 {
				t.Fatalf("candidates after rollback: %v", ids)
			}
			if _, ok := leaderRow(t, db, ns); ok {
				t.Fatal("the leader row survived the rollback")
			}
			// The rolled-back lease is not renewed from memory.
			lb := mustElect(t, e, b)
			wantLease(t, "Elect after rollback", lb, ns, b, 1)
			sameLease(t, "a after rollback", mustElect(t, e, a), lb)
			continue
		}
		must(t, "commit", commit())
		sameLease(t, "Leader after commit", mustLeader(t, e), la2)
		if got, want := mustList(t, e), sortedIDs(a, b); !cmp.Equal(got, want) {
			t.Fatalf("candidates after commit: %v, want %v", got, want)
		}
		// The committed lease renews outside the transaction.
		if l := mustElect(t, e, a); l.Leader != a || l.Term != 1 {
			t.Fatalf("renewal after commit: %+v", l)
		}
	}
}

func txUnregisterResign(t *testing.T, db *gorm.DB, k txKind) {
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	e := mustElection(t, db, ns)
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)
	must(t, "RegisterCandidate", e.RegisterCandidate(ctx, b))
	all := sortedIDs(a, b)

	// Undone by rollback.
	for _, call := range []struct {
		name string
		fn   func(tx *gorm.DB) error
	}{
		{"UnregisterCandidate", func(tx *gorm.DB) error { return e.UnregisterCandidate(ctx, a, election.WithTx(tx)) }},
		{"Resign", func(tx *gorm.DB) error { return e.Resign(ctx, a, election.WithTx(tx)) }},
		{"UnregisterCandidate of a non-leader", func(tx *gorm.DB) error { return e.UnregisterCandidate(ctx, b, election.WithTx(tx)) }},
	} {
		tx, _, rollback := k.begin(t, db)
		must(t, call.name+" WithTx", call.fn(tx))
		// Other connections still see the old state until the end.
		sameLease(t, "Leader during "+call.name, mustLeader(t, e), la)
		if got := mustList(t, e); !cmp.Equal(got, all) {
			t.Fatalf("candidates during %s: %v, want %v", call.name, got, all)
		}
		must(t, "rollback", rollback())
		sameLease(t, "Leader after rolling back "+call.name, mustLeader(t, e), la)
		if got := mustList(t, e); !cmp.Equal(got, all) {
			t.Fatalf("candidates after rolling back %s: %v, want %v", call.name, got, all)
		}
	}

	// Kept by commit.
	tx, commit, _ := k.begin(t, db)
	must(t, "Resign WithTx", e.Resign(ctx, a, election.WithTx(tx)))
	if l, err := e.Leader(ctx, election.WithTx(tx)); err != nil || !l.Vacant() {
		t.Fatalf("Leader inside the transaction after Resign: %+v, %v", l, err)
	}
	must(t, "commit", commit())
	if l := mustLeader(t, e); !l.Vacant() {
		t.Fatalf("Leader after committing Resign: %+v", l)
	}
	lb := mustElect(t, e, b)
	wantLease(t, "b after a resigned", lb, ns, b, la.Term+1)

	tx, commit, _ = k.begin(t, db)
	must(t, "UnregisterCandidate WithTx", e.UnregisterCandidate(ctx, b, election.WithTx(tx)))
	must(t, "commit", commit())
	if l := mustLeader(t, e); !l.Vacant() {
		t.Fatalf("Leader after committing UnregisterCandidate: %+v", l)
	}
	if got := mustList(t, e); !cmp.Equal(got, []uuid.UUID{a}) {
		t.Fatalf("candidates after committing UnregisterCandidate: %v", got)
	}
}

// txCallback runs Elect inside gorm's own Transaction helper.
func txCallback(t *testing.T, db *gorm.DB) {
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	e := mustElection(t, db, ns)
	a := uuid.New()
	boom := errors.New("boom")
	err := db.Transaction(func(tx *gorm.DB) error {
		if _, err := e.Elect(ctx, a, election.WithTx(tx)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Transaction returned %v, want the callback's error", err)
	}
	if l := mustLeader(t, e); !l.Vacant() {
		t.Fatalf("Leader after the callback failed: %+v", l)
	}
	var la election.Lease
	must(t, "Transaction", db.Transaction(func(tx *gorm.DB) error {
		var err error
		la, err = e.Elect(ctx, a, election.WithTx(tx))
		return err
	}))
	sameLease(t, "Leader after the callback committed", mustLeader(t, e), la)
}

func txInvalid(t *testing.T, db *gorm.DB) {
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	e := mustElection(t, db, ns)
	a := uuid.New()
	lease := election.Lease{Namespace: ns, Leader: a, Term: 1, ExpiresAt: time.Now().Add(time.Hour)}
	for _, opt := range []struct {
		name string
		o    election.CallOption
	}{
		{"WithTx(nil)", election.WithTx(nil)},
		{"WithTx(database handle)", election.WithTx(db)},
		{"WithTx(session handle)", election.WithTx(db.Session(&gorm.Session{}))},
	} {
		calls := map[string]error{}
		calls["RegisterCandidate"] = e.RegisterCandidate(ctx, a, opt.o)
		calls["Heartbeat"] = e.Heartbeat(ctx, a, opt.o)
		_, calls["Elect"] = e.Elect(ctx, a, opt.o)
		_, calls["IsLeader"] = e.IsLeader(ctx, a, opt.o)
		_, calls["Leader"] = e.Leader(ctx, opt.o)
		_, calls["ListCandidates"] = e.ListCandidates(ctx, opt.o)
		calls["UnregisterCandidate"] = e.UnregisterCandidate(ctx, a, opt.o)
		calls["Resign"] = e.Resign(ctx, a, opt.o)
		calls["Guard"] = e.Guard(ctx, lease, opt.o)
		_, calls["Prune"] = e.Prune(ctx, opt.o)
		for name, err := range calls {
			if !errors.Is(err, election.ErrInvalidOption) {
				t.Errorf("%s with %s: got %v, want ErrInvalidOption", name, opt.name, err)
			}
		}
	}
	if rows := candidateRows(t, db, ns); len(rows) != 0 {
		t.Fatalf("refused calls wrote candidate rows: %v", rows)
	}
	if _, ok := leaderRow(t, db, ns); ok {
		t.Fatal("refused calls wrote a leader row")
	}
}

// TestGuardHoldsLeaderRow shows that Guard WithTx keeps the seat: after the
// guarded lease expires, another candidate's takeover does not complete
// until the guarding transaction ends.
func TestGuardHoldsLeaderRow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		ns := testdb.Namespace(t)
		const window = 600 * time.Millisecond
		e := mustElection(t, db, ns, election.WithExpire(window))
		taker := mustElection(t, db, ns, election.WithExpire(window))
		a, b := uuid.New(), uuid.New()
		la := mustElect(t, e, a)

		tx := db.Begin()
		must(t, "Begin", tx.Error)
		defer tx.Rollback()
		txConn := backendID(t, tx)
		must(t, "Guard WithTx", e.Guard(ctx, la, election.WithTx(tx)))
		// A leader-only write in the guarded transaction.
		must(t, "Heartbeat WithTx", e.Heartbeat(ctx, a, election.WithTx(tx)))

		// The lease expires while the transaction is open.
		waitSeatVacant(t, ctx, e)

		var committed atomic.Bool
		type result struct {
			lease          election.Lease
			err            error
			afterCommitted bool
		}
		done := make(chan result, 1)
		go func() {
			l, err := taker.Elect(ctx, b)
			done <- result{l, err, committed.Load()}
		}()
		// Wait until the database shows the takeover waiting for the
		// guarding transaction (where it can tell), then give it a moment
		// more in which it must not finish.
		waitBlockedBy(t, db, txConn, ns, func() string {
			select {
			case r := <-done:
				return fmt.Sprintf("the takeover returned %+v, %v", r.lease, r.err)
			default:
				return "the takeover is still running"
			}
		})
		select {
		case r := <-done:
			t.Fatalf("the takeover finished while the guarding transaction was open: %+v, %v", r.lease, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		committed.Store(true)
		must(t, "Commit", tx.Commit().Error)
		r := <-done
		must(t, "takeover Elect", r.err)
		if !r.afterCommitted {
			t.Fatal("the takeover returned before the guarding transaction committed")
		}
		wantLease(t, "takeover", r.lease, ns, b, la.Term+1)
		if r.lease.AcquiredAt.Before(la.ExpiresAt) {
			t.Fatalf("takeover at %v, before the guarded lease expired at %v", r.lease.AcquiredAt, la.ExpiresAt)
		}
	})
}

// backendID names the database session of tx: PostgreSQL's backend pid or
// MySQL's connection id; 0 on SQLite, where there is none to name.
func backendID(t *testing.T, tx *gorm.DB) int64 {
	t.Helper()
	var q string
	switch tx.Dialector.Name() {
	case "postgres":
		q = "SELECT pg_backend_pid()"
	case "mysql":
		q = "SELECT CONNECTION_ID()"
	default:
		return 0
	}
	var id int64
	must(t, "reading the session id", tx.Raw(q).Row().Scan(&id))
	return id
}

// waitBlockedBy waits until the database shows a statement on namespace ns
// waiting: on PostgreSQL one blocked by session id, on MySQL a locking read
// of ns still running (InnoDB reports a lock wait on a primary-key lookup
// only in the statement's state, not in innodb_lock_waits). On SQLite, whose
// lock waits cannot be seen, it returns at once.
func waitBlockedBy(t *testing.T, db *gorm.DB, id int64, ns string, state func() string) {
	t.Helper()
	var (
		q    string
		args []any
	)
	switch db.Dialector.Name() {
	case "postgres":
		q, args = "SELECT COUNT(*) FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))", []any{id}
	case "mysql":
		q, args = "SELECT COUNT(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND INSTR(info, 'FOR UPDATE') > 0 AND INSTR(info, ?) > 0", []any{ns}
	default:
		return
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int64
		if err := db.Raw(q, args...).Row().Scan(&n); err != nil {
			t.Fatalf("looking for lock waits: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the takeover never waited for the guarding transaction: %s", state())
		}
	}
}

// TestGuardSQLiteStaleWrite shows the SQLite form of fencing: a leader that
// checked its lease with Guard in a transaction, and then lost the seat to
// another candidate, cannot commit a write in that transaction.
func TestGuardSQLiteStaleWrite(t *testing.T) {
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "fence.db")
	db := testdb.OpenDSN(t, "sqlite:"+path)
	must(t, "migrate.Up", migrate.Up(ctx, db))
	must(t, "creating the work table", db.Exec("CREATE TABLE leader_work (term INTEGER NOT NULL)").Error)
	// Deferred transactions: the stale leader's transaction reads first and
	// writes later, the case where SQLite can refuse the write.
	deferred := testdb.OpenDSN(t, "sqlite:"+path+"?_txlock=deferred").Session(&gorm.Session{Logger: logger.Discard})

	ns := "fence"
	e := mustElection(t, db, ns, election.WithExpire(shortExpire))
	a, b := uuid.New(), uuid.New()
	la := mustElect(t, e, a)

	tx := deferred.Begin()
	must(t, "Begin", tx.Error)
	must(t, "Guard WithTx", e.Guard(ctx, la, election.WithTx(tx)))
	waitSeatVacant(t, ctx, e)
	lb := mustElect(t, e, b)
	wantLease(t, "takeover", lb, ns, b, la.Term+1)
	werr := tx.Exec("INSERT INTO leader_work (term) VALUES (?)", la.Term).Error
	if werr == nil {
		werr = tx.Commit().Error
	} else {
		tx.Rollback()
	}
	if werr == nil {
		t.Fatal("the stale leader committed a write after the takeover")
	}
	t.Logf("the stale leader's write failed as it should: %v", werr)

	// The current leader's guarded write commits.
	tx = deferred.Begin()
	must(t, "Guard WithTx", e.Guard(ctx, lb, election.WithTx(tx)))
	must(t, "leader write", tx.Exec("INSERT INTO leader_work (term) VALUES (?)", lb.Term).Error)
	must(t, "Commit", tx.Commit().Error)
	var terms []int64
	must(t, "reading the work table", db.Raw("SELECT term FROM leader_work").Scan(&terms).Error)
	if !cmp.Equal(terms, []int64{lb.Term}) {
		t.Fatalf("leader_work holds terms %v, want only %d", terms, lb.Term)
	}
	// A stale Guard in a fresh transaction refuses up front.
	tx = deferred.Begin()
	defer tx.Rollback()
	wantNotLeader(t, "stale Guard WithTx", e.Guard(ctx, la, election.WithTx(tx)))
}
