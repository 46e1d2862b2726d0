package election_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// galeraNodes opens every node of the Galera cluster GaleraEnv names, with
// the election tables migrated.
func galeraNodes(t *testing.T) []*gorm.DB {
	t.Helper()
	var dbs []*gorm.DB
	for _, dsn := range testdb.Galera(t) {
		dbs = append(dbs, testdb.OpenDSN(t, dsn).Session(&gorm.Session{Logger: logger.Discard}))
	}
	must(t, "migrate.Up", migrate.Up(testCtx(t), dbs[0]))
	return dbs
}

// TestGaleraGuardFences: a leader guards a transaction on one node; while
// it is open, an operator vacates the seat and another candidate takes it
// on a second node, behind a large transaction that keeps the first node
// applying (replication lag). The old leader's write in the guarded
// transaction must not commit: Guard wrote the seat row, so certification
// (or the applier, if it got there first) aborts the transaction. With only
// a shared lock, which is the node's own, the stale write committed after
// the new term began.
func TestGaleraGuardFences(t *testing.T) {
	dbs := galeraNodes(t)
	a, b := dbs[0], dbs[1]
	ctx := testCtx(t)
	must(t, "probe table", a.Exec("CREATE TABLE IF NOT EXISTS galera_fence_probe (id BIGINT AUTO_INCREMENT PRIMARY KEY, namespace VARCHAR(191) NOT NULL, term BIGINT NOT NULL)").Error)
	must(t, "ballast table", a.Exec("CREATE TABLE IF NOT EXISTS galera_ballast (id BIGINT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(255) NOT NULL)").Error)
	t.Cleanup(func() {
		a.Exec("DROP TABLE IF EXISTS galera_fence_probe")
		a.Exec("DROP TABLE IF EXISTS galera_ballast")
	})

	const attempts = 8
	lagged := 0
	for i := range attempts {
		ns := testdb.Namespace(t)
		ea := mustElection(t, a, ns, election.WithExpire(5*time.Second))
		eb := mustElection(t, b, ns, election.WithExpire(5*time.Second))
		old, next := uuid.New(), uuid.New()
		lease := mustElect(t, ea, old)
		must(t, "RegisterCandidate on the second node", eb.RegisterCandidate(ctx, next))
		waitLeaderOn(t, eb, lease)

		tx := a.Begin()
		must(t, "Begin", tx.Error)
		must(t, "Guard WithTx", ea.Guard(ctx, lease, election.WithTx(tx)))

		// Lag: the first node applies the ballast before the new term.
		must(t, "ballast", b.Exec("INSERT INTO galera_ballast (pad) SELECT REPEAT('x', 200) FROM seq_1_to_60000").Error)
		if _, err := eb.VacateSeat(ctx); err != nil {
			tx.Rollback()
			t.Fatalf("VacateSeat on the second node: %v", err)
		}
		newLease, err := eb.Elect(ctx, next)
		if err != nil || newLease.Leader != next || newLease.Term <= lease.Term {
			tx.Rollback()
			t.Fatalf("the takeover on the second node: %+v, %v", newLease, err)
		}
		// What the first node shows now, outside the transaction, without
		// waiting for the cluster: the old term means it lags.
		var seen int64
		a.Raw("SELECT term FROM election_leaders WHERE namespace = ?", ns).Scan(&seen)
		if seen < newLease.Term {
			lagged++
		}

		errWrite := tx.Exec("INSERT INTO galera_fence_probe (namespace, term) VALUES (?, ?)", ns, lease.Term).Error
		errCommit := errWrite
		if errWrite == nil {
			errCommit = tx.Commit().Error
		} else {
			tx.Rollback()
		}
		if errCommit == nil {
			t.Errorf("attempt %d: the write of term %d committed after term %d began on another node", i, lease.Term, newLease.Term)
		}
		var n int64
		must(t, "sync wait", b.Exec("SET SESSION wsrep_sync_wait = 1").Error)
		must(t, "count", b.Raw("SELECT COUNT(*) FROM galera_fence_probe WHERE namespace = ?", ns).Scan(&n).Error)
		b.Exec("SET SESSION wsrep_sync_wait = DEFAULT")
		if n != 0 {
			t.Errorf("attempt %d: %d stale write(s) of term %d in the table", i, n, lease.Term)
		}
		t.Logf("attempt %d: first node showed term %d when the old leader wrote (new term %d); the write failed with: %v", i, seen, newLease.Term, errCommit)
		must(t, "truncate", a.Exec("TRUNCATE TABLE galera_ballast").Error)
	}
	t.Logf("%d of %d attempts ran while the old leader's node lagged behind the new term", lagged, attempts)
}

// waitLeaderOn waits until e's node shows lease as the seat's holder.
func waitLeaderOn(t *testing.T, e *election.Election, lease election.Lease) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := e.LeaderInfo(testCtx(t))
		if err == nil && info.Lease.Leader == lease.Leader && info.Lease.Term == lease.Term {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node does not show %s in term %d: %+v, %v", lease.Leader, lease.Term, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGaleraElections runs the contention workload with candidates on every
// node of the cluster, and checks the histories for overlapping terms.
// Certification conflicts between nodes come back as deadlocks (1213),
// which Elect retries.
func TestGaleraElections(t *testing.T) {
	dbs := galeraNodes(t)
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	l := newLedger()
	tally := newLogTally()
	defer tally.report(t)
	groups := make([]workload, 3*len(dbs))
	for i := range groups {
		db := dbs[i%len(dbs)]
		groups[i] = workload{
			short:  mustElection(t, db, ns, election.WithExpire(contendShort), election.WithLogger(tally.logger())),
			long:   mustElection(t, db, ns, election.WithExpire(contendLong), election.WithLogger(tally.logger())),
			rounds: contendRounds,
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range len(groups) * 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			<-start
			groups[g%len(groups)].run(ctx, strconv.Itoa(g), uuid.New(), rng, l)
		}()
	}
	close(start)
	wg.Wait()
	res := l.check(t)
	if res.Terms < 2 {
		t.Errorf("only %d terms: the workload never changed leaders", res.Terms)
	}
	t.Logf("%d Elect calls on %d nodes, %d terms, %d releases", l.elects, len(dbs), res.Terms, l.releases)
}

// TestGaleraNotLeaderAfterVacate: a lease vacated through one node fails
// Guard through another, once that node has applied the change (Guard reads
// the node's own data; it is the write in a guarded transaction that
// fences).
func TestGaleraNotLeaderAfterVacate(t *testing.T) {
	dbs := galeraNodes(t)
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	ea := mustElection(t, dbs[0], ns)
	eb := mustElection(t, dbs[1], ns)
	lease := mustElect(t, ea, uuid.New())
	waitLeaderOn(t, eb, lease)
	if _, err := eb.VacateSeat(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ea.Guard(ctx, lease)
		if errors.Is(err, election.ErrNotLeader) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Guard on the first node after the vacate: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
