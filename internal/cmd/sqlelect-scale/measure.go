package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/fleet"
)

// result is what one size gives: its row of the main table, its rows of
// the table by table, its row of the overload table, and its point of the
// plot.
type result struct {
	row      string
	byTable  []string
	overload string
	point    point
}

// point is one measured size, for the plot. Rows are per interval, all
// processes together; negative when the server keeps no counts.
type point struct {
	m, p            int
	balance         bool
	perProcInterval float64
	rowsWritten     float64
	rowsRead        float64
}

// window is what was measured between two instants.
type window struct {
	from, to time.Time
	rows     rowCounts // nil when the server keeps no counts
	q0, q1   map[string]int64
	conns    int
}

func (w window) seconds() float64 { return w.to.Sub(w.from).Seconds() }

// perInterval turns a count over the window into a count per interval.
func (w window) perInterval(n float64, interval time.Duration) float64 {
	return n / w.seconds() * interval.Seconds()
}

// measure runs one size: a cold start, the steady window, the overload if
// any, the failover of a killed process, and the checker.
func measure(ctx context.Context, o options, dsn string, m, p int, balance bool) (result, error) {
	prefix := "scale-" + uuid.NewString()[:8]
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	f, err := fleet.Start(fleet.Options{
		Procs: p,
		Config: fleet.Config{
			DSN: dsn, Prefix: prefix, Namespaces: m, Expire: o.expire, Balance: balance,
			Conns: o.conns, Trace: o.trace, CPUProfile: o.cpuProfile, CPUProfileFor: o.profileFor,
		},
		Command: func() *exec.Cmd { return exec.Command(self) },
		Proxy:   o.overload.on(),
		Stderr:  os.Stderr,
	})
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	interval := o.expire / 3
	share := (m + p - 1) / p

	led, err := f.WaitAllLed(f.Started().Add(10*o.expire + 30*time.Second))
	cold := led.Sub(f.Started())
	if err != nil {
		cold = time.Since(f.Started())
	}
	title := fmt.Sprintf("%d x %d, balance %s, cold start", m, p, onOff(balance))
	if o.trace {
		// A failed cold start too: its statements say why.
		printTrace(os.Stderr, title, nil, f.Trace(), cold.Seconds(), p)
	}
	if o.timeline > 0 {
		printTimeline(os.Stderr, title, f, o.timeline, cold)
	}
	coldText := cold.Round(time.Millisecond).String()
	if err != nil {
		if !errors.Is(err, fleet.ErrNotAllLed) {
			return result{}, fmt.Errorf("cold start: %w after %v", err, cold.Round(time.Millisecond))
		}
		// A size the database cannot lead whole (overload): measured
		// all the same, from here, for its flaps and statements.
		coldText = fmt.Sprintf("**not all led**: %v after %v", err, cold.Round(time.Millisecond))
	}
	// With balancing, wait until the shares settle before the window.
	settle := time.Now().Add(30 * time.Second)
	for balance && f.MaxLed() > share+1 && time.Now().Before(settle) {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return result{}, err
		}
	}
	// The processes report their counts every half second: let the
	// reports catch up with the cold start before the window opens.
	if err := sleep(ctx, 1500*time.Millisecond); err != nil {
		return result{}, err
	}

	steady, mostLed, err := measureWindow(ctx, o, f, o.steady)
	if err != nil {
		return result{}, err
	}
	if n := f.Led(); n < m {
		coldText += fmt.Sprintf("; %d led at the steady window's end", n)
	}
	if o.trace {
		printTrace(os.Stderr, fmt.Sprintf("%d x %d, balance %s, steady window", m, p, onOff(balance)), steady.q0, steady.q1, steady.seconds(), p)
	}
	stmts := float64(f.Statements(steady.from, steady.to)) / steady.seconds()
	perProcInterval := stmts / float64(p) * interval.Seconds()

	var overRow string
	if o.overload.on() {
		overRow, err = measureOverload(ctx, o, f, m, p, balance, steady)
		if err != nil {
			return result{}, err
		}
	}

	failover, err := killOne(ctx, f, p, o.expire)
	if err != nil {
		return result{}, err
	}
	// Stop the others gracefully and check their histories.
	res, err := f.Stop(30 * time.Second)
	if err != nil {
		return result{}, err
	}

	connText := fmt.Sprint(steady.conns)
	if o.db == "sqlite" {
		connText = "n/a"
	}
	pt := point{m: m, p: p, balance: balance, perProcInterval: perProcInterval, rowsWritten: -1, rowsRead: -1}
	written, read := "n/a", "n/a"
	var byTable []string
	if steady.rows != nil {
		tot := steady.rows.total()
		pt.rowsWritten = steady.perInterval(float64(tot.written), interval)
		pt.rowsRead = steady.perInterval(float64(tot.read), interval)
		written, read = fmt.Sprintf("%.0f", pt.rowsWritten), fmt.Sprintf("%.0f", pt.rowsRead)
		for _, t := range steady.rows.tables() {
			r := steady.rows[t]
			if r.written == 0 && r.read == 0 {
				continue
			}
			byTable = append(byTable, fmt.Sprintf("| %d | %d | %s | %s | %.0f | %.0f |", m, p, onOff(balance), t,
				steady.perInterval(float64(r.written), interval), steady.perInterval(float64(r.read), interval)))
		}
	}
	row := fmt.Sprintf("| %d | %d | %s | %v | %d (%d new terms) | %.0f | %.2f | %s | %s | %s | %.1f %% | %d (%d) | %s | %d |",
		m, p, onOff(balance), coldText, f.Starts(steady.from, steady.to), f.NewTerms(steady.from, steady.to), stmts, perProcInterval,
		written, read, connText, 100*f.CPU(steady.from, steady.to)/steady.seconds()/float64(p), mostLed, share, failover, res.Total())
	if res.Total() != 0 {
		fmt.Fprintln(os.Stderr, res.String())
	}
	if overRow != "" {
		overRow += fmt.Sprintf(" %d |", res.Total())
	}
	return result{row: row, byTable: byTable, overload: overRow, point: pt}, nil
}

