package dialect_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	drv "github.com/go-sql-driver/mysql"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestMySQLClassifyTiDB: TiDB's retryable errors are contention (a
// transaction to retry, 8022; a schema change during the statement, 8028;
// its storage layer busy, timing out or unreachable, 9001–9006; a write
// conflict, 9007), as MySQL's deadlock and lock wait timeout are.
func TestMySQLClassifyTiDB(t *testing.T) {
	d := dialect.MySQLForTest(true)
	for _, n := range []uint16{8022, 8028, 9001, 9002, 9003, 9004, 9005, 9006, 9007, 1213, 1205} {
		if got := d.Classify(&drv.MySQLError{Number: n}); got != dialect.Transient {
			t.Errorf("error %d: class %v, want Transient", n, got)
		}
	}
	for _, n := range []uint16{8000, 9000, 9008, 1062} {
		if got := d.Classify(&drv.MySQLError{Number: n}); got == dialect.Transient {
			t.Errorf("error %d: Transient, want another class", n)
		}
	}
}

// TestTiDBWriteConflictIsTransient: on TiDB, of two optimistic
// transactions writing one row, the second to commit fails with TiDB's
// write conflict, which Classify calls Transient.
func TestTiDBWriteConflictIsTransient(t *testing.T) {
	tg := mysqlTarget(t)
	dsn, _ := testdb.Shared(t, tg)
	_, db, d, _ := mysqlNotifier(t, dsn)
	if !dialect.TiDB(d) {
		t.Skip("not TiDB")
	}
	ctx := context.Background()
	ns := testdb.Namespace(t)
	if _, err := db.ExecContext(ctx, "INSERT INTO election_leaders (namespace, term, updated_at) VALUES (?, 0, SYSDATE(6))", ns); err != nil {
		t.Fatal(err)
	}
	var conns [2]*sql.Conn
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	exec := func(c *sql.Conn, q string, args ...any) error {
		_, err := c.ExecContext(ctx, q, args...)
		return err
	}
	for _, c := range conns {
		if err := exec(c, "BEGIN OPTIMISTIC"); err != nil {
			t.Fatal(err)
		}
		if err := exec(c, "UPDATE election_leaders SET term = term + 1 WHERE namespace = ?", ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := exec(conns[0], "COMMIT"); err != nil {
		t.Fatalf("the first commit: %v", err)
	}
	err := exec(conns[1], "COMMIT")
	var me *drv.MySQLError
	if !errors.As(err, &me) || me.Number != 9007 {
		t.Fatalf("the second commit: %v, want TiDB's write conflict (9007)", err)
	}
	if got := d.Classify(err); got != dialect.Transient {
		t.Errorf("Classify(%v) = %v, want Transient", err, got)
	}
}
