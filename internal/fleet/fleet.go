// Package fleet runs candidate processes, each an election.Group over the
// same namespaces on one database, for internal/cmd/sqlelect-scale and the
// overload test (internal/overloadtest).
//
// The program, or test binary, that starts a fleet is started again as
// each of its processes, with the process's Config in the environment
// (ChildEnv); it must call MaybeChild first thing, in main or TestMain.
// The parent follows, from the lines each process writes on its stdout,
// which namespaces it leads and when each leadership started and why it
// ended, the statements it sent (counted at its driver by
// internal/rtcount), its CPU time and its failed rounds and attempts by
// class. Each process may reach the database through a faultproxy of its
// own, so that latency or a stall can be put between the fleet and the
// server. Stop ends the processes gracefully and checks every lease they
// saw with the electiontest checker.
package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/faultproxy"
)

// Options say how to start a fleet.
type Options struct {
	// Procs is the number of candidate processes.
	Procs int
	// Config is what every process runs; its History is set per process.
	Config Config
	// Command returns a command that starts this program again (MaybeChild
	// then runs the process); the fleet adds ChildEnv to its environment
	// and takes its stdout. A test binary: exec.Command(os.Args[0],
	// "-test.run=^$").
	Command func() *exec.Cmd
	// Proxy puts a faultproxy of its own between each process and the
	// server (PostgreSQL or MySQL on the loopback interface), for
	// SetLatency, Freeze and Thaw.
	Proxy bool
	// Stderr receives the processes' standard error, each line prefixed
	// with the process's index; nil discards it.
	Stderr io.Writer
}

// Fleet is a set of running candidate processes.
type Fleet struct {
	procs   []*Proc
	proxies []*faultproxy.Proxy
	dir     string
	stderr  *lineWriter
	started time.Time
	m       int
}

// Proc is one candidate process as the parent sees it.
type Proc struct {
	// Index is the process's place in Fleet.Procs.
	Index   int
	cmd     *exec.Cmd
	history string
	read    chan struct{} // closed when its stdout ends
	waited  sync.Once
	waitErr error

	mu      sync.Mutex
	ready   bool
	readyAt time.Time        // when the parent read its ready line
	leading map[string]int64 // namespace -> term
	starts  []start
	stops   []Stop
	samples []Sample
	errs    map[string]int64
	trace   map[string]int64
	exited  bool // its stdout ended
	stopped bool // Kill, Stop or Close ended it
}

// start is the start of a leadership, as the parent read it.
type start struct {
	at   time.Time
	ns   string
	term int64
}

// Stop is the end of a leadership, as the parent read it.
type Stop struct {
	At        time.Time
	Namespace string
	Reason    string
}

// Sample is a process's counts so far, as the parent read them.
type Sample struct {
	At         time.Time
	Statements int64
	CPU        float64
}

// Start starts the fleet's processes and returns at once; WaitAllLed waits
// for them to lead every namespace. Close ends whatever Start began.
func Start(o Options) (*Fleet, error) {
	if o.Procs < 1 || o.Config.Namespaces < 1 || o.Command == nil {
		return nil, errors.New("fleet: Procs, Config.Namespaces and Command are required")
	}
	dir, err := os.MkdirTemp("", "sqlelect-fleet")
	if err != nil {
		return nil, err
	}
	f := &Fleet{dir: dir, m: o.Config.Namespaces, stderr: newLineWriter(o.Stderr)}
	f.started = time.Now()
	for i := range o.Procs {
		cfg := o.Config
		cfg.History = filepath.Join(dir, fmt.Sprintf("history-%d.json", i))
		if o.Proxy {
			p, dsn, err := faultproxy.ForDSN(cfg.DSN)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("fleet: a proxy for process %d: %w", i, err)
			}
			f.proxies = append(f.proxies, p)
			cfg.DSN = dsn
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			f.Close()
			return nil, err
		}
		pr := &Proc{Index: i, history: cfg.History, leading: map[string]int64{}, read: make(chan struct{})}
		pr.cmd = o.Command()
		pr.cmd.Env = append(os.Environ(), ChildEnv+"="+string(b))
		pr.cmd.Stderr = f.stderr.prefixed(fmt.Sprintf("[%d] ", i))
		out, err := pr.cmd.StdoutPipe()
		if err != nil {
			f.Close()
			return nil, err
		}
		if err := pr.cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("fleet: starting process %d: %w", i, err)
		}
		f.procs = append(f.procs, pr)
		go pr.readEvents(out)
	}
	return f, nil
}

