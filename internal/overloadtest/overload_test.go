// Package overloadtest checks that a fleet of Groups degrades under an
// overloaded or stalled database and recovers without a storm: four
// candidate processes (this test binary started again, see
// internal/fleet), each a balanced Group over the same 64 namespaces with
// an expiry window of 2 s, each reaching the server through a fault proxy
// of its own. Once the fleet has settled, the proxies add latency for a
// while, then stall every connection for less than the leaders' trust
// margin, then stall them past the trust window (every leader steps
// down), and the test checks after each:
//
//   - no process sends more than 3 statements per interval, counted at
//     its driver (internal/rtcount), while the database cannot keep up:
//     from the start of the fault until 2 × TTL after it ends when
//     leaders keep their seats; after the long stall too where a Group's
//     round is one statement (PostgreSQL, MariaDB), but only during it on
//     MySQL, whose rounds of two or three statements, with the listeners'
//     reconnects and the prunes that came due in the stall on top, send
//     more over the 2 × TTL of the re-election after (bounded there by
//     the flap storm check below);
//   - every namespace is led again within 2 × TTL after the fault ends;
//   - while renewals can still answer within the trust window (the
//     latency and the short stall), leaders keep their seats: flaps at
//     most 1 % of the namespaces per minute, rounded up; after the long
//     stall, each namespace is led again once and moved at most once
//     more by balancing (no flap storm), at most two seats a process are
//     handed over by balancing (each taken above the share), and the
//     fleet settles;
//   - the electiontest checker finds no overlapping terms.
//
// It runs on PostgreSQL and MySQL/MariaDB when their DSNs are set
// (SQLELECT_POSTGRES_DSN, SQLELECT_MYSQL_DSN), on the loopback interface;
// with CI=true a missing one fails it. The figures of each phase are
// logged (go test -v).
package overloadtest

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/fleet"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

func TestMain(m *testing.M) {
	fleet.MaybeChild()
	goleak.VerifyTestMain(m)
}

const (
	procs      = 4
	namespaces = 64
	expire     = 2 * time.Second
	interval   = expire / 3 // the Group's default
	// trustMargin is the Group's default SafetyMargin: a leader trusts a
	// lease until its round's start plus expire - trustMargin.
	trustMargin = expire / 5
	// maxPerInterval is the bound on the statements one process
	// sends per interval, overloaded or not.
	maxPerInterval = 3.0
	// flapShare is the bound on flaps once settled: 1 % of the
	// namespaces per minute.
	flapShare = 0.01
)

// phase is one fault put between the fleet and the server.
type phase struct {
	name  string
	what  string // for the log
	apply func(f *fleet.Fleet)
	hold  time.Duration
	lift  func(f *fleet.Fleet)
	// keepSeats: renewals can still answer within the trust window, so
	// leaders must keep their seats.
	keepSeats bool
}

// roundTrip is the latency the first phase adds to every round trip: a
// Group's round is one statement on PostgreSQL and MariaDB and up to
// three on MySQL, so that a round takes 400 ms or 600 ms more, less than
// an interval, and a round started one interval after the last renews
// within the trust window that round left (expire - trustMargin = 1.6 s
// from its start) with 530 ms to spare.
func roundTrip(oneStatement bool) time.Duration {
	if oneStatement {
		return 400 * time.Millisecond
	}
	return 200 * time.Millisecond
}

const (
	shortStall = 600 * time.Millisecond
	longStall  = expire - trustMargin + 200*time.Millisecond
)

// phases are the faults, one after another on one fleet. The latency is
// roundTrip (half each way) for 6 s. The short stall holds every byte for
// 600 ms: a renewal sent before it answers at most 600 ms later, and the
// round before it, at most one interval earlier, left the leader trusted
// for expire - trustMargin - interval = 933 ms more. The long stall holds
// every byte for 1.8 s, less than a lease but longer than any trust
// window, so every leader steps down.
func phases(rt time.Duration) []phase {
	return []phase{
		{name: "latency", what: fmt.Sprintf("%v more per round trip for 6s", rt), apply: func(f *fleet.Fleet) { f.SetLatency(rt / 2) }, hold: 6 * time.Second,
			lift: func(f *fleet.Fleet) { f.SetLatency(0) }, keepSeats: true},
		{name: "short_stall", what: fmt.Sprintf("every connection stalled for %v", shortStall), apply: (*fleet.Fleet).Freeze,
			hold: shortStall, lift: (*fleet.Fleet).Thaw, keepSeats: true},
		{name: "long_stall", what: fmt.Sprintf("every connection stalled for %v", longStall), apply: (*fleet.Fleet).Freeze,
			hold: longStall, lift: (*fleet.Fleet).Thaw},
	}
}

func TestOverload(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			runOverload(t, tg)
		})
	}
}

