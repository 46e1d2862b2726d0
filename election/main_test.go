package election_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/models"
	"github.com/sqlelect/sqlelect/session"
)

// Environment of a child process started by TestMultiProcess.
const (
	childEnv      = "SQLELECT_CORETEST_CHILD" // the child's name; set means "run as a child"
	childDSNEnv   = "SQLELECT_CORETEST_DSN"
	childNSEnv    = "SQLELECT_CORETEST_NS"
	childOutEnv   = "SQLELECT_CORETEST_OUT"
	childReadyEnv = "SQLELECT_CORETEST_READY" // directory of ready files: the start barrier
	childProcsEnv = "SQLELECT_CORETEST_PROCS" // how many children wait at the barrier
)

// TestMain runs a child of TestMultiProcess when the environment says so,
// and otherwise the tests, failing on leaked goroutines.
func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runChild(name))
	}
	goleak.VerifyTestMain(m,
		// GORM's prepared-statement cache (gorm.Config{PrepareStmt: true},
		// TestPreparedStatementHandles) starts an expiry goroutine per
		// handle that nothing can stop.
		goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"),
	)
}

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// logTally is a slog handler that counts the library's retries of
// transient conflicts, by operation and database error, and keeps its
// warnings (e.g. a failed prune, which no caller would see).
type logTally struct {
	mu      sync.Mutex
	retries map[string]int
	warns   []string
}

func newLogTally() *logTally { return &logTally{retries: map[string]int{}} }

func (c *logTally) logger() *slog.Logger { return slog.New(c) }

func (c *logTally) Enabled(context.Context, slog.Level) bool { return true }

func (c *logTally) Handle(_ context.Context, r slog.Record) error {
	var op, msg string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "op":
			op = a.Value.String()
		case "err":
			msg = a.Value.String()
		}
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.Contains(r.Message, "retrying after a transient conflict"):
		if len(msg) > 70 {
			msg = msg[:70]
		}
		c.retries[op+": "+msg]++
	case r.Level >= slog.LevelWarn:
		c.warns = append(c.warns, fmt.Sprintf("%s %v", r.Message, msg))
	}
	return nil
}

func (c *logTally) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logTally) WithGroup(string) slog.Handler      { return c }

// report logs the retries and fails t on warnings.
func (c *logTally) report(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.retries {
		total += n
	}
	if total > 0 {
		t.Logf("transient conflicts retried inside the library: %d %v", total, c.retries)
	}
	for _, w := range c.warns {
		t.Errorf("the library warned: %s", w)
	}
}

// testCtx is a context for one test, cancelled when it ends.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// mustElection makes an Election on ns or fails the test.
func mustElection(t testing.TB, db *gorm.DB, ns string, opts ...election.Option) *election.Election {
	t.Helper()
	opts = append([]election.Option{election.WithNamespace(ns), election.WithLogger(quiet)}, opts...)
	e, err := election.New(db, opts...)
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	return e
}

