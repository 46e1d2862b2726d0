package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/session"
)

// ChildEnv names the environment variable that makes a process a candidate
// process of a fleet: its value is the process's Config as JSON.
const ChildEnv = "SQLELECT_FLEET_CHILD"

// Config is what one candidate process runs.
type Config struct {
	// DSN is the database, as session.Open takes it.
	DSN string `json:"dsn"`
	// Prefix and Namespaces name the Group's namespaces (Names).
	Prefix     string `json:"prefix"`
	Namespaces int    `json:"namespaces"`
	// Expire is the expiry window (election.WithExpire).
	Expire time.Duration `json:"expire"`
	// Interval is GroupConfig.Interval; zero is the Group's default,
	// Expire/3.
	Interval time.Duration `json:"interval,omitempty"`
	// Balance is GroupConfig.Balance.
	Balance bool `json:"balance,omitempty"`
	// Conns is the most connections the process's pool opens
	// (SetMaxOpenConns; one fewer are kept idle, for an expiry window);
	// zero is 3: the listening connection, one for the rounds, one for the
	// attempts beside them.
	Conns int `json:"conns,omitempty"`
	// Trace counts the statements by kind and text, the attempts' outcomes
	// and the pool's waits, for Proc.Trace.
	Trace bool `json:"trace,omitempty"`
	// StatsEvery is how often the process reports its counts; zero is
	// 500 ms.
	StatsEvery time.Duration `json:"stats_every,omitempty"`
	// CPUProfile, when set, is a directory where the process writes a CPU
	// profile (cpu-<pid>.prof) of its first CPUProfileFor, or of its whole
	// life when that is zero.
	CPUProfile    string        `json:"cpu_profile,omitempty"`
	CPUProfileFor time.Duration `json:"cpu_profile_for,omitempty"`
	// History is the file the process writes its electiontest history to
	// when it stops; the fleet sets it.
	History string `json:"history,omitempty"`
}

func (c Config) conns() int {
	if c.Conns <= 0 {
		return 3
	}
	return c.Conns
}

func (c Config) statsEvery() time.Duration {
	if c.StatsEvery <= 0 {
		return 500 * time.Millisecond
	}
	return c.StatsEvery
}

// Names returns the namespaces of a fleet: prefix.0000, prefix.0001 and
// so on, m of them.
func Names(prefix string, m int) []string {
	out := make([]string, m)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%04d", prefix, i)
	}
	return out
}

// MaybeChild runs this process as a candidate process and exits, when
// ChildEnv is set; otherwise it returns at once. Call it first thing in
// main, or in TestMain, of the program a fleet starts again.
func MaybeChild() {
	v := os.Getenv(ChildEnv)
	if v == "" {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fleet child: %s: %v\n", ChildEnv, err)
		os.Exit(2)
	}
	if err := runChild(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// event is one line a candidate process writes on its stdout.
type event struct {
	Kind string `json:"k"` // ready, led, stopped, stats
	// Namespace, Term and Reason: led, stopped.
	Namespace string `json:"ns,omitempty"`
	Term      int64  `json:"t,omitempty"`
	Reason    string `json:"r,omitempty"`
	// Statements, CPU, Errors and Trace: stats, all so far.
	Statements int64            `json:"rt,omitempty"`
	CPU        float64          `json:"cpu,omitempty"`
	Errors     map[string]int64 `json:"e,omitempty"`
	Trace      map[string]int64 `json:"q,omitempty"`
}

// runChild is the body of a candidate process: a Group over the fleet's
// namespaces, reporting on out, until SIGTERM or an interrupt.
func runChild(cfg Config, out io.Writer) error {
	if cfg.CPUProfile != "" {
		stop, err := profileCPU(cfg.CPUProfile, cfg.CPUProfileFor)
		if err != nil {
			return err
		}
		defer stop()
	}
	c := &rtcount.Counter{}
	var (
		qmu    sync.Mutex
		trace  = map[string]int64{}
		errsBy = map[string]int64{}
	)
	count := func(m map[string]int64, key string) {
		qmu.Lock()
		m[key]++
		qmu.Unlock()
	}
	if cfg.Trace {
		c.Observe = func(k rtcount.Kind, query string) {
			key := k.String()
			if query != "" {
				key += " " + strings.Join(strings.Fields(query), " ")
				if len(key) > 90 {
					key = key[:90]
				}
			}
			count(trace, key)
		}
	}
	db, err := session.OpenWrapped(cfg.DSN, c.Wrap)
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	// The listening connection (a pool of fewer than three has none:
	// handoffs then wait for the ticks), one for the rounds and one for
	// the attempts beside them. Idle connections are kept for an expiry
	// window: closed after each use, every attempt beside a round dials a
	// new one; kept for good, the attempts' connection stays open once the
	// seats are taken. database/sql hands out the connection used last, so
	// the rounds keep theirs and a process holds two in the steady state.
	sqlDB.SetMaxOpenConns(cfg.conns())
	sqlDB.SetMaxIdleConns(max(cfg.conns()-1, 1))
	sqlDB.SetConnMaxIdleTime(cfg.Expire)

	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	rec := electiontest.NewRecorder()
	id := uuid.New()
	obs := &childObserver{rec: electiontest.NewObserver(rec, id.String()), emit: emit, trace: cfg.Trace,
		count: func(key string) { count(trace, key) }, countErr: func(key string) { count(errsBy, key) }}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g, err := election.NewGroup(ctx, db, id, election.GroupConfig{
		Namespaces: Names(cfg.Prefix, cfg.Namespaces),
		Interval:   cfg.Interval,
		Balance:    cfg.Balance,
		OnStartedLeading: func(lctx context.Context, l election.Lease) {
			rec.Observe(id.String(), l)
			<-lctx.Done()
		},
	}, election.WithExpire(cfg.Expire), election.WithObserver(obs),
		election.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(cfg.statsEvery())
		defer t.Stop()
		var (
			waits  int64
			waited time.Duration
		)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ev := event{Kind: "stats", Statements: c.Total(), CPU: cpuSeconds()}
				qmu.Lock()
				if cfg.Trace {
					// Waits for a connection of the pool, in calls and
					// in milliseconds.
					st := sqlDB.Stats()
					trace["pool waits"] += st.WaitCount - waits
					trace["pool waited ms"] += (st.WaitDuration - waited).Milliseconds()
					waits, waited = st.WaitCount, st.WaitDuration
					ev.Trace = maps.Clone(trace)
				}
				if len(errsBy) > 0 {
					ev.Errors = maps.Clone(errsBy)
				}
				qmu.Unlock()
				emit(ev)
			}
		}
	}()
	emit(event{Kind: "ready"})
	runErr := g.Run(ctx)
	if cfg.History == "" {
		return runErr
	}
	b, err := json.Marshal(rec.History())
	if err != nil {
		return errors.Join(runErr, err)
	}
	return errors.Join(runErr, os.WriteFile(cfg.History, b, 0o600))
}