func runOverload(t *testing.T, tg testdb.Target) {
	one := oneStatementRound(t, tg)
	rt := roundTrip(one)
	// A database of its own: on the MySQL family a handoff interrupts the
	// wait of every listener of the database (the wake-up names no
	// namespace, and every process it wakes runs a round), and the other
	// packages' tests, run beside this one, vacate seats all the time. In
	// the shared database they drove these processes past the bound.
	dsn := testdb.Fresh(t, tg)
	testdb.Open(t, testdb.Target{Name: tg.Name, DSN: dsn})
	var stderr fleet.Log
	f, err := fleet.Start(fleet.Options{
		Procs: procs,
		Config: fleet.Config{
			DSN: dsn, Prefix: testdb.Namespace(t), Namespaces: namespaces,
			Expire: expire, Balance: true, StatsEvery: 100 * time.Millisecond, Trace: true,
		},
		Command: func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") },
		Proxy:   true,
		Stderr:  &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer func() {
		if t.Failed() {
			t.Logf("the processes' standard error (warnings):\n%s", stderr.Tail(60))
		}
	}()

	led, err := f.WaitAllLed(f.Started().Add(30 * time.Second))
	if err != nil {
		t.Fatalf("cold start: %v", err)
	}

	t.Logf("cold start: every namespace led %v after the processes started", led.Sub(f.Started()).Round(time.Millisecond))
	settledAt, err := settle(f, 30*time.Second)
	if err != nil {
		t.Fatalf("the fleet did not settle after the cold start: %v", err)
	}

	// A window without a fault, for comparison.
	from := time.Now()
	time.Sleep(4 * time.Second)
	to := time.Now()
	t.Logf("settled, no fault, %v: statements per process per interval %s; flaps %d since the fleet settled",
		to.Sub(from).Round(time.Millisecond), perInterval(f, from, to), f.Starts(settledAt, to))
	if n, bound := f.Starts(settledAt, to), flapBound(to.Sub(settledAt)); n > bound {
		t.Errorf("%d flaps in %v without any fault, want at most %d", n, to.Sub(settledAt).Round(time.Millisecond), bound)
	}

	for _, p := range phases(rt) {
		ok := t.Run(p.name, func(t *testing.T) { runPhase(t, f, p, one) })
		if !ok {
			if _, err := settle(f, 30*time.Second); err != nil {
				t.Fatalf("the fleet did not settle after %s: %v", p.name, err)
			}
		}
	}

	res, err := f.Stop(30 * time.Second)
	if err != nil {
		t.Error(err)
	}
	t.Logf("checker: %d terms, %d observations", res.Terms, res.Observations)
	if res.Total() != 0 {
		t.Error(res.Err())
	}
}

// oneStatementRound reports whether a Group's round is one statement on
// tg's server (PostgreSQL, MariaDB).
func oneStatementRound(t *testing.T, tg testdb.Target) bool {
	t.Helper()
	db := testdb.Open(t, tg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := dialect.For(db)
	if err == nil {
		d, err = dialect.Detect(ctx, db, d)
	}
	if err != nil {
		t.Fatalf("detecting the server: %v", err)
	}
	return dialect.OneStatementRound(d)
}

// runPhase puts p's fault between the fleet and the server, lifts it, and
// checks what the fleet did meanwhile and in the 2 × TTL after.
func runPhase(t *testing.T, f *fleet.Fleet, p phase, oneStatement bool) {
	errs0, q0 := f.Errors(), f.Trace()
	start := time.Now()
	p.apply(f)
	time.Sleep(p.hold)
	p.lift(f)
	end := time.Now()
	allLed := f.Led() == namespaces
	window := end.Add(2 * expire)

	// Every namespace led again within 2 × TTL of the end.
	var recovery time.Duration
	recovered, err := f.WaitAllLed(window)
	if err != nil {
		t.Errorf("not every namespace led again within 2 × TTL (%v) after the fault ended: %v", 2*expire, err)
	} else if !allLed {
		recovery = max(recovered.Sub(end), 0)
	}
	// The children report every 100 ms: wait for the reports of the window.
	time.Sleep(time.Until(window) + 300*time.Millisecond)

	flaps := f.Starts(start, window)
	stops := f.Stops(start, window)
	t.Logf("%s: statements per process per interval %s (during and 2 × TTL after; worst %v %s); flaps %d; ends of leadership %v; failed rounds and attempts %v; every namespace led %v after the fault ended",
		p.what, perInterval(f, start, window), (3 * interval).Round(time.Millisecond), worstSlot(f, start, window), flaps, stops,
		diff(f.Errors(), errs0), recovery.Round(time.Millisecond))

	// While the database cannot keep up: the fault and the 2 × TTL after
	// it, but for the re-election after a stall where a round is several
	// statements (see the package comment).
	until, while := window, "from the start of the fault until 2 × TTL after it"
	if !p.keepSeats && !oneStatement {
		until, while = end, "during the fault"
	}
	// Rounds come whole: a window of 2.7 intervals (the long stall) can
	// hold the starts of three rounds of a process that keeps to one an
	// interval, so the bound is per interval begun in the window.
	begun := math.Ceil(until.Sub(start).Seconds() / interval.Seconds())
	over := false
	for _, pr := range f.Procs() {
		n := pr.Statements(start, until)
		if float64(n) > maxPerInterval*begun {
			over = true
			t.Errorf("process %d sent %d statements in %v (%.0f intervals begun) %s, want at most %g per interval",
				pr.Index, n, until.Sub(start).Round(time.Millisecond), begun, while, maxPerInterval)
		}
	}
	if over {
		t.Logf("from the start of the fault until 2 × TTL after it, every process:\n%s", topCounts(diff(f.Trace(), q0), 16))
	}
	if p.keepSeats {
		if bound := flapBound(window.Sub(start)); flaps > bound {
			t.Errorf("%d flaps while renewals could still answer within the trust window, want at most %d (1 %% of %d namespaces per minute): ends of leadership %v",
				flaps, bound, namespaces, stops)
		}
	}
	settledAt, err := settle(f, 20*time.Second)
	if err != nil {
		t.Errorf("the fleet did not settle after the fault: %v (%d flaps since it ended)", err, f.Starts(end, time.Now()))
		return
	}
	if !p.keepSeats {
		// Each namespace led again once, and moved at most once more by
		// balancing.
		if n := f.Starts(end, settledAt); n > 2*namespaces {
			t.Errorf("%d leaderships started between the end of the fault and the fleet settling %v later, want at most %d (a flap storm)",
				n, settledAt.Sub(end).Round(time.Millisecond), 2*namespaces)
		}
		// A few seats move by balancing, each one taken above the share;
		// a process that counted the others gone (their member rows
		// lapsed in the same stall) would take their seats and hand a
		// share's worth back.
		if n := f.Stops(end, settledAt)["balanced"]; n > 2*procs {
			t.Errorf("%d seats handed over by balancing between the end of the fault and the fleet settling, want at most %d (two a process)", n, 2*procs)
		}
	}
}

// settle waits until every namespace is led, no process leads more than
// its share plus one, and no leadership has started for 2 s; it returns
// when that began, or an error after timeout.
func settle(f *fleet.Fleet, timeout time.Duration) (time.Time, error) {
	const quiet = 2 * time.Second
	share := (namespaces + procs - 1) / procs
	deadline := time.Now().Add(timeout)
	for {
		now := time.Now()
		if f.Led() == namespaces && f.MaxLed() <= share+1 && f.Starts(now.Add(-quiet), now.Add(time.Hour)) == 0 {
			return now.Add(-quiet), nil
		}
		if now.After(deadline) {
			return time.Time{}, fmt.Errorf("after %v: %d of %d namespaces led, one process leads %d (share %d), %d flaps in the last %v",
				timeout, f.Led(), namespaces, f.MaxLed(), share, f.Starts(now.Add(-quiet), now.Add(time.Hour)), quiet)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flapBound is the most flaps allowed in d once settled: 1 % of the
// namespaces per minute, rounded up.
func flapBound(d time.Duration) int {
	return int(math.Ceil(flapShare * namespaces * d.Minutes()))
}

// perInterval lists each process's statements per interval in [from, to).
func perInterval(f *fleet.Fleet, from, to time.Time) string {
	intervals := to.Sub(from).Seconds() / interval.Seconds()
	var parts []string
	for _, pr := range f.Procs() {
		parts = append(parts, fmt.Sprintf("%.2f", float64(pr.Statements(from, to))/intervals))
	}
	return strings.Join(parts, " ")
}

// worstSlot gives the most statements a process sent in a slot of three
// intervals in [from, to), per interval.
func worstSlot(f *fleet.Fleet, from, to time.Time) string {
	var most int64
	for _, pr := range f.Procs() {
		n, _ := pr.MostStatements(from, to, 3*interval)
		most = max(most, n)
	}
	return fmt.Sprintf("%.2f", float64(most)/3)
}

// diff returns b - a, key by key, without zeros.
// topCounts lists the n largest counts of q, one a line, the text cut
// short.
func topCounts(q map[string]int64, n int) string {
	keys := slices.SortedFunc(maps.Keys(q), func(a, b string) int { return int(q[b] - q[a]) })
	var b strings.Builder
	for _, k := range keys[:min(n, len(keys))] {
		text := k
		if len(text) > 160 {
			text = text[:160]
		}
		fmt.Fprintf(&b, "%8d  %s\n", q[k], text)
	}
	return b.String()
}

func diff(b, a map[string]int64) map[string]int64 {
	out := maps.Clone(b)
	for k, n := range a {
		out[k] -= n
	}
	for _, k := range slices.Collect(maps.Keys(out)) {
		if out[k] == 0 {
			delete(out, k)
		}
	}
	return out
}
