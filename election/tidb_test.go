package election_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/models"
	"github.com/sqlelect/sqlelect/session"
)

// expectTiDBEnv, set by internal/ci/tidb.sh, says that the mysql target is
// a TiDB: the TiDB tests then fail, rather than skip, when it is not one.
const expectTiDBEnv = "SQLELECT_EXPECT_TIDB"

// isTiDB reports whether db reaches TiDB, as an Election tells it.
func isTiDB(t *testing.T, db *gorm.DB) bool {
	t.Helper()
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	if d, err = dialect.Detect(testCtx(t), db, d); err != nil {
		t.Fatal(err)
	}
	return dialect.TiDB(d)
}

// tidbTarget returns the mysql target when it is a TiDB, and a migrated
// handle on it. Otherwise it skips, or fails when expectTiDBEnv is set.
func tidbTarget(t *testing.T) (testdb.Target, *gorm.DB) {
	t.Helper()
	expect := os.Getenv(expectTiDBEnv) != ""
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "mysql" {
			continue
		}
		db := testdb.Open(t, tg)
		if isTiDB(t, db) {
			var version string
			must(t, "SELECT VERSION()", db.Raw("SELECT VERSION()").Row().Scan(&version))
			t.Logf("TiDB, VERSION() %q", version)
			return tg, db
		}
		if expect {
			t.Fatalf("%s is set, but the mysql target is not a TiDB", expectTiDBEnv)
		}
		t.Skip("the mysql target is not a TiDB")
	}
	if expect {
		t.Fatalf("%s is set, but no mysql target is configured", expectTiDBEnv)
	}
	t.Skip("no mysql target")
	return testdb.Target{}, nil
}

// oneConn opens dsn as a pool of one connection and runs set on it, so that
// session settings stay.
func oneConn(t *testing.T, dsn, set string) *gorm.DB {
	t.Helper()
	db := testdb.OpenDSN(t, dsn)
	testdb.Raw(t, db).SetMaxOpenConns(1)
	must(t, set, db.Exec(set).Error)
	return db
}

// TestTiDB: a candidate row's times come from one reading of the clock
// (TiDB evaluates a derived table once per use unless it is LIMIT 1), and
// a first Elect grants term 1.
func TestTiDB(t *testing.T) {
	_, db := tidbTarget(t)
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	const window = 3 * time.Second
	e := mustElection(t, db, ns, election.WithExpire(window))
	id := uuid.New()
	must(t, "RegisterCandidate", e.RegisterCandidate(ctx, id))
	var c models.Candidate
	must(t, "read the row", db.Where("namespace = ? AND candidate_id = ?", ns, id).Take(&c).Error)
	if got := c.ExpiresAt.Sub(c.LastHeartbeatAt); got != window {
		t.Errorf("expires_at - last_heartbeat_at = %v, want %v (one reading of the clock)", got, window)
	}
	if !c.RegisteredAt.Equal(c.LastHeartbeatAt) {
		t.Errorf("registered_at %v, last_heartbeat_at %v: want one reading", c.RegisteredAt, c.LastHeartbeatAt)
	}
	l := mustElect(t, e, id)
	if !l.HeldBy(id) || l.Term != 1 {
		t.Errorf("Elect on a free seat: %+v", l)
	}
}

// TestTiDBRefusesUnsafeSettings: New refuses, with ErrUnsafeDatabase and a
// message naming the setting, a TiDB session in optimistic transaction
// mode (FOR UPDATE blocks nobody there, and the seat would be decided at
// commit) or with tidb_sysdate_is_now on (SYSDATE() would be the time the
// statement started, stale after a wait for the seat's lock).
func TestTiDBRefusesUnsafeSettings(t *testing.T) {
	tg, _ := tidbTarget(t)
	for _, c := range []struct{ set, setting string }{
		{"SET SESSION tidb_txn_mode = 'optimistic'", "tidb_txn_mode"},
		{"SET SESSION tidb_sysdate_is_now = ON", "tidb_sysdate_is_now"},
	} {
		t.Run(c.setting, func(t *testing.T) {
			db := oneConn(t, tg.DSN, c.set)
			_, err := election.New(db, election.WithNamespace(testdb.Namespace(t)))
			if !errors.Is(err, election.ErrUnsafeDatabase) || !strings.Contains(err.Error(), c.setting) {
				t.Errorf("New after %s: %v, want ErrUnsafeDatabase naming %s", c.set, err, c.setting)
			}
		})
	}
}

