package election_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// benchBare is the one-row table of the baseline: a bare single-row UPDATE
// on the same database, pool and connection as the protocol calls.
type benchBare struct {
	ID int64 `gorm:"primaryKey;autoIncrement:false"`
	N  int64
}

func (benchBare) TableName() string { return "bench_bare" }

// bareNs is the ns/op of BareUpdate per database, measured earlier in the
// same run, for the x-bare metric of the protocol calls.
var bareNs sync.Map // target (testdb.Target.String) -> float64

// BenchmarkProtocol measures every protocol call on every configured
// database: ns/op, round trips/op (roundtrips/op) and the ratio of its time
// to a bare single-row UPDATE measured just before in the same run (x-bare).
// Calls run one after another on a pool of one connection. Run it with
// -bench . so that BareUpdate runs first; docs/performance.md has the
// command and a table of results.
func BenchmarkProtocol(b *testing.B) {
	for _, tg := range testdb.Targets(b) {
		b.Run(tg.Name, func(b *testing.B) { benchDatabase(b, tg) })
	}
}

// BenchmarkSQLiteDrivers runs BenchmarkProtocol's calls on SQLite through
// each driver this binary can use, side by side in one run:
// mattn/go-sqlite3 (with cgo) and modernc.org/sqlite. Each driver's x-bare
// is against its own BareUpdate.
func BenchmarkSQLiteDrivers(b *testing.B) {
	for _, tg := range testdb.SQLiteDrivers() {
		b.Run(tg.Driver, func(b *testing.B) { benchDatabase(b, tg) })
	}
}

// bench is one database's benchmark fixture.
type bench struct {
	tg  testdb.Target
	db  *gorm.DB
	c   *rtcount.Counter
	d   dialect.Dialect
	ctx context.Context
	// prefix starts every namespace the benchmarks make, so they can be
	// deleted afterwards.
	prefix string
}

func benchDatabase(b *testing.B, tg testdb.Target) {
	db, c := openCounted(b, tg)
	d, err := dialect.For(db)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	f := &bench{tg: tg, db: db, c: c, d: d, ctx: ctx, prefix: fmt.Sprintf("bench.%s.", uuid.NewString()[:8])}
	b.Cleanup(f.cleanup)
	// The baseline's table, left in place: it is only ever this one row.
	if err := db.Exec("CREATE TABLE IF NOT EXISTS bench_bare (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)").Error; err != nil {
		b.Fatal(err)
	}
	if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&benchBare{ID: 1}).Error; err != nil {
		b.Fatal(err)
	}

	b.Run("BareUpdate", f.bareUpdate)
	b.Run("Elect", func(b *testing.B) {
		b.Run("renew", func(b *testing.B) { f.electRenew(f.ctx, b) })
		b.Run("renew-background", func(b *testing.B) { f.electRenew(context.Background(), b) })
		b.Run("first", f.electFirst)
		b.Run("follower", f.electFollower)
		b.Run("takeover", f.electTakeover)
	})
	b.Run("RegisterCandidate", f.register)
	b.Run("Heartbeat", f.heartbeat)
	b.Run("IsLeader", f.isLeader)
	b.Run("Leader", f.leader)
	b.Run("ListCandidates", f.listCandidates)
	b.Run("Guard", func(b *testing.B) {
		b.Run("plain", f.guard)
		b.Run("WithTx", f.guardWithTx)
		b.Run("TxOnly", f.txOnly)
	})
	b.Run("Release", func(b *testing.B) {
		b.Run("Resign", func(b *testing.B) { f.release(b, false) })
		b.Run("UnregisterCandidate", func(b *testing.B) { f.release(b, true) })
	})
	b.Run("UnregisterRegister", f.unregisterRegister)
	b.Run("Prune", f.prune)
	b.Run("PruneExpired", f.pruneExpired)
}

// cleanup deletes the rows of the namespaces the benchmarks made; the
// tables stay, as other tests share them.
func (f *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, table := range []string{"election_candidates", "election_leaders"} {
		f.db.WithContext(ctx).Exec("DELETE FROM "+table+" WHERE namespace LIKE ?", f.prefix+"%")
	}
}

// namespace is a new namespace of this run.
func (f *bench) namespace(name string) string {
	return f.prefix + name + "." + uuid.NewString()[:8]
}

