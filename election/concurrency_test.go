package election_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// Sizes of the in-process contention tests.
const (
	contenders     = 32
	contendRounds  = 20
	contendShort   = 150 * time.Millisecond
	contendLong    = 600 * time.Millisecond
	freshRaces     = 6
	electionGroups = 4 // contenders share this many Election values per namespace
)

// TestConcurrentElect has many goroutines, each its own candidate, contend
// for one namespace on every database, and checks the whole history: one
// leader per term, no overlapping leases, terms never going back, and no
// error at all reaching a caller (no deadlock on MariaDB, no "database is
// locked" on SQLite). The history table must name the same terms and
// holders, without gaps.
func TestConcurrentElect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() != "sqlite" {
			// Leave connections for the tests running beside this one.
			testdb.Raw(t, db).SetMaxOpenConns(24)
		}
		t.Run("RaceToCreate", func(t *testing.T) { raceFresh(t, db, contenders, freshRaces) })
		t.Run("RaceDistinctNamespaces", func(t *testing.T) { raceDistinct(t, db, contenders) })
		t.Run("FreshNamespace", func(t *testing.T) { contend(t, db, false) })
		t.Run("ExistingNamespace", func(t *testing.T) { contend(t, db, true) })
	})
}

// raceFresh has n goroutines call Elect at the same moment on a namespace
// that has no leader row yet, rounds times: exactly one wins term 1 and all
// others are told so.
func raceFresh(t *testing.T, db *gorm.DB, n, rounds int) {
	ctx := testCtx(t)
	for r := 0; r < rounds; r++ {
		ns := fmt.Sprintf("%s.%d", testdb.Namespace(t), r)
		tally := newLogTally()
		es := make([]*election.Election, electionGroups)
		for i := range es {
			es[i] = mustElection(t, db, ns, election.WithLogger(tally.logger()))
		}
		start := make(chan struct{})
		l := newLedger()
		seen := make([][]election.Lease, n) // by goroutine
		var wg sync.WaitGroup
		for g := 0; g < n; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := uuid.New()
				name := strconv.Itoa(g)
				<-start
				for i := 1; i <= 2; i++ {
					lease, err := es[g%len(es)].Elect(ctx, id)
					if err != nil {
						l.fail(name, "Elect", id, err)
						continue
					}
					l.elect(name, lease)
					seen[g] = append(seen[g], lease)
				}
			}()
		}
		close(start)
		wg.Wait()
		res := l.check(t)
		tally.report(t)
		if res.Terms != 1 {
			t.Errorf("round %d: %d terms, want exactly term 1", r, res.Terms)
		}
		winners := map[uuid.UUID]bool{}
		for g, leases := range seen {
			for _, lease := range leases {
				winners[lease.Leader] = true
				if lease.Term != 1 {
					t.Errorf("round %d: %d saw term %d", r, g, lease.Term)
				}
			}
		}
		if len(winners) != 1 {
			t.Errorf("round %d: %d different leaders reported: %v", r, len(winners), winners)
		}
		if ids := mustList(t, es[0]); len(ids) != n {
			t.Errorf("round %d: %d candidates registered, want %d", r, len(ids), n)
		}
		if t.Failed() {
			return
		}
	}
}

// raceDistinct has n goroutines each create a namespace of its own at the
// same moment (on MariaDB at REPEATABLE READ such inserts deadlock each
// other through gap locks): every one of them wins term 1, without error.
func raceDistinct(t *testing.T, db *gorm.DB, n int) {
	ctx := testCtx(t)
	base := testdb.Namespace(t)
	tally := newLogTally()
	defer tally.report(t)
	es := make([]*election.Election, n)
	for i := range es {
		es[i] = mustElection(t, db, fmt.Sprintf("%s.%d", base, i), election.WithLogger(tally.logger()))
	}
	start := make(chan struct{})
	errs := make([]error, n)
	leases := make([]election.Lease, n)
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		ids[g] = uuid.New()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			leases[g], errs[g] = es[g].Elect(ctx, ids[g])
		}()
	}
	close(start)
	wg.Wait()
	for g := 0; g < n; g++ {
		if errs[g] != nil {
			t.Errorf("Elect in namespace %d: %v", g, errs[g])
		} else if leases[g].Leader != ids[g] || leases[g].Term != 1 {
			t.Errorf("Elect in namespace %d: %+v, want the caller in term 1", g, leases[g])
		}
	}
}

