package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/faultproxy"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/models"
	"github.com/sqlelect/sqlelect/session"
)

// Fault kinds, in the order the summary lists them.
var faultKinds = []string{"kill", "stop", "term", "resign", "cut", "delay", "server-restart"}

// summary is the outcome of one database's soak.
type summary struct {
	db          string
	duration    time.Duration
	elections   int64
	terms       int64 // granted, as the database counts them
	faults      map[string]int
	result      electiontest.Result
	childErrors int
	crashes     int
	procs       int
	electors    int
	namespaces  int
	// expected is how many elections the Electors would have made had
	// every round come at its interval, over the time each process ran.
	expected float64
	minRate  float64  // the least elections/expected that passes
	slow     []string // processes whose rounds ran far below their interval's rate
	// historyTerms counts the terms election_history holds;
	// historyProblems lists where it disagrees with the seats and with
	// what the processes saw (checkHistory).
	historyTerms    int
	historyProblems []string
}

// rate is the elections made as a fraction of the expected.
func (s summary) rate() float64 {
	if s.expected <= 0 {
		return 0
	}
	return float64(s.elections) / s.expected
}

// stalled reports whether rounds ran too far below the interval's rate for
// the run to mean anything: few elections are few chances to overlap.
func (s summary) stalled() bool { return s.rate() < s.minRate }

func (s summary) ok() bool {
	return s.result.OK() && s.crashes == 0 && s.elections > 0 && !s.stalled() && len(s.historyProblems) == 0
}

// String is the one summary line of the database.
func (s summary) String() string {
	var f []string
	total := 0
	for _, k := range faultKinds {
		if n := s.faults[k]; n > 0 {
			f = append(f, fmt.Sprintf("%s=%d", k, n))
			total += n
		}
	}
	verdict := "OK"
	if !s.ok() {
		verdict = "FAIL"
	}
	r := s.result
	line := fmt.Sprintf("%s: %s in %v: elections=%d (%.0f%% of the interval's rate) terms=%d faults=%d (%s) overlapping-terms=%d stale-writes=%d "+
		"split-terms=%d terms-backwards=%d foreign-writes=%d crashes=%d fenced-writes=%d observations=%d namespaces=%d processes=%d electors-per-process=%d process-errors=%d",
		s.db, verdict, s.duration.Round(time.Second), s.elections, 100*s.rate(), s.terms, total, strings.Join(f, " "),
		r.Count(electiontest.Overlap), r.Count(electiontest.StaleWrite), r.Count(electiontest.SplitTerm),
		r.Count(electiontest.Backwards), r.Count(electiontest.ForeignWrite), s.crashes, r.Writes, r.Observations,
		s.namespaces, s.procs, s.electors, s.childErrors)
	if s.stalled() {
		line += fmt.Sprintf("; STALLED: %d elections where the Electors' interval makes %.0f, %.0f%% (at least %.0f%% needed)",
			s.elections, s.expected, 100*s.rate(), 100*s.minRate)
	}
	if len(s.slow) > 0 {
		line += "; slow processes: " + strings.Join(s.slow, ", ")
	}
	line += fmt.Sprintf("; history-terms=%d history-mismatches=%d", s.historyTerms, len(s.historyProblems))
	if len(s.historyProblems) > 0 {
		line += ": " + strings.Join(s.historyProblems, "; ")
	}
	return line
}

// proc is one child process.
type proc struct {
	slot      int
	name      string
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited and its output is read
	ready     chan struct{}
	elections atomic.Int64
	// readyAt and exitAt bound the time its Electors ran (guarded by
	// soaker.mu; exitAt is zero while it runs).
	readyAt, exitAt time.Time
	expected        atomic.Bool // the parent stopped it (SIGKILL, SIGTERM)
	stderr          *tailBuffer
}