// Procs returns the fleet's processes, in the order they were started.
func (f *Fleet) Procs() []*Proc { return f.procs }

// Started returns when Start began the first process.
func (f *Fleet) Started() time.Time { return f.started }

// Led returns the number of namespaces some live process leads.
func (f *Fleet) Led() int {
	seen := map[string]bool{}
	for _, pr := range f.procs {
		pr.mu.Lock()
		for ns := range pr.leading {
			seen[ns] = true
		}
		pr.mu.Unlock()
	}
	return len(seen)
}

// LedOver returns, for each process in the order they were started, when
// the parent read its ready line (from Started; zero when it has not been
// read) and how many namespaces it led at each step after Started, up to
// and including until, as the parent read its lines.
func (f *Fleet) LedOver(step, until time.Duration) (ready []time.Duration, led [][]int) {
	for _, pr := range f.procs {
		pr.mu.Lock()
		var r time.Duration
		if !pr.readyAt.IsZero() {
			r = pr.readyAt.Sub(f.started)
		}
		var row []int
		for t := step; t <= until; t += step {
			at, n := f.started.Add(t), 0
			for _, st := range pr.starts {
				if st.at.Before(at) {
					n++
				}
			}
			for _, sp := range pr.stops {
				if sp.At.Before(at) {
					n--
				}
			}
			row = append(row, n)
		}
		pr.mu.Unlock()
		ready, led = append(ready, r), append(led, row)
	}
	return ready, led
}

// MaxLed returns the most namespaces one process leads.
func (f *Fleet) MaxLed() int {
	most := 0
	for _, pr := range f.procs {
		most = max(most, pr.Leading())
	}
	return most
}

// ErrNotAllLed is WaitAllLed's error when the deadline came first.
var ErrNotAllLed = errors.New("not every namespace led")

