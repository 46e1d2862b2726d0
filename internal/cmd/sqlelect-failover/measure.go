package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// proc is one child process.
type proc struct {
	n      int // spawn number, for messages
	id     uuid.UUID
	cmd    *exec.Cmd
	stdin  io.Closer
	ready  bool          // it has reported a first election round
	exited chan struct{} // closed once it has exited and its output is read
}

// event is one line from a child, timestamped on receipt.
type event struct {
	p    *proc
	kind string
	term int64
	at   time.Time
	line string
}

// cluster is the set of child processes of one database.
type cluster struct {
	c       config
	dsn, ns string
	self    string
	logs    *os.File
	events  chan event
	procs   map[*proc]bool // the live ones
	spawned int
	leader  *proc // the process that last reported LEAD, until it reports STOP
	term    int64 // the highest term reported
}

// kind of trial.
type kind string

const (
	crash    kind = "crash (SIGKILL)"
	graceful kind = "graceful (SIGTERM)"
)

// result is the trials of one kind on one database.
type result struct {
	db       string
	kind     kind
	samples  []time.Duration
	timeouts int
}

// measure runs the trials on one database.
func measure(ctx context.Context, c config, name, dsn, tmp string) ([]result, error) {
	if err := prepare(ctx, dsn); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	logPath := filepath.Join(tmp, name+"-children.log")
	logs, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	cl := &cluster{
		c: c, dsn: dsn, ns: "sqlelect-failover." + hex.EncodeToString(b[:]), self: self, logs: logs,
		events: make(chan event, 1024), procs: map[*proc]bool{},
	}
	defer cl.shutdown()
	for i := 0; i < c.procs; i++ {
		if err := cl.spawn(); err != nil {
			return nil, err
		}
	}
	res := map[kind]*result{crash: {db: name, kind: crash}, graceful: {db: name, kind: graceful}}
	// Interleaved, so both kinds see the same conditions.
	for i := 0; i < 2*c.trials; i++ {
		k := crash
		if i%2 == 1 {
			k = graceful
		}
		d, err := cl.trial(k)
		r := res[k]
		switch {
		case errors.Is(err, errTimeout):
			r.timeouts++
			fmt.Fprintf(os.Stderr, "  %s #%d: %v\n", k, len(r.samples)+r.timeouts, err)
		case err != nil:
			showLog(name, logPath)
			return nil, fmt.Errorf("%s trial: %w", k, err)
		default:
			r.samples = append(r.samples, d)
			if c.verbose {
				fmt.Fprintf(os.Stderr, "  %s #%d: %v\n", k, len(r.samples)+r.timeouts, d.Round(100*time.Microsecond))
			}
		}
	}
	showLog(name, logPath)
	return []result{*res[crash], *res[graceful]}, nil
}

// showLog prints the start of what the children wrote to stderr, if
// anything (warnings and errors only).
func showLog(name, path string) {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "  %s: the children logged:\n", name)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("... %d more lines", len(lines)-10))
	}
	for _, l := range lines {
		fmt.Fprintf(os.Stderr, "    %s\n", l)
	}
}

