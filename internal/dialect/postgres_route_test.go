package dialect_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestPostgresRoute: the connector finds whether its connections reach the
// server or a transaction pooler, and withholds its cancel requests only
// behind a pooler. Either way a call whose context ends returns at once and
// the pool goes on working.
func TestPostgresRoute(t *testing.T) {
	dsn := testdb.Only(t, "postgres").DSN
	c, route, err := dialect.PGConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	known, pooled, _ := route()
	if !known {
		t.Fatal("the route is unknown after a connection was made")
	}
	if want := testdb.TransactionPooler(); pooled != want {
		t.Fatalf("pooled = %v, want %v", pooled, want)
	}

	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err = db.ExecContext(short, "SELECT pg_sleep(5)")
	stop()
	if err == nil {
		t.Fatal("pg_sleep(5) under a 200ms context succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the cancelled call took %v", d)
	}
	// pgx closes the cancelled connection in the background, sending its
	// cancel request first (or having it withheld).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, withheld := route()
		if !pooled {
			if withheld != 0 {
				t.Fatalf("%d cancel requests withheld on a direct connection", withheld)
			}
			break
		}
		if withheld > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no cancel request was withheld behind the pooler")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the pool after the cancelled call: %d, %v", one, err)
	}
}