// TestTiDBNoopFunctionsGuardStillLocks: tidb_enable_noop_functions turns a
// shared lock into a no-op, and New accepts a session with it on, because
// Guard takes FOR UPDATE on TiDB: a guarded transaction still holds the
// seat, and a vacancy waits for it to end.
func TestTiDBNoopFunctionsGuardStillLocks(t *testing.T) {
	tg, db := tidbTarget(t)
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	noop := oneConn(t, tg.DSN, "SET SESSION tidb_enable_noop_functions = ON")
	g, err := election.New(noop, election.WithNamespace(ns))
	if err != nil {
		t.Fatalf("New with tidb_enable_noop_functions on: %v", err)
	}
	id := uuid.New()
	l := mustElect(t, g, id)
	other := mustElection(t, db, ns)

	tx := noop.Begin()
	must(t, "BEGIN", tx.Error)
	defer tx.Rollback()
	must(t, "Guard", g.Guard(ctx, l, election.WithTx(tx)))
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = other.Resign(short, id)
	cancel()
	if err == nil {
		t.Fatal("Resign through another pool went through while a guarded transaction held the seat")
	}
	must(t, "COMMIT", tx.Commit().Error)
	must(t, "Resign after the guarded transaction", other.Resign(ctx, id))
}

// TestTiDBPinsPessimistic: session.Open makes its sessions pessimistic even
// where the server's default is optimistic, and New accepts them. It
// changes the global default of the TiDB it runs on for a moment, and puts
// it back.
func TestTiDBPinsPessimistic(t *testing.T) {
	tg, db := tidbTarget(t)
	ctx := testCtx(t)
	var was string
	must(t, "read the global mode", db.Raw("SELECT @@GLOBAL.tidb_txn_mode").Row().Scan(&was))
	must(t, "SET GLOBAL", db.Exec("SET GLOBAL tidb_txn_mode = 'optimistic'").Error)
	defer func() {
		must(t, "restore the global mode", db.Exec("SET GLOBAL tidb_txn_mode = ?", was).Error)
	}()

	// A connection that is not made by session.Open now runs optimistic
	// transactions.
	raw, err := sql.Open("mysql", strings.TrimPrefix(tg.DSN, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var mode string
	if err := raw.QueryRowContext(ctx, "SELECT @@SESSION.tidb_txn_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "optimistic" {
		t.Fatalf("a plain connection runs %q transactions after SET GLOBAL, want optimistic", mode)
	}

	opened, err := session.Open(tg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer testdb.Close(opened)
	must(t, "read the session mode", opened.Raw("SELECT @@SESSION.tidb_txn_mode").Row().Scan(&mode))
	if mode != "pessimistic" {
		t.Errorf("session.Open's connection runs %q transactions, want pessimistic", mode)
	}
	if _, err := election.New(opened, election.WithNamespace(testdb.Namespace(t))); err != nil {
		t.Errorf("New on session.Open's handle: %v", err)
	}
}

// TestMySQLRenewalOneClockReading: the one-statement renewal writes the
// lease's end, the seat's updated_at and the candidate row's times from one
// reading of the clock, on MySQL, MariaDB and TiDB. (It fails when a column
// reads SYSDATE(6) afresh; the derived table carries LIMIT 1 because TiDB
// evaluates some derived tables once per use, though the pinned version
// evaluates this one once either way.)
func TestMySQLRenewalOneClockReading(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "mysql" {
			continue
		}
		db := testdb.Open(t, tg)
		ctx := testCtx(t)
		ns := testdb.Namespace(t)
		const window = 3 * time.Second
		e := mustElection(t, db, ns, election.WithExpire(window))
		id := uuid.New()
		first := mustElect(t, e, id)
		for range 3 {
			l := mustElect(t, e, id)
			if !l.HeldBy(id) || l.Term != first.Term {
				t.Fatalf("renewal: %+v after %+v", l, first)
			}
		}
		var (
			seat models.Leader
			c    models.Candidate
		)
		must(t, "read the seat", db.WithContext(ctx).Where("namespace = ?", ns).Take(&seat).Error)
		must(t, "read the candidate", db.WithContext(ctx).Where("namespace = ? AND candidate_id = ?", ns, id).Take(&c).Error)
		if seat.LeaseExpiresAt == nil {
			t.Fatal("the seat has no lease")
		}
		if got := seat.LeaseExpiresAt.Sub(seat.UpdatedAt); got != window {
			t.Errorf("lease_expires_at - updated_at = %v, want %v", got, window)
		}
		if !c.LastHeartbeatAt.Equal(seat.UpdatedAt) {
			t.Errorf("the candidate's last_heartbeat_at %v, the seat's updated_at %v: want one reading", c.LastHeartbeatAt, seat.UpdatedAt)
		}
		if got := c.ExpiresAt.Sub(c.LastHeartbeatAt); got != window {
			t.Errorf("expires_at - last_heartbeat_at = %v, want %v", got, window)
		}
	}
}
