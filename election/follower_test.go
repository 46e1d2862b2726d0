package election_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestFollowerDoesNotLockLiveSeat: while another candidate holds a live
// lease, a follower's Elect reads the seat without locking it and refreshes
// its own row, so it neither waits behind a transaction that holds the seat
// (a leader's renewal, a Guard, a vacate) nor makes the leader wait behind
// it. The seat row is held FOR UPDATE by a transaction of the test's own
// while the follower calls Elect.
func TestFollowerDoesNotLockLiveSeat(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			ns := testdb.Namespace(t)
			leaderDB := testdb.Open(t, tg)
			leaderE := mustElection(t, leaderDB, ns)
			leader := uuid.New()
			if l, err := leaderE.Elect(ctx, leader); err != nil || !l.HeldBy(leader) {
				t.Fatalf("leader's Elect: %+v, %v", l, err)
			}

			db, c := openCounted(t, tg)
			e := mustElection(t, db, ns)
			follower := uuid.New()
			// The first Elect learns who holds the seat.
			if l, err := e.Elect(ctx, follower); err != nil || !l.HeldBy(leader) {
				t.Fatalf("follower's first Elect: %+v, %v; want %s leading", l, err, leader)
			}

			// A transaction holds the seat row's lock, as a leader's
			// renewal or a vacate does for a moment.
			tx := leaderDB.WithContext(ctx).Begin()
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			defer tx.Rollback()
			var held int
			if err := tx.Raw("SELECT 1 FROM election_leaders WHERE namespace = ? FOR UPDATE", ns).Scan(&held).Error; err != nil || held != 1 {
				t.Fatalf("locking the seat row: %v (rows %d)", err, held)
			}

			before := c.Snapshot()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l, err := e.Elect(cctx, follower)
			if err != nil {
				t.Fatalf("follower's Elect while the seat row is locked: %v (it waited on the lock)", err)
			}
			if !l.HeldBy(leader) {
				t.Fatalf("follower's Elect gave %+v, want %s leading", l, leader)
			}
			// An unlocked read of the seat and the refresh of its own
			// candidate row: one statement where the dialect runs Elect as
			// one (followerRoundTrips).
			if n, most := c.Snapshot().Sub(before), followerRoundTrips.of(t, tg, db); n.Total() > most {
				t.Errorf("follower's Elect made %d round trips (%v), want at most %d", n.Total(), n, most)
			}
			// It still refreshed its own candidate row.
			ids, err := e.ListCandidates(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, id := range ids {
				found = found || id == follower
			}
			if !found {
				t.Errorf("the follower is not among the live candidates %v", ids)
			}
		})
	}
}

// TestLeaderRenewalNeverWaitsOnFollowers: 16 follower Electors, each on a
// pool of its own as in 16 processes, run rounds every 20 ms while the
// leader renews its lease every 5 ms on a one-connection pool. A sampler
// on a third pool asks the server, every millisecond, whether the leader's
// session is waiting for a row lock (PostgreSQL pg_stat_activity, MariaDB
// INNODB_TRX); the leader's session also has a lock wait limit of its own
// (lock_timeout 50 ms on PostgreSQL, innodb_lock_wait_timeout 1 s on
// MariaDB), so a renewal that queues behind a follower fails outright. The
// lock-wait statistic must be zero: followers of a live lease never lock
// the seat.
func TestLeaderRenewalNeverWaitsOnFollowers(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			if tg.Name == "postgres" && testdb.TransactionPooler() {
				t.Skip("a transaction pooler gives the leader no session of its own to watch")
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			ns := testdb.Namespace(t)
			probe := testdb.Open(t, tg)
			if testdb.TiDB(t, probe) {
				t.Skip("TiDB has no per-session lock-wait view like INNODB_TRX's LOCK WAIT")
			}
			var (
				leaderDSN, idQuery, waitQuery string
			)
			switch tg.Name {
			case "postgres":
				leaderDSN = withParam(tg.DSN, "lock_timeout=50ms")
				idQuery = "SELECT pg_backend_pid()"
				// A row lock's wait: on the row itself (tuple) or on the
				// transaction holding it. Not the relation's extension
				// (extend), which a renewal that moves the row to a new
				// page may wait for while other tests insert into the
				// tables, nor another test's schema change (relation):
				// a follower takes neither.
				waitQuery = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event IN ('tuple', 'transactionid')"
			default:
				leaderDSN = withParam(tg.DSN, "innodb_lock_wait_timeout=1")
				idQuery = "SELECT CONNECTION_ID()"
				waitQuery = "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'"
			}
			leaderDB := testdb.OpenDSN(t, leaderDSN)
			testdb.Raw(t, leaderDB).SetMaxOpenConns(1)
			var session int64
			must(t, "the leader's session id", testdb.Raw(t, leaderDB).QueryRowContext(ctx, idQuery).Scan(&session))
			leaderE := mustElection(t, leaderDB, ns, election.WithExpire(2*time.Second))
			leader := uuid.New()
			// The followers' pools are opened first, so that the leader's
			// first renewal comes well inside its lease after its grant.
			const followers = 16
			var els []*election.Elector
			for i := 0; i < followers; i++ {
				e := mustElection(t, testdb.Open(t, tg), ns, election.WithExpire(2*time.Second))
				el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: 20 * time.Millisecond})
				must(t, "NewElector", err)
				els = append(els, el)
			}
			if l, err := leaderE.Elect(ctx, leader); err != nil || !l.HeldBy(leader) {
				t.Fatalf("leader's Elect: %+v, %v", l, err)
			}

			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel() // before waiting for the followers, should the test fail
			for _, el := range els {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := el.Run(ctx); err != nil {
						t.Errorf("follower Run: %v", err)
					}
				}()
			}

			var samples, waits atomic.Int64
			sampled := make(chan struct{})
			sctx, stop := context.WithCancel(ctx)
			go func() {
				defer close(sampled)
				raw := testdb.Raw(t, probe)
				for sctx.Err() == nil {
					var n int
					if err := raw.QueryRowContext(sctx, waitQuery, session).Scan(&n); err == nil {
						samples.Add(1)
						waits.Add(int64(n))
					}
					time.Sleep(time.Millisecond)
				}
			}()
			renewals := 0
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				l, err := leaderE.Elect(ctx, leader)
				if err != nil {
					t.Fatalf("renewal %d: %v", renewals, err)
				}
				if !l.HeldBy(leader) {
					t.Fatalf("renewal %d: the leader lost its seat: %+v", renewals, l)
				}
				renewals++
			}
			stop()
			<-sampled
			var after int64
			must(t, "the leader's session id", testdb.Raw(t, leaderDB).QueryRowContext(ctx, idQuery).Scan(&after))
			if after != session {
				t.Fatalf("the leader's session changed from %d to %d during the run: the samples watched another", session, after)
			}
			cancel()
			t.Logf("%d renewals beside %d followers; %d samples of the leader's session, %d in a lock wait", renewals, followers, samples.Load(), waits.Load())
			if samples.Load() < 100 {
				t.Fatalf("only %d samples of the leader's session: the statistic says nothing", samples.Load())
			}
			if waits.Load() != 0 {
				t.Fatalf("the leader's session waited for a lock in %d of %d samples", waits.Load(), samples.Load())
			}
		})
	}
}

// withParam adds a query parameter to a URL-form DSN.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}