// election makes an Election on ns with an expiry long enough that no lease
// expires during a benchmark.
func (f *bench) election(b *testing.B, ns string) *election.Election {
	b.Helper()
	return mustElection(b, f.db, ns, election.WithExpire(time.Hour))
}

// meter measures a benchmark's timed part: its time and its round trips.
// Work done between pause and resume is left out of both, without stopping
// the benchmark's timer (StopTimer stops the world to read memory
// statistics, which on a busy two-core machine slowed the calls measured
// after it): the time left out is taken off when end reports ns/op.
type meter struct {
	b            *testing.B
	f            *bench
	start        rtcount.Counts
	paused       rtcount.Counts
	pausedAt     time.Time
	excluded     rtcount.Counts
	excludedTime time.Duration
}

// begin resets the timer and starts counting.
func (f *bench) begin(b *testing.B) *meter {
	b.ResetTimer()
	return &meter{b: b, f: f, start: f.c.Snapshot()}
}

// pause leaves what follows out of the time and the count.
func (m *meter) pause() {
	m.paused = m.f.c.Snapshot()
	m.pausedAt = time.Now()
}

// resume counts and times again.
func (m *meter) resume() {
	m.excludedTime += time.Since(m.pausedAt)
	m.excluded = addCounts(m.excluded, m.f.c.Snapshot().Sub(m.paused))
}

// end stops the timer and reports ns/op (without the paused parts),
// roundtrips/op and, when BareUpdate ran before on this database, x-bare.
// It returns ns/op.
func (m *meter) end() float64 {
	m.b.StopTimer()
	ns := float64((m.b.Elapsed() - m.excludedTime).Nanoseconds()) / float64(m.b.N)
	m.b.ReportMetric(ns, "ns/op")
	n := m.f.c.Snapshot().Sub(m.start).Sub(m.excluded)
	m.b.ReportMetric(float64(n.Total())/float64(m.b.N), "roundtrips/op")
	if bare, ok := bareNs.Load(m.f.tg.String()); ok {
		m.b.ReportMetric(ns/bare.(float64), "x-bare")
	}
	var each rtcount.Counts
	for k := range n {
		each[k] = (n[k] + int64(m.b.N)/2) / int64(m.b.N)
	}
	if m.b.N > 1 {
		m.b.Logf("%d ops, per op: %v", m.b.N, each)
	}
	return ns
}

func addCounts(a, b rtcount.Counts) rtcount.Counts {
	for k := range a {
		a[k] += b[k]
	}
	return a
}

func (f *bench) bareUpdate(b *testing.B) {
	bareNs.Delete(f.tg.String()) // no x-bare for the baseline itself
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		f.bare(f.ctx, b)
	}
	bareNs.Store(f.tg.String(), m.end())
}

