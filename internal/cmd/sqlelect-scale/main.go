// Command sqlelect-scale measures Groups at scale: P candidate processes
// (separate OS processes, each with its own pool), each a Group over the
// same M namespaces, on one database. For each size it reports the time
// from a cold start until every namespace has a leader, the leadership
// changes during a steady window (flaps), the statements per second the
// processes sent and the connections they held, the CPU of a candidate
// process, the most namespaces one process led against the fair share, and
// the time until every namespace a killed process led has a leader again.
// The processes' leases go through the electiontest checker, which must
// find no overlapping terms.
//
//	go run ./internal/cmd/sqlelect-scale -db postgres -namespaces 16,128,1000 -procs 2,8,32
//
// DSNs come from SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN; SQLite uses
// a file in a temporary directory. make bench-scale runs the full matrix.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		if err := child(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "sqlelect-scale child:", err)
			os.Exit(1)
		}
		return
	}
	if err := parent(); err != nil {
		fmt.Fprintln(os.Stderr, "sqlelect-scale:", err)
		os.Exit(1)
	}
}

// event is one line a child writes on stdout.
type event struct {
	Kind  string         `json:"k"`             // ready, led, stopped, stats
	Lease election.Lease `json:"l"`             // led, stopped
	RT    int64          `json:"rt,omitempty"`  // stats: round trips so far
	CPU   float64        `json:"cpu,omitempty"` // stats: CPU seconds so far
	// Q counts the statements so far by kind and text (stats, with -trace).
	Q map[string]int64 `json:"q,omitempty"`
}

func child(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "")
	prefix := fs.String("prefix", "", "")
	m := fs.Int("namespaces", 1, "")
	expire := fs.Duration("expire", 2*time.Second, "")
	balance := fs.Bool("balance", false, "")
	out := fs.String("history", "", "")
	trace := fs.Bool("trace", false, "")
	conns := fs.Int("conns", 3, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &rtcount.Counter{}
	var qmu sync.Mutex
	byText := map[string]int64{}
	count := func(key string) {
		if *trace {
			qmu.Lock()
			byText[key]++
			qmu.Unlock()
		}
	}
	if *trace {
		c.Observe = func(k rtcount.Kind, query string) {
			key := k.String()
			if query != "" {
				key += " " + strings.Join(strings.Fields(query), " ")
				if len(key) > 90 {
					key = key[:90]
				}
			}
			qmu.Lock()
			byText[key]++
			qmu.Unlock()
		}
	}
	db, err := session.OpenWrapped(*dsn, c.Wrap)
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err == nil {
		// The listening connection (a pool of fewer than three has none:
		// handoffs then wait for the ticks), one for the rounds and one
		// for the attempts beside them. Idle connections are kept for an
		// expiry window: closed after each use, every attempt beside a
		// round dials a new one; kept for good, the attempts' connection
		// stays open once the seats are taken. database/sql hands out the
		// connection used last, so the rounds keep theirs and a process
		// holds two in the steady state.
		sqlDB.SetMaxOpenConns(*conns)
		sqlDB.SetMaxIdleConns(max(*conns-1, 1))
		sqlDB.SetConnMaxIdleTime(*expire)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	rec := electiontest.NewRecorder()
	id := uuid.New()
	name := id.String()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g, err := election.NewGroup(ctx, db, id, election.GroupConfig{
		Namespaces: names(*prefix, *m),
		Balance:    *balance,
		OnStartedLeading: func(lctx context.Context, l election.Lease) {
			rec.Observe(name, l)
			emit(event{Kind: "led", Lease: l})
			<-lctx.Done()
			rec.Released(l)
			emit(event{Kind: "stopped", Lease: l})
		},
	}, election.WithExpire(*expire), election.WithObserver(renewals{name: name, rec: rec, count: count}),
		election.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		var waits int64
		var waited time.Duration
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ev := event{Kind: "stats", RT: c.Total(), CPU: cpuSeconds()}
				if *trace {
					qmu.Lock()
					if sqlDB != nil {
						// Waits for a connection of the pool, in
						// calls and in milliseconds.
						st := sqlDB.Stats()
						byText["pool waits"] += st.WaitCount - waits
						byText["pool waited ms"] += (st.WaitDuration - waited).Milliseconds()
						waits, waited = st.WaitCount, st.WaitDuration
					}
					ev.Q = maps.Clone(byText)
					qmu.Unlock()
				}
				emit(ev)
			}
		}
	}()
	emit(event{Kind: "ready"})
	if err := g.Run(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(rec.History())
	if err != nil {
		return err
	}
	return os.WriteFile(*out, b, 0o600)
}

// renewals records every renewed lease for the checker.
// With -trace it also counts the outcomes, slow renewals and stops.
type renewals struct {
	election.NopObserver
	name  string
	rec   *electiontest.Recorder
	count func(key string)
}

