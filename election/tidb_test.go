package election_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/models"
)

// TestTiDB: on TiDB (internal/ci/tidb.sh), New refuses a session in
// optimistic transaction mode, where FOR UPDATE does not block and the seat
// would be decided at commit; and a candidate row's times come from one
// reading of the clock (TiDB evaluates a derived table per use unless it is
// LIMIT 1). Elsewhere it is skipped.
func TestTiDB(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name != "mysql" {
			continue
		}
		db := testdb.Open(t, tg)
		if !testdb.TiDB(t, db) {
			t.Skip("not TiDB")
		}
		ctx := testCtx(t)

		// One connection, switched to optimistic mode by hand.
		one := testdb.OpenDSN(t, tg.DSN)
		testdb.Raw(t, one).SetMaxOpenConns(1)
		must(t, "SET tidb_txn_mode", one.Exec("SET SESSION tidb_txn_mode = 'optimistic'").Error)
		if _, err := election.New(one, election.WithNamespace(testdb.Namespace(t))); !errors.Is(err, election.ErrUnsafeDatabase) {
			t.Errorf("New on an optimistic session: %v, want ErrUnsafeDatabase", err)
		}

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
}