// childObserver reports the Group's leaderships to the parent and records
// them for the checker (electiontest.Observer: every lease granted or
// renewed, and the terms the Group may give up early); with Trace it also
// counts the outcomes, slow renewals, stops and wake-ups.
type childObserver struct {
	election.NopObserver
	rec      *electiontest.Observer
	emit     func(event)
	trace    bool
	count    func(key string)
	countErr func(key string)
}

func (o *childObserver) Attempt(a election.Attempt) {
	o.rec.Attempt(a)
	if a.Err != nil {
		o.countErr(a.ErrorClass)
	}
	if !o.trace {
		return
	}
	o.count("outcome " + string(a.Outcome))
	if a.Err != nil {
		o.count("error " + a.ErrorClass + ": " + a.Err.Error())
	}
	if a.Outcome == election.OutcomeRenewed {
		for _, d := range []time.Duration{time.Second, 100 * time.Millisecond, 10 * time.Millisecond} {
			if a.Duration >= d {
				o.count("outcome renewed in >= " + d.String())
				break
			}
		}
	}
}

func (o *childObserver) LeadershipStarted(l election.Leadership) {
	o.rec.LeadershipStarted(l)
	o.emit(event{Kind: "led", Namespace: l.Namespace, Term: l.Lease.Term})
}

func (o *childObserver) LeadershipStopped(l election.Leadership) {
	o.rec.LeadershipStopped(l)
	o.emit(event{Kind: "stopped", Namespace: l.Namespace, Term: l.Lease.Term, Reason: string(l.Reason)})
	if o.trace {
		o.count("stopped " + string(l.Reason))
		if l.Reason == election.StopSteppedDown {
			// A term stepped down soon after it began was not renewed
			// once; a longer one stopped being renewed.
			o.count(fmt.Sprintf("stopped %s after a tenure under %v", l.Reason, tenureBucket(l.Tenure)))
		}
	}
}

func (o *childObserver) HandoffWake(w election.Wake) {
	if o.trace {
		o.count("wake " + w.Source)
	}
}

// cpuSeconds is the CPU time this process has used so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// tenureBucket is the smallest of a few bounds above d, for the trace.
func tenureBucket(d time.Duration) time.Duration {
	for _, b := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, time.Minute} {
		if d < b {
			return b
		}
	}
	return time.Hour
}

// profileCPU starts a CPU profile of this process in dir, which stops
// after d (unless d is zero) or when stop is called.
func profileCPU(dir string, d time.Duration) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.prof", os.Getpid())))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	stop = sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		f.Close()
	})
	if d > 0 {
		time.AfterFunc(d, stop)
	}
	return stop, nil
}