// measureWindow measures d from now: the server's row counts, the
// connections (polled every half second), the statement trace, and the
// most namespaces one process led.
func measureWindow(ctx context.Context, o options, f *fleet.Fleet, d time.Duration) (window, int, error) {
	w := window{from: time.Now(), q0: f.Trace()}
	var r0 rowCounts
	if o.rows.query != nil {
		var err error
		if r0, err = o.rows.query(ctx); err != nil {
			return w, 0, fmt.Errorf("reading the server's row counts: %w", err)
		}
	}
	mostLed := 0
	for time.Since(w.from) < d {
		if err := sleep(ctx, min(500*time.Millisecond, d-time.Since(w.from))); err != nil {
			return w, 0, err
		}
		if c, err := connections(o.electionDB, o.db); err == nil {
			w.conns = max(w.conns, c)
		}
		mostLed = max(mostLed, f.MaxLed())
	}
	w.to = time.Now()
	w.q1 = f.Trace()
	if o.rows.query != nil {
		r1, err := o.rows.query(ctx)
		if err != nil {
			return w, 0, fmt.Errorf("reading the server's row counts: %w", err)
		}
		w.rows = r1.sub(r0)
	}
	return w, mostLed, nil
}

// measureOverload puts the fault between the processes and the server,
// lifts it, and measures the fault and the window after it.
func measureOverload(ctx context.Context, o options, f *fleet.Fleet, m, p int, balance bool, steady window) (string, error) {
	interval := o.expire / 3
	errs0 := f.Errors()
	var apply, lift func()
	if o.overload.latency > 0 {
		apply = func() { f.SetLatency(o.overload.latency / 2) }
		lift = func() { f.SetLatency(0) }
	} else {
		apply, lift = f.Freeze, f.Thaw
	}
	// The server is read beside the fault, not through it.
	apply()
	during, _, err := measureWindow(ctx, o, f, o.overload.duration())
	lift()
	if err != nil {
		return "", err
	}
	// The window after the fault begins as it ends; meanwhile, the time
	// until every namespace is led again.
	end := during.to
	giveUp := 10*o.expire + 30*time.Second
	recovery := make(chan string, 1)
	allLed := f.Led() == m
	go func() {
		if allLed {
			recovery <- "0 (all led as it ended)"
			return
		}
		recovered, err := f.WaitAllLed(end.Add(giveUp))
		if err != nil {
			recovery <- fmt.Sprintf("not within %v: %v", giveUp, err)
			return
		}
		recovery <- max(recovered.Sub(end), 0).Round(time.Millisecond).String() + " after"
	}()
	after, _, err := measureWindow(ctx, o, f, o.overload.after)
	again := <-recovery
	if err != nil {
		return "", err
	}
	if o.trace {
		name := fmt.Sprintf("%d x %d, balance %s", m, p, onOff(balance))
		printTrace(os.Stderr, name+", during the overload", during.q0, during.q1, during.seconds(), p)
		printTrace(os.Stderr, name+", after the overload", after.q0, after.q1, after.seconds(), p)
	}
	perProc := func(w window) string {
		var sum, worst float64
		for _, pr := range f.Procs() {
			n := w.perInterval(float64(pr.Statements(w.from, w.to)), interval)
			sum += n
			worst = max(worst, n)
		}
		return fmt.Sprintf("%.2f (%.2f)", sum/float64(p), worst)
	}
	flaps := func(w window) string {
		n := f.Starts(w.from, w.to)
		perMin := float64(n) / w.seconds() * 60
		return fmt.Sprintf("%d (%.0f/min, %.1f %%; %d new terms)", n, perMin, 100*perMin/float64(m), f.NewTerms(w.from, w.to))
	}
	rows := func(ws ...window) (string, string) {
		var wr, rd []string
		for _, w := range ws {
			if w.rows == nil {
				return "n/a", "n/a"
			}
			t := w.rows.total()
			wr = append(wr, fmt.Sprintf("%.0f", w.perInterval(float64(t.written), interval)))
			rd = append(rd, fmt.Sprintf("%.0f", w.perInterval(float64(t.read), interval)))
		}
		return strings.Join(wr, " / "), strings.Join(rd, " / ")
	}
	written, read := rows(steady, during, after)
	stops := f.Stops(during.from, after.to)
	conns := fmt.Sprint(max(during.conns, after.conns))
	// The overlaps column is added once the checker has run.
	return fmt.Sprintf("| %d | %d | %s | %s / %s / %s | %s / %s | %s | %s | %s | %s | %s | %s |",
		m, p, onOff(balance), perProc(steady), perProc(during), perProc(after), flaps(during), flaps(after),
		mapText(stops), again, written, read, conns, mapText(diff(f.Errors(), errs0))), nil
}