// soaker runs one database's soak.
type soaker struct {
	o       options
	name    string
	dsn     string
	rng     *mrand.Rand
	self    string
	until   time.Time // the end of the run: children retry their start until then
	ns      []string
	rec     *electiontest.Recorder
	proxies []*faultproxy.Proxy // per slot; nil for SQLite
	dsns    []string            // per slot

	mu          sync.Mutex
	procs       []*proc // every process ever started
	live        []*proc // per slot
	incarnation int
	childErrors int
	crashes     int
	faults      map[string]int
	leading     map[string]leader               // namespace -> the latest leader a process reported
	windows     map[string]electiontest.Release // keyed release windows, the latest of each key
}

// leader is a process that reported it started leading a namespace.
type leader struct {
	proc string
	term int64
}

func soak(ctx context.Context, o options, name, dsn string, seed uint64) (summary, error) {
	self, err := os.Executable()
	if err != nil {
		return summary{}, err
	}
	s := &soaker{o: o, name: name, dsn: dsn, rng: mrand.New(mrand.NewPCG(seed, seed>>1|1)), self: self,
		until: time.Now().Add(o.duration + time.Minute),
		rec:   electiontest.NewRecorder(), faults: map[string]int{}, leading: map[string]leader{}, windows: map[string]electiontest.Release{}}
	admin, err := session.Open(dsn, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return summary{}, err
	}
	defer closeDB(admin)
	if err := migrate.Up(ctx, admin); err != nil {
		return summary{}, err
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	for i := 0; i < o.namespaces; i++ {
		s.ns = append(s.ns, fmt.Sprintf("chaos.%s.%d", hex.EncodeToString(id[:]), i))
	}
	// Create the fence table once, before the processes race to.
	e, err := election.New(admin, election.WithNamespace(s.ns[0]))
	if err != nil {
		return summary{}, err
	}
	if _, err := electiontest.NewFence(ctx, admin, e, nil); err != nil {
		return summary{}, err
	}

	for slot := 0; slot < o.procs; slot++ {
		childDSN := dsn
		if s.proxied() {
			p, proxied, err := faultproxy.ForDSN(dsn)
			if err != nil {
				return summary{}, err
			}
			defer p.Close()
			s.proxies = append(s.proxies, p)
			childDSN = proxied
		}
		s.dsns = append(s.dsns, childDSN)
	}
	s.live = make([]*proc, o.procs)
	for slot := 0; slot < o.procs; slot++ {
		if err := s.start(slot); err != nil {
			return summary{}, err
		}
	}
	defer s.stopAll()
	for _, p := range s.live {
		select {
		case <-p.ready:
		case <-p.done:
			return summary{}, fmt.Errorf("process %s exited before it was ready", p.name)
		case <-time.After(2 * time.Minute):
			return summary{}, fmt.Errorf("process %s not ready after 2 minutes", p.name)
		}
	}

	start := time.Now()
	s.inject(ctx, start.Add(o.duration))
	s.stopAll()
	elapsed := time.Since(start)

	// What committed, as the database has it, and the terms it granted.
	sum := summary{db: name, duration: elapsed, faults: s.faults, procs: o.procs, electors: o.electors * o.namespaces, namespaces: o.namespaces}
	if err := s.loadFromDatabase(ctx, &sum); err != nil {
		return summary{}, err
	}
	s.rates(&sum, time.Now())
	sum.childErrors = s.childErrors
	sum.crashes = s.crashes
	if sum.elections == 0 {
		fmt.Fprintf(os.Stderr, "%s: no election was counted: the statements of Elect are not recognized any more\n", name)
	}
	for _, r := range s.windows {
		s.rec.ReleasedBetween(r.Namespace, r.Candidate, r.From, r.To)
	}
	sum.result = s.rec.Check()
	if err := s.checkHistories(ctx, &sum); err != nil {
		return summary{}, err
	}
	if !sum.result.OK() && o.events != "" {
		path := filepath.Join(o.events, name+"-history.json")
		if b, err := json.Marshal(s.rec.History()); err == nil && os.WriteFile(path, b, 0o644) == nil {
			fmt.Fprintf(os.Stderr, "%s: history written to %s\n", name, path)
		}
	}
	return sum, nil
}

// Thresholds of the rate check. Waits between rounds are 0.8 to 1 interval
// long, so a healthy process makes a little more than one round per
// interval and Elector; faults (pauses, cuts, kills, restarts) take some of
// that away. Under -min-rate of it (a quarter by default), the soak
// stalled.
const (
	defaultMinRate = 0.25
	// slowAfter is how long a process must have run for its own rate to
	// be judged.
	slowAfter = 5 * time.Second
)

// rates adds up each process's elections and what its interval would have
// made over the time it ran, and lists the processes that ran far below it.
func (s *soaker) rates(sum *summary, now time.Time) {
	perSecond := float64(s.o.namespaces*s.o.electors) / s.o.interval.Seconds()
	sum.minRate = s.o.minRate
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		n := p.elections.Load()
		sum.elections += n
		if p.readyAt.IsZero() {
			continue
		}
		end := p.exitAt
		if end.IsZero() {
			end = now
		}
		ran := end.Sub(p.readyAt)
		want := perSecond * ran.Seconds()
		sum.expected += want
		if ran >= slowAfter && float64(n) < s.o.minRate*want {
			sum.slow = append(sum.slow, fmt.Sprintf("%s %.0f%% over %v", p.name, 100*float64(n)/want, ran.Round(time.Second)))
		}
	}
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// loadFromDatabase records every committed fenced write and counts the
// terms, retrying while the database settles after the faults.
func (s *soaker) loadFromDatabase(ctx context.Context, sum *summary) error {
	var last error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		db, err := session.Open(s.dsn, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			last = err
			continue
		}
		last = func() error {
			defer closeDB(db)
			var writes []electiontest.Write
			var terms int64
			for _, ns := range s.ns {
				e, err := election.New(db, election.WithNamespace(ns))
				if err != nil {
					return err
				}
				f, err := electiontest.NewFence(ctx, db, e, nil)
				if err != nil {
					return err
				}
				ws, err := f.Writes(ctx)
				if err != nil {
					return err
				}
				writes = append(writes, ws...)
				var rows []models.Leader
				if err := db.Where("namespace = ?", ns).Find(&rows).Error; err != nil {
					return err
				}
				for _, r := range rows {
					terms += r.Term
				}
			}
			for _, w := range writes {
				s.rec.Wrote(w)
			}
			sum.terms = terms
			return nil
		}()
		if last == nil {
			return nil
		}
	}
	return fmt.Errorf("reading the results: %w", last)
}

