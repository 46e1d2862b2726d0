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
	"github.com/sqlelect/sqlelect/internal/dialect"
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

// The stale-write probe: how many attempts must run while the old leader's
// node lags behind the new term, and how many attempts it may take to get
// them.
const (
	probeLagged   = 4
	probeAttempts = 12
)

// probe is what one run of staleWriteProbe saw.
type probe struct {
	attempts  int // attempts made
	lagged    int // attempts whose write and commit ran while the old leader's node showed the old term
	committed int // stale writes that committed, under lag or not
}

// staleWriteProbe guards a transaction as the leader on node a; while it is
// open, an operator vacates the seat and another candidate takes it on node
// b, behind a large transaction that keeps node a applying (replication
// lag). The old leader then writes in its guarded transaction and commits.
// An attempt counts as lagged when the write succeeded and node a, read
// outside the transaction without waiting for the cluster, still showed
// the old term after it: the write ran before node a applied the new term,
// so nothing on node a stopped it, and only the fence (certification of
// the seat row the guarded transaction wrote, against the new term's
// write) can stop its commit. (The commit itself waits for its turn in the
// cluster's order, after the new term, so node a shows the new term once
// it returns.) It runs until probeLagged attempts were lagged, or
// probeAttempts were made.
func staleWriteProbe(t *testing.T, a, b *gorm.DB) probe {
	t.Helper()
	ctx := testCtx(t)
	must(t, "probe table", a.Exec("CREATE TABLE IF NOT EXISTS galera_fence_probe (id BIGINT AUTO_INCREMENT PRIMARY KEY, namespace VARCHAR(191) NOT NULL, term BIGINT NOT NULL)").Error)
	must(t, "ballast table", a.Exec("CREATE TABLE IF NOT EXISTS galera_ballast (id BIGINT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(255) NOT NULL)").Error)
	t.Cleanup(func() {
		a.Exec("DROP TABLE IF EXISTS galera_fence_probe")
		a.Exec("DROP TABLE IF EXISTS galera_ballast")
	})
	// One applier thread on the old leader's node: it applies the new term
	// only after the whole ballast, instead of taking the seat row's lock
	// at once in a second thread (which aborts the guarded transaction
	// whether it is fenced or not, and tests nothing).
	var threads int
	must(t, "wsrep_slave_threads", a.Raw("SELECT @@GLOBAL.wsrep_slave_threads").Scan(&threads).Error)
	must(t, "one applier thread", a.Exec("SET GLOBAL wsrep_slave_threads = 1").Error)
	t.Cleanup(func() { a.Exec("SET GLOBAL wsrep_slave_threads = ?", threads) })
	term := func(db *gorm.DB, ns string) int64 {
		var seen int64
		must(t, "reading the seat", db.Raw("SELECT term FROM election_leaders WHERE namespace = ?", ns).Scan(&seen).Error)
		return seen
	}
	var p probe
	for p.lagged < probeLagged && p.attempts < probeAttempts {
		i := p.attempts
		p.attempts++
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
		errWrite := tx.Exec("INSERT INTO galera_fence_probe (namespace, term) VALUES (?, ?)", ns, lease.Term).Error
		// Between the write and its commit: the commit waits for its turn
		// in the cluster's order, after the new term, so only this read
		// can tell whether the write ran under lag.
		seen := term(a, ns)
		lagged := errWrite == nil && seen < newLease.Term
		if lagged {
			p.lagged++
		}
		errCommit := errWrite
		if errWrite == nil {
			errCommit = tx.Commit().Error
		} else {
			tx.Rollback()
		}

		var n int64
		must(t, "sync wait", b.Exec("SET SESSION wsrep_sync_wait = 1").Error)
		must(t, "count", b.Raw("SELECT COUNT(*) FROM galera_fence_probe WHERE namespace = ?", ns).Scan(&n).Error)
		b.Exec("SET SESSION wsrep_sync_wait = DEFAULT")
		if (errCommit == nil) != (n == 1) || n > 1 {
			t.Errorf("attempt %d: the commit returned %v, and the table holds %d write(s) of term %d", i, errCommit, n, lease.Term)
		}
		if errCommit == nil {
			p.committed++
		}
		t.Logf("attempt %d: the first node showed term %d when the old leader had written (new term %d, lagged: %v); the commit: %v",
			i, seen, newLease.Term, lagged, errCommit)
		must(t, "truncate", a.Exec("TRUNCATE TABLE galera_ballast").Error)
	}
	t.Logf("%d of %d attempts ran while the old leader's node lagged behind the new term; %d stale write(s) committed", p.lagged, p.attempts, p.committed)
	if p.lagged < probeLagged {
		t.Fatalf("only %d of %d attempts ran under replication lag, want %d: the probe did not put the fence to the test", p.lagged, p.attempts, probeLagged)
	}
	return p
}

// TestGaleraGuardFences: the stale-write probe (staleWriteProbe) on a
// Galera cluster: no write of the old term commits, under replication lag
// or not. Guard wrote the seat row in the guarded transaction, so
// certification (or the applier, if it got there first) aborts it.
func TestGaleraGuardFences(t *testing.T) {
	dbs := galeraNodes(t)
	p := staleWriteProbe(t, dbs[0], dbs[1])
	if p.committed != 0 {
		t.Errorf("%d of %d writes of an old term committed after the new term began on another node", p.committed, p.attempts)
	}
}

// TestGaleraGuardFencesNegativeControl: the same probe with the fence
// disabled (dialect.DisableFence): Guard holds only its shared lock, which
// is the node's own, and at least one write of the old term commits after
// the new term began on another node. It shows that the probe can see a
// stale write, so that TestGaleraGuardFences passes because of the fence.
func TestGaleraGuardFencesNegativeControl(t *testing.T) {
	dbs := galeraNodes(t)
	restore := dialect.DisableFence()
	defer restore()
	p := staleWriteProbe(t, dbs[0], dbs[1])
	if p.committed == 0 {
		t.Errorf("without the fence, none of %d writes of an old term committed (%d under lag): the probe cannot tell a fenced Guard from an unfenced one", p.attempts, p.lagged)
	}
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