func (r renewals) Attempt(a election.Attempt) {
	if a.Outcome == election.OutcomeRenewed || a.Outcome == election.OutcomeLed {
		r.rec.Observe(r.name, a.Lease)
	}
	r.count("outcome " + string(a.Outcome))
	if a.Err != nil {
		r.count("error " + a.ErrorClass + ": " + a.Err.Error())
	}
	if a.Outcome == election.OutcomeRenewed {
		for _, d := range []time.Duration{time.Second, 100 * time.Millisecond, 10 * time.Millisecond} {
			if a.Duration >= d {
				r.count("outcome renewed in >= " + d.String())
				break
			}
		}
	}
}

func (r renewals) LeadershipStopped(l election.Leadership) {
	r.count("stopped " + string(l.Reason))
}

func (r renewals) HandoffWake(w election.Wake) {
	r.count("wake " + w.Source)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func names(prefix string, m int) []string {
	out := make([]string, m)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%04d", prefix, i)
	}
	return out
}

// proc is a child process as the parent sees it.
type proc struct {
	cmd     *exec.Cmd
	history string
	mu      sync.Mutex
	leading map[string]int64 // namespace -> term
	starts  int
	rt      int64
	cpu     float64
	q       map[string]int64
}

func parent() error {
	db := flag.String("db", "postgres", "postgres, mysql or sqlite")
	nsList := flag.String("namespaces", "1,16,128,1000", "namespace counts (M)")
	procList := flag.String("procs", "2,8,32", "candidate process counts (P)")
	expire := flag.Duration("expire", 2*time.Second, "the expiry window (TTL)")
	steady := flag.Duration("steady", 20*time.Second, "the steady window in which flaps, statements and CPU are measured")
	balance := flag.String("balance", "both", "off, on or both")
	plotFile := flag.String("plot", "", "write an SVG plot of the statements per process per interval against the namespaces to this file")
	conns := flag.Int("conns", 3, "the most connections a candidate process opens (SetMaxOpenConns; one fewer are kept idle, for an expiry window)")
	flag.BoolVar(&traceStatements, "trace", false, "after each size, list the statements of the steady window by kind and text")
	flag.Parse()
	dsn, err := dsnFor(*db)
	if err != nil {
		return err
	}
	gdb, err := session.Open(dsn)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := migrate.Up(ctx, gdb); err != nil {
		return err
	}
	modes := map[string][]bool{"off": {false}, "on": {true}, "both": {false, true}}[*balance]
	if modes == nil {
		return fmt.Errorf("-balance %q: want off, on or both", *balance)
	}
	fmt.Printf("%s, TTL %v, interval %v, steady window %v\n", *db, *expire, *expire/3, *steady)
	if *db == "postgres" {
		var av string
		if err := gdb.Raw("SHOW autovacuum").Scan(&av).Error; err == nil && av != "on" {
			fmt.Printf("autovacuum is %s on this server: the election tables are vacuumed before each size, as autovacuum would keep them\n", av)
		}
	}
	var points []point
	fmt.Println("| M | P | balance | cold start to all led | flaps | statements/s | per process per interval | connections | CPU per process | max led (share) | failover of a killed process | overlaps |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range ints(*nsList) {
		for _, p := range ints(*procList) {
			for _, bal := range modes {
				tidy(ctx, gdb, *db)
				row, pt, err := measure(ctx, gdb, *db, dsn, m, p, bal, *expire, *steady, *conns)
				if err == nil {
					points = append(points, pt)
				} else {
					// A size that fails is reported in its row; the
					// others still run.
					row = fmt.Sprintf("| %d | %d | %s | **failed**: %v | | | | | | | | |", m, p, onOff(bal), err)
				}
				fmt.Println(row)
			}
		}
	}
	if *plotFile != "" {
		title := fmt.Sprintf("%s, TTL %v: statements per candidate process per interval", *db, *expire)
		// The target of docs/performance.md, for PostgreSQL, whose round is one
		// statement (elsewhere three).
		target := 0.0
		if *db == "postgres" {
			target = 2
		}
		if err := os.WriteFile(*plotFile, plotSVG(title, points, target), 0o644); err != nil {
			return err
		}
		fmt.Printf("plot written to %s\n", *plotFile)
	}
	return nil
}

