package stmtcache

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

func open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE t (v INTEGER)"); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestShared: the users of a pool share its cache; statements run on the
// pool are prepared once; the last Release closes them, and the next user
// gets a new cache.
func TestShared(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	a, b := Shared(db), Shared(db)
	if a != b {
		t.Fatal("two users of one pool got two caches")
	}
	for i := range 3 {
		if _, err := a.Conn(nil).ExecContext(ctx, "INSERT INTO t (v) VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := b.Conn(nil).QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 3 {
		t.Fatalf("count: %d, %v", n, err)
	}
	if got := a.Len(); got != 2 {
		t.Fatalf("%d statements prepared, want 2 (one per query)", got)
	}
	a.Release()
	if got := b.Len(); got != 2 {
		t.Fatalf("after one Release: %d statements, want 2", got)
	}
	b.Release()
	if got := b.Len(); got != 0 {
		t.Fatalf("after the last Release: %d statements, want 0", got)
	}
	if c := Shared(db); c == b {
		t.Fatal("a released cache was handed out again")
	} else {
		c.Release()
	}
}

// TestInTransaction: in a transaction, a cached statement runs in it and
// an uncached one runs there unprepared (preparing needs a second
// connection, which a pool of one never gives); an error comes back the
// usual way.
func TestInTransaction(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	db.SetMaxOpenConns(1)
	c := Shared(db)
	defer c.Release()
	if _, err := c.Conn(nil).ExecContext(ctx, "INSERT INTO t (v) VALUES (?)", 1); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.Conn(tx)
	if _, err := conn.ExecContext(ctx, "INSERT INTO t (v) VALUES (?)", 2); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(ctx, "SELECT v FROM t ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	rows.Close()
	if len(got) != 2 || got[1] != 2 {
		t.Fatalf("rows in the transaction: %v, want [1 2]", got)
	}
	if c.Len() != 1 {
		t.Fatalf("%d statements prepared, want 1: nothing is prepared inside a transaction", c.Len())
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO missing (v) VALUES (1)"); err == nil {
		t.Fatal("a statement on a missing table succeeded")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.Conn(nil).QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after rollback: %d rows, %v; want 1", n, err)
	}
}