// bare runs the baseline statement once.
func (f *bench) bare(ctx context.Context, b *testing.B) {
	res, err := testdb.Raw(b, f.db).ExecContext(ctx, "UPDATE bench_bare SET n = n + 1 WHERE id = 1")
	if err != nil {
		b.Fatal(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		b.Fatalf("bare UPDATE changed %d rows (%v), want 1", n, err)
	}
}

// electRenew: the caller already leads through the same Election value.
// Besides x-bare it reports x-bare-paired: each renewal is followed by one
// bare UPDATE, left out of ns/op and timed on its own, and the metric is the
// ratio of the two sums. Both then see the same moment's
// load and disk, which makes the ratio steadier than one between two
// benchmarks run a few seconds apart.
//
// ctx is what the calls get: the benchmark's cancellable context ("renew",
// as a service passes its own), or context.Background()
// ("renew-background"). The difference matters on SQLite, whose driver runs
// every statement, and every row read, of a cancellable context on a
// goroutine of its own so that it can interrupt it.
func (f *bench) electRenew(ctx context.Context, b *testing.B) {
	e := f.election(b, f.namespace("renew"))
	id := uuid.New()
	first, err := e.Elect(ctx, id)
	if err != nil || !first.HeldBy(id) {
		b.Fatalf("Elect: %+v, %v", first, err)
	}
	// The first renewal prunes expired candidates (then at most every half
	// expiry window, here an hour): see the Prune benchmark.
	if _, err := e.Elect(ctx, id); err != nil {
		b.Fatal(err)
	}
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		l, err := e.Elect(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if l.Term != first.Term {
			b.Fatalf("renewal moved the term from %d to %d", first.Term, l.Term)
		}
		m.pause()
		f.bare(ctx, b)
		m.resume()
	}
	ns := m.end()
	b.ReportMetric(ns*float64(b.N)/float64(m.excludedTime.Nanoseconds()), "x-bare-paired")
}

// electFirst: the first acquisition of a new namespace, each iteration. The
// Election value is made with the timer stopped.
func (f *bench) electFirst(b *testing.B) {
	base := f.namespace("first")
	id := uuid.New()
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		m.pause()
		e := f.election(b, base+"."+strconv.Itoa(i))
		m.resume()
		l, err := e.Elect(f.ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if !l.HeldBy(id) || l.Term != 1 {
			b.Fatalf("first Elect gave %+v, want term 1", l)
		}
	}
	m.end()
}

// electFollower: another candidate holds a live lease.
func (f *bench) electFollower(b *testing.B) {
	ns := f.namespace("follower")
	leader := uuid.New()
	if l, err := f.election(b, ns).Elect(f.ctx, leader); err != nil || !l.HeldBy(leader) {
		b.Fatalf("Elect: %+v, %v", l, err)
	}
	e := f.election(b, ns)
	id := uuid.New()
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		l, err := e.Elect(f.ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if !l.HeldBy(leader) {
			b.Fatalf("follower's Elect gave %+v, want %s leading", l, leader)
		}
	}
	m.end()
}

// electTakeover: the lease has expired (set in the past with the timer
// stopped) and a new candidate takes the seat, each iteration.
func (f *bench) electTakeover(b *testing.B) {
	ns := f.namespace("takeover")
	e := f.election(b, ns)
	expire := f.d.Rebind("UPDATE election_leaders SET lease_expires_at = ? WHERE namespace = ?")
	past := f.d.TimeArg(time.Now().Add(-24 * time.Hour))
	prev, err := e.Elect(f.ctx, uuid.New())
	if err != nil {
		b.Fatal(err)
	}
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		m.pause()
		if err := f.db.Exec(expire, past, ns).Error; err != nil {
			b.Fatal(err)
		}
		id := uuid.New()
		m.resume()
		l, err := e.Elect(f.ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if !l.HeldBy(id) || l.Term != prev.Term+1 {
			b.Fatalf("takeover gave %+v after %+v, want the next term", l, prev)
		}
		prev = l
	}
	m.end()
}

// register: a new candidate each iteration.
func (f *bench) register(b *testing.B) {
	e := f.election(b, f.namespace("register"))
	ids := make([]uuid.UUID, b.N)
	for i := range ids {
		ids[i] = uuid.New()
	}
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		if err := e.RegisterCandidate(f.ctx, ids[i]); err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// heartbeat: the same candidate, whose row exists.
func (f *bench) heartbeat(b *testing.B) {
	e := f.election(b, f.namespace("heartbeat"))
	id := uuid.New()
	if err := e.RegisterCandidate(f.ctx, id); err != nil {
		b.Fatal(err)
	}
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		if err := e.Heartbeat(f.ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// leading returns an Election on a new namespace and the lease its
// candidate holds.
func (f *bench) leading(b *testing.B, name string) (*election.Election, election.Lease) {
	b.Helper()
	e := f.election(b, f.namespace(name))
	id := uuid.New()
	l, err := e.Elect(f.ctx, id)
	if err != nil || !l.HeldBy(id) {
		b.Fatalf("Elect: %+v, %v", l, err)
	}
	return e, l
}

func (f *bench) isLeader(b *testing.B) {
	e, lease := f.leading(b, "isleader")
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		ok, err := e.IsLeader(f.ctx, lease.Leader)
		if err != nil || !ok {
			b.Fatalf("IsLeader: %v, %v", ok, err)
		}
	}
	m.end()
}

func (f *bench) leader(b *testing.B) {
	e, lease := f.leading(b, "leader")
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		l, err := e.Leader(f.ctx)
		if err != nil || l.Leader != lease.Leader {
			b.Fatalf("Leader: %+v, %v", l, err)
		}
	}
	m.end()
}

// listCandidates: ten live candidates.
func (f *bench) listCandidates(b *testing.B) {
	e := f.election(b, f.namespace("list"))
	for i := 0; i < 10; i++ {
		if err := e.RegisterCandidate(f.ctx, uuid.New()); err != nil {
			b.Fatal(err)
		}
	}
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		ids, err := e.ListCandidates(f.ctx)
		if err != nil || len(ids) != 10 {
			b.Fatalf("ListCandidates: %d ids, %v", len(ids), err)
		}
	}
	m.end()
}

// guard: Guard without a transaction, which only checks.
func (f *bench) guard(b *testing.B) {
	e, lease := f.leading(b, "guard")
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		if err := e.Guard(f.ctx, lease); err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// guardWithTx: begin, Guard WithTx (which locks the leader row shared),
// commit, each iteration. TxOnly measures the begin and commit alone.
func (f *bench) guardWithTx(b *testing.B) {
	e, lease := f.leading(b, "guardtx")
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		tx := f.db.WithContext(f.ctx).Begin()
		if tx.Error != nil {
			b.Fatal(tx.Error)
		}
		if err := e.Guard(f.ctx, lease, election.WithTx(tx)); err != nil {
			tx.Rollback()
			b.Fatal(err)
		}
		if err := tx.Commit().Error; err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// txOnly: an empty transaction begun and committed the way guardWithTx
// does, the overhead Guard WithTx's numbers include.
func (f *bench) txOnly(b *testing.B) {
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		tx := f.db.WithContext(f.ctx).Begin()
		if tx.Error != nil {
			b.Fatal(tx.Error)
		}
		if err := tx.Commit().Error; err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// release: the leader gives up its lease, by Resign or by
// UnregisterCandidate (as an Elector's Run does when it returns), each
// iteration; the grant before it is left out.
func (f *bench) release(b *testing.B, unregister bool) {
	e := f.election(b, f.namespace("release"))
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		m.pause()
		id := uuid.New()
		if l, err := e.Elect(f.ctx, id); err != nil || !l.HeldBy(id) {
			b.Fatalf("Elect: %+v, %v", l, err)
		}
		m.resume()
		var err error
		if unregister {
			err = e.UnregisterCandidate(f.ctx, id)
		} else {
			err = e.Resign(f.ctx, id)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// unregisterRegister: a candidate that does not lead leaves and comes back.
func (f *bench) unregisterRegister(b *testing.B) {
	e, _ := f.leading(b, "unregister")
	id := uuid.New()
	if err := e.RegisterCandidate(f.ctx, id); err != nil {
		b.Fatal(err)
	}
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		if err := e.UnregisterCandidate(f.ctx, id); err != nil {
			b.Fatal(err)
		}
		if err := e.RegisterCandidate(f.ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	m.end()
}

// prune: Prune with nothing to delete, the cost a leader pays on a renewal
// at most every five expiry windows.
func (f *bench) prune(b *testing.B) {
	e, _ := f.leading(b, "prune")
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		if n, err := e.Prune(f.ctx); err != nil || n != 0 {
			b.Fatalf("Prune: %d, %v", n, err)
		}
	}
	m.end()
}

// pruneExpiredRows are the expired candidate rows each pruneExpired op
// deletes.
const pruneExpiredRows = 40

// pruneExpired: Prune deleting pruneExpiredRows expired candidate rows,
// as a leader's prune after many candidates crashed, or a Group's after a
// member lapsed: on PostgreSQL and SQLite the statements of a prune with
// nothing to delete, on MySQL, MariaDB and TiDB one more per row. The rows
// are written with the meter paused.
func (f *bench) pruneExpired(b *testing.B) {
	e, _ := f.leading(b, "prune-expired")
	ns := e.Namespace()
	long := f.d.TimeArg(time.Now().Add(-2 * time.Hour))
	insert := "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) VALUES " +
		strings.Repeat("(?, ?, ?, ?, ?), ", pruneExpiredRows-1) + "(?, ?, ?, ?, ?)"
	m := f.begin(b)
	for i := 0; i < b.N; i++ {
		m.pause()
		args := make([]any, 0, 5*pruneExpiredRows)
		for range pruneExpiredRows {
			args = append(args, ns, uuid.New(), long, long, long)
		}
		if err := f.db.WithContext(f.ctx).Exec(insert, args...).Error; err != nil {
			b.Fatal(err)
		}
		m.resume()
		if n, err := e.Prune(f.ctx); err != nil || n != pruneExpiredRows {
			b.Fatalf("Prune: %d, %v", n, err)
		}
	}
	m.end()
}