// tidy deletes the rows earlier sizes left (their namespaces begin with
// "scale-") and, on PostgreSQL, vacuums the election tables: every
// heartbeat leaves a dead row version behind, and a server without
// autovacuum, or one that lags behind the earlier sizes, would make the
// next size pay for them.
func tidy(ctx context.Context, gdb *gorm.DB, db string) {
	for _, table := range []string{"election_candidates", "election_leaders", "election_history"} {
		gdb.WithContext(ctx).Exec("DELETE FROM "+table+" WHERE namespace LIKE ?", "scale-%")
	}
	if db == "postgres" {
		gdb.WithContext(ctx).Exec("VACUUM (ANALYZE) election_candidates, election_leaders, election_history")
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func dsnFor(db string) (string, error) {
	switch db {
	case "postgres":
		if v := os.Getenv("SQLELECT_POSTGRES_DSN"); v != "" {
			return v, nil
		}
		return "", errors.New("SQLELECT_POSTGRES_DSN is not set")
	case "mysql":
		if v := os.Getenv("SQLELECT_MYSQL_DSN"); v != "" {
			return v, nil
		}
		return "", errors.New("SQLELECT_MYSQL_DSN is not set")
	case "sqlite":
		dir, err := os.MkdirTemp("", "sqlelect-scale")
		if err != nil {
			return "", err
		}
		return "sqlite:" + filepath.Join(dir, "scale.db"), nil
	}
	return "", fmt.Errorf("-db %q: want postgres, mysql or sqlite", db)
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// point is one measured size, for the plot.
type point struct {
	m, p            int
	balance         bool
	perProcInterval float64
}

func measure(ctx context.Context, gdb *gorm.DB, dbName, dsn string, m, p int, balance bool, expire, steady time.Duration, conns int) (string, point, error) {
	prefix := "scale-" + uuid.NewString()[:8]
	dir, err := os.MkdirTemp("", "sqlelect-scale-run")
	if err != nil {
		return "", point{}, err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return "", point{}, err
	}
	procs := make([]*proc, p)
	start := time.Now()
	for i := range procs {
		pr := &proc{history: filepath.Join(dir, fmt.Sprintf("h%d.json", i)), leading: map[string]int64{}}
		pr.cmd = exec.Command(self, "-child", "-dsn", dsn, "-prefix", prefix, "-namespaces", strconv.Itoa(m),
			"-expire", expire.String(), "-balance="+strconv.FormatBool(balance), "-history", pr.history,
			"-trace="+strconv.FormatBool(traceStatements), "-conns", strconv.Itoa(conns))
		pr.cmd.Stderr = os.Stderr
		out, err := pr.cmd.StdoutPipe()
		if err != nil {
			return "", point{}, err
		}
		if err := pr.cmd.Start(); err != nil {
			return "", point{}, err
		}
		go pr.read(out)
		procs[i] = pr
	}
	defer func() {
		for _, pr := range procs {
			if pr.cmd.ProcessState == nil {
				_ = pr.cmd.Process.Kill()
				_ = pr.cmd.Wait()
			}
		}
	}()
	share := (m + p - 1) / p
	led := func() int {
		n := 0
		seen := map[string]bool{}
		for _, pr := range procs {
			pr.mu.Lock()
			for ns := range pr.leading {
				if !seen[ns] {
					seen[ns] = true
					n++
				}
			}
			pr.mu.Unlock()
		}
		return n
	}
	maxLed := func() int {
		most := 0
		for _, pr := range procs {
			pr.mu.Lock()
			most = max(most, len(pr.leading))
			pr.mu.Unlock()
		}
		return most
	}
	coldDeadline := time.Now().Add(10*expire + 30*time.Second)
	for led() < m {
		if time.Now().After(coldDeadline) {
			return "", point{}, fmt.Errorf("only %d of %d namespaces led after %v", led(), m, time.Since(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cold := time.Since(start)
	// With balancing, wait until the shares settle before the window.
	settle := time.Now().Add(30 * time.Second)
	for balance && maxLed() > share+1 && time.Now().Before(settle) {
		time.Sleep(50 * time.Millisecond)
	}
	sum := func() (starts int, rt int64, cpu float64) {
		for _, pr := range procs {
			pr.mu.Lock()
			starts += pr.starts
			rt += pr.rt
			cpu += pr.cpu
			pr.mu.Unlock()
		}
		return
	}
	// The children report their counts every half second: let the
	// reports catch up with the cold start before the window opens.
	time.Sleep(1500 * time.Millisecond)
	s0, rt0, cpu0 := sum()
	q0 := sumQ(procs)
	t0 := time.Now()
	seen := 0
	mostLed := 0
	for time.Since(t0) < steady {
		time.Sleep(500 * time.Millisecond)
		if c, err := connections(gdb, dbName); err == nil {
			seen = max(seen, c)
		}
		mostLed = max(mostLed, maxLed())
	}
	s1, rt1, cpu1 := sum()
	window := time.Since(t0).Seconds()
	if traceStatements {
		printTrace(os.Stderr, q0, sumQ(procs), window, p)
	}
	interval := (expire / 3).Seconds()
	stmts := float64(rt1-rt0) / window
	perProcInterval := stmts / float64(p) * interval

	// Crash failover: kill the process leading the most.
	var victim *proc
	for _, pr := range procs {
		pr.mu.Lock()
		if victim == nil || len(pr.leading) > len(victim.leading) {
			victim = pr
		}
		pr.mu.Unlock()
	}
	victim.mu.Lock()
	orphans := make([]string, 0, len(victim.leading))
	for ns := range victim.leading {
		orphans = append(orphans, ns)
	}
	victim.mu.Unlock()
	killed := time.Now()
	_ = victim.cmd.Process.Kill()
	_ = victim.cmd.Wait()
	victim.mu.Lock()
	victim.leading = map[string]int64{}
	victim.mu.Unlock()
	failover := "n/a (one process)"
	if p > 1 {
		deadline := time.Now().Add(5*expire + 10*time.Second)
		for {
			all := true
			for _, ns := range orphans {
				if !ledByOther(procs, victim, ns) {
					all = false
					break
				}
			}
			if all {
				failover = fmt.Sprintf("%v for %d namespaces (TTL %v)", time.Since(killed).Round(time.Millisecond), len(orphans), expire)
				break
			}
			if time.Now().After(deadline) {
				failover = fmt.Sprintf("not all %d led again after %v", len(orphans), time.Since(killed).Round(time.Millisecond))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	// Stop the others gracefully and check their histories.
	for _, pr := range procs {
		if pr != victim {
			_ = pr.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	rec := electiontest.NewRecorder()
	for _, pr := range procs {
		if pr == victim {
			continue
		}
		if err := pr.cmd.Wait(); err != nil {
			return "", point{}, fmt.Errorf("a candidate process: %w", err)
		}
		b, err := os.ReadFile(pr.history)
		if err != nil {
			return "", point{}, err
		}
		var h electiontest.History
		if err := json.Unmarshal(b, &h); err != nil {
			return "", point{}, err
		}
		rec.Add(h)
	}
	res := rec.Check()
	onOff := "off"
	if balance {
		onOff = "on"
	}
	connText := strconv.Itoa(seen)
	if dbName == "sqlite" {
		connText = "n/a"
	}
	pt := point{m: m, p: p, balance: balance, perProcInterval: perProcInterval}
	return fmt.Sprintf("| %d | %d | %s | %v | %d | %.0f | %.2f | %s | %.1f %% | %d (%d) | %s | %d |",
		m, p, onOff, cold.Round(time.Millisecond), s1-s0, stmts, perProcInterval, connText,
		100*(cpu1-cpu0)/window/float64(p), mostLed, share, failover, res.Total()), pt, nil
}

func ledByOther(procs []*proc, victim *proc, ns string) bool {
	for _, pr := range procs {
		if pr == victim {
			continue
		}
		pr.mu.Lock()
		_, ok := pr.leading[ns]
		pr.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// connections counts the sessions of the measured database, less the
// parent's own.
func connections(db *gorm.DB, name string) (int, error) {
	var n int
	var err error
	switch name {
	case "postgres":
		err = db.Raw("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&n).Error
	case "mysql":
		err = db.Raw("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()").Scan(&n).Error
	default:
		return 0, errors.New("no connections to count")
	}
	return n, err
}

func (pr *proc) read(r interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		pr.mu.Lock()
		switch ev.Kind {
		case "led":
			pr.leading[ev.Lease.Namespace] = ev.Lease.Term
			pr.starts++
		case "stopped":
			if pr.leading[ev.Lease.Namespace] == ev.Lease.Term {
				delete(pr.leading, ev.Lease.Namespace)
			}
		case "stats":
			pr.rt, pr.cpu = ev.RT, ev.CPU
			if ev.Q != nil {
				pr.q = ev.Q
			}
		}
		pr.mu.Unlock()
	}
}

// traceStatements is -trace: after each size, the statements of the steady
// window by kind and text.
var traceStatements bool

// sumQ adds up the processes' statement counts by kind and text.
func sumQ(procs []*proc) map[string]int64 {
	out := map[string]int64{}
	for _, pr := range procs {
		pr.mu.Lock()
		for k, n := range pr.q {
			out[k] += n
		}
		pr.mu.Unlock()
	}
	return out
}

// printTrace writes the statements counted between q0 and q1, most frequent
// first, per second and per process.
func printTrace(w io.Writer, q0, q1 map[string]int64, window float64, p int) {
	type line struct {
		key string
		n   int64
	}
	var lines []line
	for k, n := range q1 {
		if d := n - q0[k]; d > 0 {
			lines = append(lines, line{k, d})
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Compare(b.n, a.n) })
	for _, l := range lines {
		fmt.Fprintf(w, "  %8.2f/s per process  %s\n", float64(l.n)/window/float64(p), l.key)
	}
}