// checkHistories cross-checks each namespace's history table with its seat
// and with what the processes reported.
func (s *soaker) checkHistories(ctx context.Context, sum *summary) error {
	db, err := session.Open(s.dsn, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	defer closeDB(db)
	h := s.rec.History()
	for _, ns := range s.ns {
		e, err := election.New(db, election.WithNamespace(ns))
		if err != nil {
			return err
		}
		var seat models.Leader
		if err := db.Where("namespace = ?", ns).Limit(1).Find(&seat).Error; err != nil {
			return err
		}
		n, problems, err := checkHistory(ctx, e, seat.Term, h)
		if err != nil {
			return fmt.Errorf("reading the history of %s: %w", ns, err)
		}
		sum.historyTerms += n
		sum.historyProblems = append(sum.historyProblems, problems...)
	}
	return nil
}

// proxied reports whether the processes reach the database through proxies.
func (s *soaker) proxied() bool { return s.o.proxy && !isSQLite(s.name) }

// isSQLite reports whether the database called name is a SQLite file
// (sqlite, or sqlite-DRIVER).
func isSQLite(name string) bool { return name == "sqlite" || strings.HasPrefix(name, "sqlite-") }

// start launches a new process in slot.
func (s *soaker) start(slot int) error {
	s.mu.Lock()
	s.incarnation++
	name := fmt.Sprintf("p%d.%d", slot, s.incarnation)
	s.mu.Unlock()
	cmd := exec.Command(s.self, "-child")
	cmd.Env = append(os.Environ(),
		envDSN+"="+s.dsns[slot],
		envName+"="+name,
		envNamespaces+"="+strings.Join(s.ns, ","),
		envElectors+"="+fmt.Sprint(s.o.electors),
		envExpire+"="+s.o.expire.String(),
		envInterval+"="+s.o.interval.String(),
		envUntil+"="+s.until.Format(time.RFC3339Nano),
	)
	if s.o.unfenced {
		cmd.Env = append(cmd.Env, envUnfenced+"=1")
	}
	if s.o.group {
		cmd.Env = append(cmd.Env, envGroup+"=1")
	}
	// A process group of its own: a Ctrl-C of the parent's terminal does
	// not reach the children before the parent stops them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	tail := &tailBuffer{max: 8 << 10}
	cmd.Stderr = tail
	if s.o.verbose {
		cmd.Stderr = io.MultiWriter(tail, prefixWriter{prefix: name + ": ", w: os.Stderr})
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &proc{slot: slot, name: name, cmd: cmd, done: make(chan struct{}), ready: make(chan struct{}), stderr: tail}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.live[slot] = p
	s.mu.Unlock()
	go s.read(p, stdout)
	return nil
}

// read feeds a process's events to the recorder until it exits.
func (s *soaker) read(p *proc, r io.Reader) {
	defer close(p.done)
	if s.o.events != "" {
		if f, err := os.Create(filepath.Join(s.o.events, s.name+"-"+p.name+".jsonl")); err == nil {
			defer f.Close()
			bw := bufio.NewWriterSize(f, 256<<10)
			defer bw.Flush()
			r = io.TeeReader(r, bw)
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	readyOnce := sync.Once{}
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// A line cut short by SIGKILL.
			continue
		}
		switch ev.Kind {
		case "obs":
			if ev.Lease != nil {
				s.rec.Observe(ev.Observer, *ev.Lease)
				if strings.HasSuffix(ev.Observer, "/start") {
					s.mu.Lock()
					if l := s.leading[ev.Lease.Namespace]; ev.Lease.Term >= l.term {
						s.leading[ev.Lease.Namespace] = leader{proc: p.name, term: ev.Lease.Term}
					}
					s.mu.Unlock()
				}
			}
		case "rel":
			if ev.Lease != nil {
				s.rec.Released(*ev.Lease)
			}
		case "relwin":
			if r := ev.Release; r != nil {
				if ev.Observer == "" {
					s.rec.ReleasedBetween(r.Namespace, r.Candidate, r.From, r.To)
				} else {
					// Keyed: a later event of the key replaces an earlier one.
					s.mu.Lock()
					s.windows[p.name+"/"+ev.Observer] = *r
					s.mu.Unlock()
				}
			}
		case "count":
			p.elections.Store(ev.Elections)
		case "ready":
			readyOnce.Do(func() {
				s.mu.Lock()
				p.readyAt = time.Now()
				s.mu.Unlock()
				close(p.ready)
			})
		case "err":
			s.mu.Lock()
			s.childErrors++
			s.mu.Unlock()
			if s.o.verbose {
				fmt.Fprintf(os.Stderr, "%s: %s\n", p.name, ev.Msg)
			}
		}
	}
	err := p.cmd.Wait()
	s.mu.Lock()
	p.exitAt = time.Now()
	s.mu.Unlock()
	if !p.expected.Load() {
		// Nobody stopped it: a crash, which the run reports as a failure.
		s.mu.Lock()
		s.crashes++
		restart := s.crashes <= 20 && s.live[p.slot] == p
		s.mu.Unlock()
		fmt.Fprintf(os.Stderr, "%s: process %s exited on its own (%v); its last output:\n%s\n", s.name, p.name, err, p.stderr.String())
		if restart {
			if err := s.start(p.slot); err != nil {
				fmt.Fprintf(os.Stderr, "%s: restarting slot %d: %v\n", s.name, p.slot, err)
			}
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// inject runs faults at random until deadline; the server restart comes
// once, when 40% of the time has passed.
func (s *soaker) inject(ctx context.Context, deadline time.Time) {
	restartAt := time.Now().Add(time.Until(deadline) * 4 / 10)
	restarted := !s.o.restartServer || isSQLite(s.name)
	kinds := []string{"kill", "stop", "term", "resign"}
	if s.proxied() {
		kinds = append(kinds, "cut", "delay")
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		gap := time.Duration(s.rng.Int64N(int64(2*s.o.faultGap)) + 1)
		time.Sleep(min(gap, time.Until(deadline)))
		if !time.Now().Before(deadline) {
			break
		}
		if !restarted && time.Now().After(restartAt) {
			restarted = true
			s.fault("server-restart", func() error { return restartServer(ctx, s.name, s.dsn) })
			continue
		}
		kind := kinds[s.rng.IntN(len(kinds))]
		slot := s.victim()
		s.fault(kind, func() error { return s.injectOne(kind, slot) })
	}
}

// victim picks the process a fault hits: mostly one that leads some
// namespace, since faults of leaders are what change terms and test the
// fence.
func (s *soaker) victim() int {
	if s.rng.IntN(4) > 0 {
		s.mu.Lock()
		l := s.leading[s.ns[s.rng.IntN(len(s.ns))]]
		for slot, p := range s.live {
			if p != nil && p.name == l.proc {
				s.mu.Unlock()
				return slot
			}
		}
		s.mu.Unlock()
	}
	return s.rng.IntN(s.o.procs)
}

// errNotReady is returned by a fault that its victim is not ready for; the
// fault is skipped.
var errNotReady = errors.New("the process is not ready")

func (s *soaker) fault(kind string, fn func() error) {
	start := time.Now()
	err := fn()
	if errors.Is(err, errNotReady) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: fault %s failed: %v\n", s.name, kind, err)
		return
	}
	s.faults[kind]++
	if s.o.verbose {
		fmt.Fprintf(os.Stderr, "%s: %s (%v)\n", s.name, kind, time.Since(start).Round(time.Millisecond))
	}
}

func (s *soaker) injectOne(kind string, slot int) error {
	s.mu.Lock()
	p := s.live[slot]
	s.mu.Unlock()
	expire := s.o.expire
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1)) }
	switch kind {
	case "kill":
		p.expected.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return s.start(slot)
	case "term":
		p.expected.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		return s.start(slot)
	case "stop":
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(between(2*expire, 4*expire))
		return p.cmd.Process.Signal(syscall.SIGCONT)
	case "resign":
		// A process that has not reported ready may not have set up its
		// signal handling yet, and SIGUSR1 would kill it; it leads nothing
		// yet anyway.
		select {
		case <-p.ready:
		default:
			return errNotReady
		}
		return p.cmd.Process.Signal(syscall.SIGUSR1)
	case "cut":
		s.proxies[slot].Cut()
		time.Sleep(between(expire/2, 3*expire))
		s.proxies[slot].Resume()
	case "delay":
		s.proxies[slot].SetDelay(between(time.Millisecond, expire/2))
		time.Sleep(between(expire, 4*expire))
		s.proxies[slot].SetDelay(0)
	}
	return nil
}

// stopAll stops every live process gracefully, then forcibly.
func (s *soaker) stopAll() {
	s.mu.Lock()
	live := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range live {
		select {
		case <-p.done:
			continue
		default:
		}
		if p != nil {
			p.expected.Store(true)
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range live {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// prefixWriter prefixes each write (a log line of a child) with the
// process's name.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	for _, l := range lines {
		if l != "" {
			if _, err := io.WriteString(p.w, p.prefix+l); err != nil {
				return 0, err
			}
		}
	}
	return len(b), nil
}