// killOne kills the process leading the most, as a crash, and returns how
// long until every namespace it led had a leader again.
func killOne(ctx context.Context, f *fleet.Fleet, p int, expire time.Duration) (string, error) {
	var victim *fleet.Proc
	for _, pr := range f.Procs() {
		if victim == nil || pr.Leading() > victim.Leading() {
			victim = pr
		}
	}
	orphans := victim.LeadingNames()
	killed := time.Now()
	f.Kill(victim)
	if p == 1 {
		return "n/a (one process)", nil
	}
	deadline := time.Now().Add(5*expire + 10*time.Second)
	for {
		all := true
		for _, ns := range orphans {
			if !ledByAny(f, ns) {
				all = false
				break
			}
		}
		if all {
			return fmt.Sprintf("%v for %d namespaces (TTL %v)", time.Since(killed).Round(time.Millisecond), len(orphans), expire), nil
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("not all %d led again after %v", len(orphans), time.Since(killed).Round(time.Millisecond)), nil
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return "", err
		}
	}
}

func ledByAny(f *fleet.Fleet, ns string) bool {
	for _, pr := range f.Procs() {
		if pr.Leads(ns) {
			return true
		}
	}
	return false
}

// connections counts the sessions of the measured database, less the
// parent's own.
func connections(db *gorm.DB, name string) (int, error) {
	q, ok := connectionsSQL[name]
	if !ok {
		return 0, errors.New("no connections to count")
	}
	var n int
	err := db.Raw(q).Scan(&n).Error
	return n, err
}

// connectionsSQL counts the sessions of the current database but the
// caller's, by -db.
var connectionsSQL = map[string]string{
	"postgres": "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
	"mysql":    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// diff returns b - a, key by key, without zeros.
func diff(b, a map[string]int64) map[string]int64 {
	out := maps.Clone(b)
	for k, n := range a {
		out[k] -= n
	}
	maps.DeleteFunc(out, func(_ string, n int64) bool { return n == 0 })
	return out
}

// mapText writes a map as "k1 n1, k2 n2", by key; "none" when empty.
func mapText[N int | int64](m map[string]N) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
