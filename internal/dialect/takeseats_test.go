package dialect_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestTakeSeatsSkipsLocked: on PostgreSQL, TakeSeats over a free seat, a
// seat held by another candidate, and a free seat whose row another
// transaction has locked grants the first and leaves the other two as
// they are, without waiting for the lock: a batch take never waits for a
// leader's renewal nor makes one wait.
func TestTakeSeatsSkipsLocked(t *testing.T) {
	raw, ctx, base, d := takeSeatsOn(t)
	free, held, locked := base+".free", base+".held", base+".locked"
	other, me := uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO election_leaders (namespace, term, updated_at) VALUES ($1, 0, now()), ($2, 0, now())", []any{free, locked}},
		{"INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) VALUES ($1, $2, 1, now() + interval '1 hour', now(), now())", []any{held, other}},
	} {
		if _, err := raw.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM election_leaders WHERE namespace = $1 FOR UPDATE", locked); err != nil {
		t.Fatal(err)
	}

	grants, ok, err := dialect.TakeSeats(ctx, lockTimeoutConn(t, ctx, raw), d, me, []string{free, held, locked}, time.Minute, "host", 1, "", "expired")
	if err != nil || !ok {
		t.Fatalf("TakeSeats: ok %v, err %v (a wait for the locked row ends in lock_timeout)", ok, err)
	}
	var got []string
	for _, g := range grants {
		got = append(got, g.Namespace)
	}
	if !slices.Equal(got, []string{free}) {
		t.Errorf("granted %q, want only %q", got, free)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	var leader uuid.NullUUID
	if err := raw.QueryRowContext(ctx, "SELECT leader_id FROM election_leaders WHERE namespace = $1", held).Scan(&leader); err != nil {
		t.Fatal(err)
	}
	if leader.UUID != other {
		t.Errorf("the held seat's leader is %v after TakeSeats, want %v", leader, other)
	}
}

// TestTakeSeatsBesideAnotherTake: on PostgreSQL, a take whose batch
// overlaps that of another take still open (a seat the other is granting,
// a namespace it is inserting) grants what neither holds without waiting
// for the other. Two takes at a cold start once deadlocked: one inserting
// a namespace the other had just granted waited for it, while the other
// waited for one of its inserts.
func TestTakeSeatsBesideAnotherTake(t *testing.T) {
	raw, ctx, base, d := takeSeatsOn(t)
	// In namespace order: a new one only the second take wants, a free
	// seat both want, a new one only the first wants.
	mine, both, theirs := base+".a", base+".b", base+".c"
	if _, err := raw.ExecContext(ctx, "INSERT INTO election_leaders (namespace, term, updated_at) VALUES ($1, 0, now())", both); err != nil {
		t.Fatal(err)
	}
	first, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback() }()
	grants, _, err := dialect.TakeSeats(ctx, first, d, uuid.New(), []string{both, theirs}, time.Minute, "host", 1, "", "expired")
	if err != nil || len(grants) != 2 {
		t.Fatalf("the first take: %d grants, %v; want 2", len(grants), err)
	}

	grants, _, err = dialect.TakeSeats(ctx, lockTimeoutConn(t, ctx, raw), d, uuid.New(), []string{mine, both}, time.Minute, "host", 1, "", "expired")
	if err != nil {
		t.Fatalf("the second take waited for the first (a wait ends in lock_timeout): %v", err)
	}
	var got []string
	for _, g := range grants {
		got = append(got, g.Namespace)
	}
	if !slices.Equal(got, []string{mine}) {
		t.Errorf("the second take granted %q, want only %q", got, mine)
	}
}

// takeSeatsOn opens PostgreSQL for a TakeSeats test: the pool, a context
// that ends with the test, the test's namespace and the dialect.
func takeSeatsOn(t *testing.T) (*sql.DB, context.Context, string, dialect.Dialect) {
	t.Helper()
	raw := testdb.Raw(t, testdb.Open(t, testdb.Only(t, "postgres")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	d, err := dialect.ByName("postgres")
	if err != nil {
		t.Fatal(err)
	}
	return raw, ctx, testdb.Namespace(t), d
}

// lockTimeoutConn is a connection of raw on which a wait for a row lock
// fails after 2 s.
func lockTimeoutConn(t *testing.T, ctx context.Context, raw *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	return conn
}