// WaitAllLed waits until every namespace is led, polling every 5 ms, and
// returns when that was; it gives up at deadline (ErrNotAllLed).
func (f *Fleet) WaitAllLed(deadline time.Time) (time.Time, error) {
	for {
		if f.Led() >= f.m {
			return time.Now(), nil
		}
		if err := f.exitedEarly(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%w: %d of %d namespaces led", ErrNotAllLed, f.Led(), f.m)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exitedEarly returns an error when a process that was not stopped has
// exited.
func (f *Fleet) exitedEarly() error {
	for _, pr := range f.procs {
		pr.mu.Lock()
		exited := pr.exited && !pr.stopped
		pr.mu.Unlock()
		if exited {
			return fmt.Errorf("fleet: process %d exited", pr.Index)
		}
	}
	return nil
}

// Starts returns the leaderships that started in [from, to) in every
// process: after the fleet has settled, each is a change of leader (a
// flap).
func (f *Fleet) Starts(from, to time.Time) int {
	n := 0
	for _, pr := range f.procs {
		pr.mu.Lock()
		for _, st := range pr.starts {
			if !st.at.Before(from) && st.at.Before(to) {
				n++
			}
		}
		pr.mu.Unlock()
	}
	return n
}

// NewTerms returns the terms whose first leadership started in [from,
// to), in every process: the starts that changed the term, where Starts
// also counts a leadership that began again in a term already led (a
// Group that stepped down and reclaimed its lease).
func (f *Fleet) NewTerms(from, to time.Time) int {
	type key struct {
		ns   string
		term int64
	}
	first := map[key]time.Time{}
	for _, pr := range f.procs {
		pr.mu.Lock()
		for _, st := range pr.starts {
			k := key{st.ns, st.term}
			if at, ok := first[k]; !ok || st.at.Before(at) {
				first[k] = st.at
			}
		}
		pr.mu.Unlock()
	}
	n := 0
	for _, at := range first {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// Stops returns the leaderships that ended in [from, to) in every process,
// by reason.
func (f *Fleet) Stops(from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, pr := range f.procs {
		pr.mu.Lock()
		for _, s := range pr.stops {
			if !s.At.Before(from) && s.At.Before(to) {
				out[s.Reason]++
			}
		}
		pr.mu.Unlock()
	}
	return out
}

// Statements returns the statements every process sent in [from, to).
func (f *Fleet) Statements(from, to time.Time) int64 {
	var n int64
	for _, pr := range f.procs {
		n += pr.Statements(from, to)
	}
	return n
}

// CPU returns the CPU seconds every process used in [from, to).
func (f *Fleet) CPU(from, to time.Time) float64 {
	var s float64
	for _, pr := range f.procs {
		s += pr.CPU(from, to)
	}
	return s
}

// Errors returns the failed rounds and attempts of every process so far,
// by class (election.ErrorClass).
func (f *Fleet) Errors() map[string]int64 {
	return f.sum(func(pr *Proc) map[string]int64 { return pr.errs })
}

// Trace returns every process's statement counts so far by kind and text,
// with the outcomes and stops (Config.Trace).
func (f *Fleet) Trace() map[string]int64 {
	return f.sum(func(pr *Proc) map[string]int64 { return pr.trace })
}

// sum adds up, key by key, the map of each process that counts picks,
// read under the process's lock.
func (f *Fleet) sum(counts func(*Proc) map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, pr := range f.procs {
		pr.mu.Lock()
		for k, n := range counts(pr) {
			out[k] += n
		}
		pr.mu.Unlock()
	}
	return out
}

// SetLatency sets the latency of every process's proxy, each way
// (faultproxy.Proxy.SetLatency): a round trip takes 2d more.
func (f *Fleet) SetLatency(d time.Duration) {
	for _, p := range f.proxies {
		p.SetLatency(d)
	}
}

// Freeze stalls every process's connections (faultproxy.Proxy.Freeze).
func (f *Fleet) Freeze() {
	for _, p := range f.proxies {
		p.Freeze()
	}
}

// Thaw ends Freeze.
func (f *Fleet) Thaw() {
	for _, p := range f.proxies {
		p.Thaw()
	}
}

// Proxied reports whether the processes reach the server through proxies.
func (f *Fleet) Proxied() bool { return len(f.proxies) > 0 }

// Kill ends pr with SIGKILL, as a crash: it vacates nothing and writes no
// history. What it led is forgotten.
func (f *Fleet) Kill(pr *Proc) {
	pr.mu.Lock()
	pr.stopped = true
	pr.mu.Unlock()
	_ = pr.cmd.Process.Kill()
	_ = pr.wait()
}

// wait waits for pr's stdout to end and the process to exit, once.
func (pr *Proc) wait() error {
	pr.waited.Do(func() {
		<-pr.read
		pr.waitErr = pr.cmd.Wait()
	})
	return pr.waitErr
}

// Stop ends the live processes gracefully (SIGTERM: each Group hands its
// namespaces over and returns), waits up to timeout for them, and checks
// the leases they saw with the electiontest checker. A killed process's
// leases are not in the check.
func (f *Fleet) Stop(timeout time.Duration) (electiontest.Result, error) {
	var live []*Proc
	for _, pr := range f.procs {
		pr.mu.Lock()
		if !pr.stopped {
			pr.stopped = true
			live = append(live, pr)
		}
		pr.mu.Unlock()
	}
	for _, pr := range live {
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	}
	timer := time.AfterFunc(timeout, func() {
		for _, pr := range live {
			_ = pr.cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	rec := electiontest.NewRecorder()
	var errs []error
	for _, pr := range live {
		if err := pr.wait(); err != nil {
			errs = append(errs, fmt.Errorf("fleet: process %d: %w", pr.Index, err))
			continue
		}
		b, err := os.ReadFile(pr.history)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var h electiontest.History
		if err := json.Unmarshal(b, &h); err != nil {
			errs = append(errs, fmt.Errorf("fleet: process %d's history: %w", pr.Index, err))
			continue
		}
		rec.Add(h)
	}
	return rec.Check(), errors.Join(errs...)
}

// Close kills whatever process is still running, closes the proxies and
// removes the fleet's files. It is safe to call more than once.
func (f *Fleet) Close() {
	for _, pr := range f.procs {
		pr.mu.Lock()
		pr.stopped = true
		pr.mu.Unlock()
		_ = pr.cmd.Process.Kill() // an error once it has exited
		_ = pr.wait()
	}
	for _, p := range f.proxies {
		p.Close()
	}
	f.proxies = nil
	os.RemoveAll(f.dir)
}

// Leading returns the number of namespaces pr leads.
func (pr *Proc) Leading() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return len(pr.leading)
}

// LeadingNames returns the namespaces pr leads.
func (pr *Proc) LeadingNames() []string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	out := make([]string, 0, len(pr.leading))
	for ns := range pr.leading {
		out = append(out, ns)
	}
	return out
}

// Leads reports whether pr leads ns.
func (pr *Proc) Leads(ns string) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	_, ok := pr.leading[ns]
	return ok
}

// Ready reports whether pr's Group was made and is about to run.
func (pr *Proc) Ready() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.ready
}

// Statements returns the statements pr sent in [from, to), from its
// reports interpolated to the two instants.
func (pr *Proc) Statements(from, to time.Time) int64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	a := interpolate(pr.samples, from, func(s Sample) float64 { return float64(s.Statements) })
	b := interpolate(pr.samples, to, func(s Sample) float64 { return float64(s.Statements) })
	return int64(b - a + 0.5)
}

// CPU returns the CPU seconds pr used in [from, to).
func (pr *Proc) CPU(from, to time.Time) float64 {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return interpolate(pr.samples, to, func(s Sample) float64 { return s.CPU }) -
		interpolate(pr.samples, from, func(s Sample) float64 { return s.CPU })
}

// MostStatements returns the most statements pr sent in any slot of width
// from the slots that divide [from, to), and the slot's start: the worst
// burst at that resolution. A shorter last slot is left out.
func (pr *Proc) MostStatements(from, to time.Time, width time.Duration) (int64, time.Time) {
	var (
		most int64
		at   time.Time
	)
	for s := from; !s.Add(width).After(to); s = s.Add(width) {
		if n := pr.Statements(s, s.Add(width)); n > most || at.IsZero() {
			most, at = n, s
		}
	}
	return most, at
}

// interpolate returns the value of the samples at t, linearly between the
// two around it; before the first, zero rising to it from the fleet's
// start is not known, so the first; after the last, the last.
func interpolate(samples []Sample, t time.Time, v func(Sample) float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	if !t.After(samples[0].At) {
		return v(samples[0])
	}
	for i := 1; i < len(samples); i++ {
		if b := samples[i]; !t.After(b.At) {
			a := samples[i-1]
			span := b.At.Sub(a.At).Seconds()
			if span <= 0 {
				return v(b)
			}
			return v(a) + (v(b)-v(a))*t.Sub(a.At).Seconds()/span
		}
	}
	return v(samples[len(samples)-1])
}

func (pr *Proc) readEvents(r io.Reader) {
	defer close(pr.read)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		now := time.Now()
		pr.mu.Lock()
		switch ev.Kind {
		case "ready":
			pr.ready = true
			pr.readyAt = now
		case "led":
			pr.leading[ev.Namespace] = ev.Term
			pr.starts = append(pr.starts, start{at: now, ns: ev.Namespace, term: ev.Term})
		case "stopped":
			if pr.leading[ev.Namespace] == ev.Term {
				delete(pr.leading, ev.Namespace)
			}
			pr.stops = append(pr.stops, Stop{At: now, Namespace: ev.Namespace, Reason: ev.Reason})
		case "stats":
			pr.samples = append(pr.samples, Sample{At: now, Statements: ev.Statements, CPU: ev.CPU})
			if ev.Errors != nil {
				pr.errs = ev.Errors
			}
			if ev.Trace != nil {
				pr.trace = maps.Clone(ev.Trace)
			}
		}
		pr.mu.Unlock()
	}
	pr.mu.Lock()
	pr.exited = true
	clear(pr.leading)
	pr.mu.Unlock()
}
