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
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
}

func child(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "")
	prefix := fs.String("prefix", "", "")
	m := fs.Int("namespaces", 1, "")
	expire := fs.Duration("expire", 2*time.Second, "")
	balance := fs.Bool("balance", false, "")
	out := fs.String("history", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &rtcount.Counter{}
	db, err := session.OpenWrapped(*dsn, c.Wrap)
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		// Room for the LISTEN connection beside the rounds; one idle
		// connection kept, so a process holds two in the steady state.
		sqlDB.SetMaxOpenConns(3)
		sqlDB.SetMaxIdleConns(1)
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
	}, election.WithExpire(*expire), election.WithObserver(renewals{name: name, rec: rec}),
		election.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				emit(event{Kind: "stats", RT: c.Total(), CPU: cpuSeconds()})
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
type renewals struct {
	election.NopObserver
	name string
	rec  *electiontest.Recorder
}

func (r renewals) Attempt(a election.Attempt) {
	if a.Outcome == election.OutcomeRenewed || a.Outcome == election.OutcomeLed {
		r.rec.Observe(r.name, a.Lease)
	}
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
}

func parent() error {
	db := flag.String("db", "postgres", "postgres, mysql or sqlite")
	nsList := flag.String("namespaces", "1,16,128,1000", "namespace counts (M)")
	procList := flag.String("procs", "2,8,32", "candidate process counts (P)")
	expire := flag.Duration("expire", 2*time.Second, "the expiry window (TTL)")
	steady := flag.Duration("steady", 20*time.Second, "the steady window in which flaps, statements and CPU are measured")
	balance := flag.String("balance", "both", "off, on or both")
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
	fmt.Println("| M | P | balance | cold start to all led | flaps | statements/s | per process per interval | connections | CPU per process | max led (share) | failover of a killed process | overlaps |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range ints(*nsList) {
		for _, p := range ints(*procList) {
			for _, bal := range modes {
				tidy(ctx, gdb, *db)
				row, err := measure(ctx, gdb, *db, dsn, m, p, bal, *expire, *steady)
				if err != nil {
					// A size that fails is reported in its row; the
					// others still run.
					row = fmt.Sprintf("| %d | %d | %s | **failed**: %v | | | | | | | | |", m, p, onOff(bal), err)
				}
				fmt.Println(row)
			}
		}
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

func measure(ctx context.Context, gdb *gorm.DB, dbName, dsn string, m, p int, balance bool, expire, steady time.Duration) (string, error) {
	prefix := "scale-" + uuid.NewString()[:8]
	dir, err := os.MkdirTemp("", "sqlelect-scale-run")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	procs := make([]*proc, p)
	start := time.Now()
	for i := range procs {
		pr := &proc{history: filepath.Join(dir, fmt.Sprintf("h%d.json", i)), leading: map[string]int64{}}
		pr.cmd = exec.Command(self, "-child", "-dsn", dsn, "-prefix", prefix, "-namespaces", strconv.Itoa(m),
			"-expire", expire.String(), "-balance="+strconv.FormatBool(balance), "-history", pr.history)
		pr.cmd.Stderr = os.Stderr
		out, err := pr.cmd.StdoutPipe()
		if err != nil {
			return "", err
		}
		if err := pr.cmd.Start(); err != nil {
			return "", err
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
			return "", fmt.Errorf("only %d of %d namespaces led after %v", led(), m, time.Since(start))
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
	t0 := time.Now()
	conns := 0
	mostLed := 0
	for time.Since(t0) < steady {
		time.Sleep(500 * time.Millisecond)
		if c, err := connections(gdb, dbName); err == nil {
			conns = max(conns, c)
		}
		mostLed = max(mostLed, maxLed())
	}
	s1, rt1, cpu1 := sum()
	window := time.Since(t0).Seconds()
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
			return "", fmt.Errorf("a candidate process: %w", err)
		}
		b, err := os.ReadFile(pr.history)
		if err != nil {
			return "", err
		}
		var h electiontest.History
		if err := json.Unmarshal(b, &h); err != nil {
			return "", err
		}
		rec.Add(h)
	}
	res := rec.Check()
	onOff := "off"
	if balance {
		onOff = "on"
	}
	connText := strconv.Itoa(conns)
	if dbName == "sqlite" {
		connText = "n/a"
	}
	return fmt.Sprintf("| %d | %d | %s | %v | %d | %.0f | %.2f | %s | %.1f %% | %d (%d) | %s | %d |",
		m, p, onOff, cold.Round(time.Millisecond), s1-s0, stmts, perProcInterval, connText,
		100*(cpu1-cpu0)/window/float64(p), mostLed, share, failover, res.Total()), nil
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
		}
		pr.mu.Unlock()
	}
}
