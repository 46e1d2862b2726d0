package dialect_test

import (
	"context"
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
	tg := testdb.Only(t, "postgres")
	raw := testdb.Raw(t, testdb.Open(t, tg))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := testdb.Namespace(t)
	free, held, locked := base+".free", base+".held", base+".locked"
	other, me := uuid.New(), uuid.New()
	d, err := dialect.ByName("postgres")
	if err != nil {
		t.Fatal(err)
	}
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

	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	grants, ok, err := dialect.TakeSeats(ctx, conn, d, me, []string{free, held, locked}, time.Minute, "host", 1, "", "expired")
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