// contend runs the contention workload with many goroutines on one
// namespace, fresh or already led by another candidate.
func contend(t *testing.T, db *gorm.DB, existing bool) {
	ctx := testCtx(t)
	ns := testdb.Namespace(t)
	l := newLedger()
	tally := newLogTally()
	defer tally.report(t)
	if existing {
		pre := mustElection(t, db, ns, election.WithExpire(contendShort))
		z := uuid.New()
		lz := mustElect(t, pre, z)
		l.elect("setup", lz)
	}
	// Followers of a live lease only read, so the rounds can all be done
	// before the setup's lease ends: keep going until it surely has.
	var until time.Time
	if existing {
		until = time.Now().Add(2 * contendShort)
	}
	groups := make([]workload, electionGroups)
	for i := range groups {
		groups[i] = workload{
			short:  mustElection(t, db, ns, election.WithExpire(contendShort), election.WithLogger(tally.logger())),
			long:   mustElection(t, db, ns, election.WithExpire(contendLong), election.WithLogger(tally.logger())),
			rounds: contendRounds,
			until:  until,
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < contenders; g++ {
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
	if want := contenders * contendRounds; l.elects < want {
		t.Errorf("%d Elect results recorded, want %d", l.elects, want)
	}
	if res.Terms < 2 {
		t.Errorf("only %d terms: the workload never changed leaders", res.Terms)
	}
	row, ok := leaderRow(t, db, ns)
	if !ok || row.Term < int64(res.Terms) {
		t.Errorf("leader row %+v: its term is behind the %d terms seen", row, res.Terms)
	}
	checkHistory(t, db, ns, l.rec.History())
	t.Logf("%d Elect calls, %d terms, %d releases", l.elects, res.Terms, l.releases)
}

// TestMultiProcess runs the contention workload in several OS processes (the
// test binary started again in child mode) on one database, each writing
// what it saw to a file (its electiontest history, failed calls, counts),
// and checks the histories together, and against the history table.
func TestMultiProcess(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, db := testdb.Shared(t, tg)
			multiProcess(t, db, func(int) string { return dsn })
		})
	}
}

// TestMultiProcessSQLiteDrivers runs TestMultiProcess's workload on one
// SQLite file with the processes on alternate drivers: those of a program
// built with cgo (mattn/go-sqlite3) and of a static one (modernc.org/sqlite)
// share the file's locks, so they may run one election. (Two drivers in one
// process may not: each SQLite keeps its own table of the process's POSIX
// locks, which the kernel does not tell apart.)
func TestMultiProcessSQLiteDrivers(t *testing.T) {
	drivers := testdb.SQLiteDrivers()
	if len(drivers) < 2 {
		t.Skip("mattn/go-sqlite3 needs cgo")
	}
	path := filepath.Join(t.TempDir(), "shared.db")
	db := testdb.OpenDSN(t, drivers[0].SQLiteDSN(path))
	must(t, "migrate.Up", migrate.Up(testCtx(t), db))
	multiProcess(t, db, func(i int) string { return drivers[i%len(drivers)].SQLiteDSN(path) })
}

// multiProcess runs the contention workload in multiProcs child processes,
// child i on dsn(i), all on db's database, and checks what they saw.
func multiProcess(t *testing.T, db *gorm.DB, dsn func(i int) string) {
	t.Helper()
	ns := testdb.Namespace(t)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	if err := os.Mkdir(ready, 0o700); err != nil {
		t.Fatal(err)
	}
	type child struct {
		cmd    *exec.Cmd
		out    string
		output bytes.Buffer
	}
	children := make([]*child, multiProcs)
	for i := range children {
		c := &child{out: filepath.Join(dir, fmt.Sprintf("p%d.json", i))}
		c.cmd = exec.Command(os.Args[0], "-test.run=^$")
		c.cmd.Env = append(os.Environ(),
			childEnv+"="+fmt.Sprintf("p%d", i),
			childDSNEnv+"="+dsn(i),
			childNSEnv+"="+ns,
			childOutEnv+"="+c.out,
			childReadyEnv+"="+ready,
			childProcsEnv+"="+strconv.Itoa(multiProcs),
		)
		c.cmd.Stdout, c.cmd.Stderr = &c.output, &c.output
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("starting child %d: %v", i, err)
		}
		children[i] = c
	}
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v\n%s", i, err, c.output.String())
			continue
		}
		out := strings.TrimSpace(c.output.String())
		t.Log(out)
		if strings.Contains(out, "warnings [\"") {
			t.Errorf("child %d: the library warned", i)
		}
	}
	if t.Failed() {
		return
	}
	all := newLedger()
	for i, c := range children {
		f := readLedger(t, c.out)
		if want := multiGoroutines * multiRounds; f.Elects < want {
			t.Errorf("child %d recorded %d Elect results, want %d", i, f.Elects, want)
		}
		all.add(f)
	}
	res := all.check(t)
	if res.Terms < 2 {
		t.Errorf("only %d terms: the processes never changed leaders", res.Terms)
	}
	checkHistory(t, db, ns, all.rec.History())
	t.Logf("%d processes: %d Elect calls, %d terms, %d releases", multiProcs, all.elects, res.Terms, all.releases)
}

func readLedger(t *testing.T, path string) ledgerFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading a child's results: %v", err)
	}
	var f ledgerFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}