// waitSeatVacant polls Leader until the seat is vacant or expired by the
// database clock.
func waitSeatVacant(t testing.TB, ctx context.Context, e *election.Election) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := e.Leader(ctx)
		if err != nil {
			t.Fatalf("Leader: %v", err)
		}
		if l.Leader == uuid.Nil {
			if l.Term != 0 || !l.ExpiresAt.IsZero() {
				t.Fatalf("vacant seat reported as %+v, want only the namespace", l)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease %+v did not expire", l)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dbNow reads the database clock.
func dbNow(t testing.TB, db *gorm.DB) time.Time {
	t.Helper()
	d, err := dialect.For(db)
	if err != nil {
		t.Fatal(err)
	}
	var now dialect.Time
	if err := testdb.Raw(t, db).QueryRow(d.Statements().Clock).Scan(&now); err != nil {
		t.Fatalf("reading the database clock: %v", err)
	}
	return now.Time
}

// leaderRow reads the namespace's leader row through the model; ok is false
// when there is none.
func leaderRow(t testing.TB, db *gorm.DB, ns string) (models.Leader, bool) {
	t.Helper()
	var rows []models.Leader
	if err := db.Where("namespace = ?", ns).Find(&rows).Error; err != nil {
		t.Fatalf("reading election_leaders: %v", err)
	}
	if len(rows) == 0 {
		return models.Leader{}, false
	}
	return rows[0], true
}

// candidateRows reads the namespace's candidate rows through the model,
// keyed by id.
func candidateRows(t testing.TB, db *gorm.DB, ns string) map[uuid.UUID]models.Candidate {
	t.Helper()
	var rows []models.Candidate
	if err := db.Where("namespace = ?", ns).Find(&rows).Error; err != nil {
		t.Fatalf("reading election_candidates: %v", err)
	}
	out := map[uuid.UUID]models.Candidate{}
	for _, r := range rows {
		out[r.CandidateID] = r
	}
	return out
}

// ledger collects what the workers of a contention test saw: every lease
// goes to an electiontest.Recorder, whose Checker judges mutual exclusion
// (one holder and one start per term, terms in order and not overlapping
// unless given up, no observer seeing terms go back). The ledger itself
// keeps what the Recorder does not: failed calls and leases that are
// malformed on their own, and counts for the test's log.
type ledger struct {
	rec *electiontest.Recorder

	mu       sync.Mutex
	elects   int      // Elect results recorded
	releases int      // unregistrations, of leaders or not
	problems []string // failed calls and malformed leases
}

func newLedger() *ledger { return &ledger{rec: electiontest.NewRecorder()} }

// elect records a lease that observer's Elect returned. Each observer must
// record from one goroutine, in the order of its calls.
func (l *ledger) elect(observer string, lease election.Lease) {
	l.mu.Lock()
	l.elects++
	switch {
	case lease.Leader == uuid.Nil && lease.Term != 0:
		l.problemLocked("%s: vacant lease with term %d", observer, lease.Term)
	case lease.Leader != uuid.Nil && lease.Term <= 0:
		l.problemLocked("%s: lease of %s with term %d", observer, lease.Leader, lease.Term)
	case lease.Leader != uuid.Nil && !lease.ExpiresAt.After(lease.AcquiredAt):
		l.problemLocked("%s: term %d expires at %v, not after it began at %v", observer, lease.Term, lease.ExpiresAt, lease.AcquiredAt)
	}
	l.mu.Unlock()
	l.rec.Observe(observer, lease)
}

// release records, before the call, that a worker gives up lease (a
// vacant one when it does not lead): from then on its term may end early.
func (l *ledger) release(lease election.Lease) {
	l.mu.Lock()
	l.releases++
	l.mu.Unlock()
	l.rec.Released(lease)
}

// fail records a call that returned an error.
func (l *ledger) fail(observer, op string, id uuid.UUID, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problemLocked("%s: %s(%s) failed: %v", observer, op, id, err)
}

func (l *ledger) problemLocked(format string, args ...any) {
	if len(l.problems) < 20 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// ledgerFile is a ledger written by a child of TestMultiProcess.
type ledgerFile struct {
	History  electiontest.History `json:"history"`
	Elects   int                  `json:"elects"`
	Releases int                  `json:"releases"`
	Problems []string             `json:"problems"`
}

func (l *ledger) file() ledgerFile {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ledgerFile{History: l.rec.History(), Elects: l.elects, Releases: l.releases, Problems: l.problems}
}

// add merges a child's ledger into l.
func (l *ledger) add(f ledgerFile) {
	l.rec.Add(f.History)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.elects += f.Elects
	l.releases += f.Releases
	for _, p := range f.Problems {
		l.problemLocked("%s", p)
	}
}

// check fails t with every problem and violation, and returns the
// Checker's result.
func (l *ledger) check(t testing.TB) electiontest.Result {
	t.Helper()
	l.mu.Lock()
	for _, p := range l.problems {
		t.Error(p)
	}
	l.mu.Unlock()
	res := l.rec.Check()
	for _, v := range res.Violations {
		t.Error(v)
	}
	return res
}

// workload is what a contending worker does: Elect in a loop, sometimes
// pausing while it leads (so the lease expires and another candidate takes
// over), sometimes unregistering and registering again. Each registration
// uses the short or the long expiry window, chosen at random; a candidate
// keeps its window while registered, since a leader renewing through a
// shorter window than before would (by design) shorten its own lease, and
// the checker takes a term to last until the latest expiry anyone saw.
type workload struct {
	short, long *election.Election // the same namespace, different expiry windows
	rounds      int
	// until, when set, keeps the workload going past its rounds until then,
	// so that a lease taken before it started has surely expired.
	until time.Time
}

func (w workload) run(ctx context.Context, observer string, id uuid.UUID, rng *rand.Rand, l *ledger) {
	fail := func(op string, err error) { l.fail(observer, op, id, err) }
	pick := func() *election.Election {
		if rng.IntN(3) == 0 {
			return w.long
		}
		return w.short
	}
	e := pick()
	for r := 0; (r < w.rounds || time.Now().Before(w.until)) && ctx.Err() == nil; r++ {
		lease, err := e.Elect(ctx, id)
		if err != nil {
			fail("Elect", err)
			continue
		}
		l.elect(observer, lease)
		leads := lease.Leader == id
		switch {
		case (leads && rng.IntN(4) == 0) || (!leads && rng.IntN(20) == 0):
			var gave election.Lease
			if leads {
				gave = lease
			}
			// Noted before the call: from here on the term may end early.
			l.release(gave)
			if err := e.UnregisterCandidate(ctx, id); err != nil {
				fail("UnregisterCandidate", err)
			}
			e = pick()
			if err := e.RegisterCandidate(ctx, id); err != nil {
				fail("RegisterCandidate", err)
			}
		case leads && rng.IntN(3) == 0:
			// Stop renewing until the lease has expired.
			time.Sleep(e.Expire() + time.Duration(rng.IntN(20))*time.Millisecond)
		default:
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
	}
}

// runChild is the body of a child process of TestMultiProcess: it contends
// for the namespace with a few goroutines and writes its ledger (the
// electiontest history, failed calls and counts) to a file as JSON. The
// exit code is non-zero only when the child could not start.
func runChild(name string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "child %s: "+format+"\n", append([]any{name}, args...)...)
		return 2
	}
	out, err := os.Create(os.Getenv(childOutEnv))
	if err != nil {
		return fail("%v", err)
	}
	defer out.Close()
	db, err := session.Open(os.Getenv(childDSNEnv))
	if err != nil {
		return fail("opening: %v", err)
	}
	defer testdb.Close(db)
	ns := os.Getenv(childNSEnv)
	tally := newLogTally()
	mk := func(d time.Duration) (*election.Election, error) {
		return election.New(db, election.WithNamespace(ns), election.WithExpire(d), election.WithLogger(tally.logger()))
	}
	short, err := mk(multiShort)
	if err != nil {
		return fail("%v", err)
	}
	long, err := mk(multiLong)
	if err != nil {
		return fail("%v", err)
	}
	// Start barrier: announce readiness, wait for the others.
	ready := os.Getenv(childReadyEnv)
	procs, _ := strconv.Atoi(os.Getenv(childProcsEnv))
	if err := os.WriteFile(filepath.Join(ready, name), nil, 0o600); err != nil {
		return fail("%v", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		entries, err := os.ReadDir(ready)
		if err != nil {
			return fail("%v", err)
		}
		if len(entries) >= procs {
			break
		}
		if time.Now().After(deadline) {
			return fail("the other children did not start")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLedger()
	w := workload{short: short, long: long, rounds: multiRounds}
	began := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < multiGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, fmt.Sprintf("%s/%d", name, g), uuid.New(), rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano()))), l)
		}()
	}
	wg.Wait()
	if err := json.NewEncoder(out).Encode(l.file()); err != nil {
		return fail("%v", err)
	}
	// The parent shows this: retries the library absorbed, and warnings.
	tally.mu.Lock()
	defer tally.mu.Unlock()
	fmt.Fprintf(os.Stderr, "child %s: ran %v; retried transient conflicts %v; warnings %q\n", name, time.Since(began).Round(time.Millisecond), tally.retries, tally.warns)
	return 0
}

// Sizes of the multi-process test.
const (
	multiProcs      = 3
	multiGoroutines = 4
	multiRounds     = 60
	multiShort      = 150 * time.Millisecond
	multiLong       = 600 * time.Millisecond
)