// prepare creates the election tables.
func prepare(ctx context.Context, dsn string) error {
	db, err := session.Open(dsn, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	defer func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return migrate.Up(ctx, db)
}

var errTimeout = errors.New("no new leader in time")

// trial stops the leader and returns the time until another process leads.
func (cl *cluster) trial(k kind) (time.Duration, error) {
	// Every process up and in the election, and a leader.
	if err := cl.until(20*cl.c.expire, func() bool {
		if cl.leader == nil {
			return false
		}
		for p := range cl.procs {
			if !p.ready {
				return false
			}
		}
		return true
	}); err != nil {
		return 0, fmt.Errorf("waiting for %d ready processes and a leader: %w", cl.c.procs, err)
	}
	// Let the leader renew a few times, and strike at a random point of
	// its renewal cycle.
	cl.drain(cl.c.interval + mrand.N(2*cl.c.interval))
	victim, term := cl.leader, cl.term
	sig := syscall.SIGKILL
	if k == graceful {
		sig = syscall.SIGTERM
	}
	t0 := time.Now()
	if err := victim.cmd.Process.Signal(sig); err != nil {
		return 0, err
	}
	var took time.Duration
	var newLeader bool
	var trace strings.Builder
	err := cl.untilEvent(5*cl.c.expire, func(ev event) bool {
		if cl.c.trace && k == graceful && ev.p != nil {
			who := "follower"
			if ev.p == victim {
				who = "leader"
			}
			fmt.Fprintf(&trace, "  %8.3f ms  %-8s %d  %s\n", float64(ev.at.Sub(t0).Microseconds())/1000, who, ev.p.n, ev.line)
		}
		if ev.kind == evLead && ev.p != victim && ev.term > term {
			took, newLeader = ev.at.Sub(t0), true
		}
		return newLeader
	})
	if trace.Len() > 0 {
		fmt.Printf("graceful trial, from SIGTERM:\n%s", trace.String())
	}
	// Whatever happened, replace the victim.
	if werr := cl.reap(victim); werr != nil {
		return 0, werr
	}
	if serr := cl.spawn(); serr != nil {
		return 0, serr
	}
	if err != nil {
		return 0, fmt.Errorf("%w after %v: %v", errTimeout, 5*cl.c.expire, err)
	}
	return took, nil
}

// spawn starts a child.
func (cl *cluster) spawn() error {
	cl.spawned++
	p := &proc{n: cl.spawned, id: uuid.New(), exited: make(chan struct{})}
	p.cmd = exec.Command(cl.self, "-child")
	p.cmd.Env = childEnv(cl.dsn, cl.ns, p.id, cl.c)
	p.cmd.Stderr = cl.logs
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	in, err := p.cmd.StdinPipe()
	if err != nil {
		return err
	}
	p.stdin = in
	if err := p.cmd.Start(); err != nil {
		return err
	}
	cl.procs[p] = true
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			at := time.Now()
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			ev := event{p: p, kind: f[0], at: at, line: sc.Text()}
			if len(f) > 1 {
				ev.term = parseTerm(f[len(f)-1])
			}
			cl.events <- ev
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return nil
}

// reap waits for p to exit (killing it if it takes too long) and forgets it.
func (cl *cluster) reap(p *proc) error {
	p.stdin.Close()
	deadline := time.NewTimer(5 * cl.c.expire)
	defer deadline.Stop()
	for {
		select {
		case ev := <-cl.events:
			cl.apply(ev)
		case <-p.exited:
			delete(cl.procs, p)
			if cl.leader == p {
				cl.leader = nil
			}
			return nil
		case <-deadline.C:
			_ = p.cmd.Process.Kill()
		}
	}
}

// shutdown stops every child.
func (cl *cluster) shutdown() {
	for p := range cl.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for p := range cl.procs {
		_ = cl.reap(p)
	}
}

// apply updates the cluster's state with an event.
func (cl *cluster) apply(ev event) {
	switch ev.kind {
	case evSeen:
		ev.p.ready = true
	case evLead:
		ev.p.ready = true
		if ev.term >= cl.term {
			cl.leader, cl.term = ev.p, ev.term
		}
	case evStop:
		if cl.leader == ev.p {
			cl.leader = nil
		}
	}
}

// until processes events until cond holds or d passes.
func (cl *cluster) until(d time.Duration, cond func() bool) error {
	return cl.untilEvent(d, func(event) bool { return cond() })
}

// untilEvent processes events until cond, called after each one, holds.
func (cl *cluster) untilEvent(d time.Duration, cond func(event) bool) error {
	if cond(event{}) {
		return nil
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case ev := <-cl.events:
			cl.apply(ev)
			if cond(ev) {
				return nil
			}
		case <-deadline.C:
			return fmt.Errorf("gave up after %v", d)
		}
	}
}

// drain processes events for d.
func (cl *cluster) drain(d time.Duration) {
	_ = cl.untilEvent(d, func(event) bool { return false })
}

// quantile is the nearest-rank quantile of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// table formats the results as markdown.
func table(c config, rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| database | stop | trials | p50 | p99 | max | p50 / expire | p99 / expire | target (p99) | met |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range rs {
		s := append([]time.Duration(nil), r.samples...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		p50, p99 := quantile(s, 0.50), quantile(s, 0.99)
		var target time.Duration
		var targetText string
		switch {
		case r.kind == crash:
			// Followers try at the lease's edge.
			target = c.expire + 25*time.Millisecond
			targetText = fmt.Sprintf("≤ %s (expire + 25 ms)", ms(target))
		default:
			// Candidates in other processes are woken when the seat is
			// vacated, on every database.
			target = 10 * time.Millisecond
			targetText = "≤ 10 ms (" + wakeBy(r.db) + ")"
		}
		met := "yes"
		if p99 > target || r.timeouts > 0 || len(s) == 0 {
			met = "**no**"
		}
		trials := fmt.Sprint(len(s))
		if r.timeouts > 0 {
			trials += fmt.Sprintf(" (+%d timed out)", r.timeouts)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.3f | %.3f | %s | %s |\n",
			r.db, r.kind, trials, ms(p50), ms(p99), ms(quantile(s, 1)),
			ratio(p50, c.expire), ratio(p99, c.expire), targetText, met)
	}
	fmt.Fprintf(&b, "\nexpire %v, interval %v, %d candidate processes; p50/p99 by nearest rank (with fewer than 100 trials, p99 is the largest sample).", c.expire, c.interval, c.procs)
	return b.String()
}

// wakeBy names how candidates in other processes learn of a vacated seat on
// database db.
func wakeBy(db string) string {
	switch db {
	case "postgres":
		return "LISTEN/NOTIFY"
	case "sqlite", "sqlite-mattn", "sqlite-modernc":
		if runtime.GOOS == "linux" {
			return "notification file"
		}
		return "none on " + runtime.GOOS
	}
	return "KILL QUERY wake-up"
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.3f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func ratio(d, expire time.Duration) float64 { return float64(d) / float64(expire) }
