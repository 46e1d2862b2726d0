package election_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// inTransaction reports whether the one connection of db's pool is inside
// a transaction: MariaDB says so, SQLite refuses to begin another.
func inTransaction(t *testing.T, db *gorm.DB) bool {
	t.Helper()
	ctx := testCtx(t)
	conn, err := testdb.Raw(t, db).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if db.Dialector.Name() == "mysql" {
		var in int
		if err := conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil {
			t.Fatal(err)
		}
		return in != 0
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		if strings.Contains(err.Error(), "within a transaction") {
			return true
		}
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	return false
}

// refuseHistory makes the database refuse, with an error, the given write
// ("INSERT" or "UPDATE") of the history rows of namespace ns, until the
// test ends.
func refuseHistory(t *testing.T, db *gorm.DB, write, ns string) {
	t.Helper()
	name := "sqlelect_refuse_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	var create string
	switch db.Dialector.Name() {
	case "mysql":
		create = fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON election_history FOR EACH ROW BEGIN "+
			"IF NEW.namespace = '%s' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END", name, write, ns)
	default:
		create = fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON election_history WHEN NEW.namespace = '%s' "+
			"BEGIN SELECT RAISE(ABORT, 'refused by the test'); END", name, write, ns)
	}
	if err := db.Exec(create).Error; err != nil {
		t.Fatalf("creating the trigger: %v", err)
	}
	t.Cleanup(func() { db.Exec("DROP TRIGGER " + name) })
}

// TestFastPathRollsBack: where Elect and the vacating calls hold their
// transaction in one call (MariaDB's compound statements, SQLite's call
// from BEGIN IMMEDIATE to COMMIT), a write that fails midway leaves
// nothing written and the pool's connection outside any transaction: a
// grant whose history row is refused creates no seat, a Resign whose
// term's end is refused leaves the seat held, and the next call on the
// same connection works and commits.
func TestFastPathRollsBack(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "postgres" {
			continue // one statement: nothing to roll back by hand
		}
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db, _, dsn := openCountedDSN(t, tg)
			if !fastPath(t, db) {
				t.Skip("MySQL and TiDB keep their transactions")
			}
			other := testdb.OpenDSN(t, dsn)
			ns := testdb.Namespace(t)
			e := mustElection(t, db, ns)
			id := uuid.New()

			refuseHistory(t, other, "INSERT", ns)
			if l, err := e.Elect(ctx, id); err == nil {
				t.Fatalf("Elect with its history row refused gave %+v, want the error", l)
			} else if !strings.Contains(err.Error(), "refused by the test") {
				t.Fatalf("Elect: %v, want the trigger's error", err)
			}
			if inTransaction(t, db) {
				t.Fatal("the failed Elect left its connection inside a transaction")
			}
			var seats int64
			if err := other.Raw("SELECT COUNT(*) FROM election_leaders WHERE namespace = ?", ns).Scan(&seats).Error; err != nil || seats != 0 {
				t.Fatalf("%d seat rows after the failed Elect (%v), want none: the grant was not rolled back", seats, err)
			}

			// The same connection takes another namespace, and commits it.
			l := mustElect(t, mustElection(t, db, ns+".next"), id)
			if got, err := mustElection(t, other, ns+".next").Leader(ctx); err != nil || got.Leader != id || got.Term != l.Term {
				t.Fatalf("another pool reads %+v, %v; want the lease %+v committed", got, err, l)
			}

			// A Resign whose term's end is refused leaves the seat held.
			refuseHistory(t, other, "UPDATE", ns+".next")
			if err := mustElection(t, db, ns+".next").Resign(ctx, id); err == nil || !strings.Contains(err.Error(), "refused by the test") {
				t.Fatalf("Resign with its history refused: %v, want the trigger's error", err)
			}
			if inTransaction(t, db) {
				t.Fatal("the failed Resign left its connection inside a transaction")
			}
			if got, err := mustElection(t, other, ns+".next").Leader(ctx); err != nil || got.Leader != id {
				t.Fatalf("after the failed Resign another pool reads %+v, %v; want %s still leading", got, err, id)
			}
		})
	}
}

// TestSQLiteSeatChangedBeforeWrite: SQLite's Elect reads the seat, then
// writes under the database's write lock, guarded by that reading. When
// another process changes the seat in between (takes the free seat, takes
// the lapsed lease, creates the namespace's row), nothing is granted on
// the old reading: Elect decides on the seat as it is, here another
// candidate's live lease, and the history holds that candidate's term
// alone.
func TestSQLiteSeatChangedBeforeWrite(t *testing.T) {
	tg := testdb.Only(t, "sqlite")
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, e *election.Election) // leaves the seat free
	}{
		{"new namespace", func(*testing.T, *election.Election) {}},
		{"vacant seat", func(t *testing.T, e *election.Election) {
			id := uuid.New()
			mustElect(t, e, id)
			if err := e.Resign(testCtx(t), id); err != nil {
				t.Fatal(err)
			}
		}},
		{"lapsed lease", func(t *testing.T, e *election.Election) {
			mustElect(t, e, uuid.New())
			waitSeatVacant(t, testCtx(t), e)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			db, counter, dsn := openCountedDSN(t, tg)
			if !fastPath(t, db) {
				t.Fatal("no fast path on SQLite")
			}
			ns := testdb.Namespace(t)
			otherDB := testdb.OpenDSN(t, dsn)
			other := mustElection(t, otherDB, ns, election.WithExpire(shortExpire))
			c.setup(t, other)
			before, _ := other.History(ctx, 10)

			// Between Elect's reading and its write, another candidate, on
			// a pool of its own, takes the seat.
			rival := uuid.New()
			var (
				once  sync.Once
				taken election.Lease
			)
			counter.Before = func(k rtcount.Kind, q string) {
				if k == rtcount.Exec && strings.HasPrefix(q, "BEGIN IMMEDIATE") {
					once.Do(func() {
						taken = mustElect(t, mustElection(t, otherDB, ns), rival)
					})
				}
			}
			e := mustElection(t, db, ns)
			id := uuid.New()
			l := mustElect(t, e, id)
			counter.Before = nil
			if !taken.HeldBy(rival) {
				t.Fatalf("the rival's Elect gave %+v; the test did not run between the reading and the write", taken)
			}
			if !l.HeldBy(rival) || l.Term != taken.Term {
				t.Fatalf("Elect gave %+v, want the rival's lease %+v", l, taken)
			}
			after, err := other.History(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before)+1 || after[0].Leader != rival || after[0].Term != taken.Term || after[0].Ended() {
				t.Fatalf("history %+v after %+v, want one term more, the rival's, open", after, before)
			}
			ids, err := e.ListCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range ids {
				found = found || c == id
			}
			if !found {
				t.Errorf("the candidate's row was not written: live candidates %v", ids)
			}
			if inTransaction(t, db) {
				t.Fatal("Elect left its connection inside a transaction")
			}
		})
	}
}
