// Package prometheus exports the elections of a process as Prometheus
// metrics. It is a module of its own, so that users of the election
// package who do not use Prometheus do not depend on its client.
//
// A Collector is both an election.Observer, which the Elections report to,
// and a prometheus.Collector, which a registry scrapes:
//
//	c := prometheus.NewCollector()
//	reg.MustRegister(c)
//	e, err := election.New(db, election.WithNamespace("billing"), election.WithObserver(c))
//	c.Watch(e) // for sqlelect_candidates
//
// The metrics (namespace is the election's namespace):
//
//	sqlelect_is_leader{namespace}                  gauge: 1 while an Elector of this process leads
//	sqlelect_elections_total{namespace,outcome}    counter: election rounds by outcome (led, renewed, follower, error, shed, superseded)
//	sqlelect_leadership_changes_total{namespace}   counter: new terms (failovers and handoffs) this process saw
//	sqlelect_leadership_stops_total{namespace,reason} counter: this process stopped leading (election.StopReasons: resigned, left, balanced, lost, vacated, stepped_down, shutdown, overloaded)
//	sqlelect_tenure_seconds{namespace}             gauge: how long this process has led; 0 when it does not
//	sqlelect_term{namespace}                       gauge: the last term this process saw
//	sqlelect_attempt_duration_seconds{namespace}   histogram: duration of election rounds
//	sqlelect_errors_total{namespace,class}         counter: failed rounds by election.ErrorClass
//	sqlelect_handoff_wakes_total{namespace,source} counter: followers woken by a handoff (local, notify)
//	sqlelect_candidates{namespace}                 gauge: live candidates, read on scrape (Watch)
//
// Nothing here adds a database round trip to an election round: the
// Observer methods update counters in memory. Only sqlelect_candidates
// reads the database, once per scrape and watched Election, bounded by
// CandidatesTimeout, on the scraping goroutine.
package prometheus

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/sqlelect/sqlelect/election"
)

// CandidatesTimeout bounds the ListCandidates call a scrape makes per
// watched Election. When it fails, sqlelect_candidates keeps its last
// value and sqlelect_candidates_errors_total counts the failure.
const CandidatesTimeout = 2 * time.Second

// Collector is an election.Observer that keeps Prometheus metrics, and a
// prometheus.Collector that exports them. Make one per process, register
// it once, and pass it to every Election with election.WithObserver. Its
// methods are safe for concurrent use.
type Collector struct {
	election.NopObserver

	isLeader    *prom.GaugeVec
	elections   *prom.CounterVec
	changes     *prom.CounterVec
	stops       *prom.CounterVec
	tenure      *prom.GaugeVec
	term        *prom.GaugeVec
	duration    *prom.HistogramVec
	errors      *prom.CounterVec
	wakes       *prom.CounterVec
	candidates  *prom.GaugeVec
	candErrors  *prom.CounterVec
	now         func() time.Time
	mu          sync.Mutex
	leaders     map[string]map[uuid.UUID]time.Time // namespace -> leading Electors -> since
	lastTerm    map[string]int64
	watched     map[string]*election.Election
	initialised map[string]bool
}

var _ prom.Collector = (*Collector)(nil)
var _ election.Observer = (*Collector)(nil)

// NewCollector returns a Collector with no namespaces yet: a namespace's
// series appear at its first event or Watch.
func NewCollector() *Collector {
	ns := []string{"namespace"}
	return &Collector{
		isLeader: prom.NewGaugeVec(prom.GaugeOpts{Name: "sqlelect_is_leader",
			Help: "1 while an Elector of this process leads the namespace, else 0."}, ns),
		elections: prom.NewCounterVec(prom.CounterOpts{Name: "sqlelect_elections_total",
			Help: "Election rounds of this process's Electors, by outcome: led (a new term), renewed, follower, error, shed (a Group), superseded (an answer not acted on)."},
			[]string{"namespace", "outcome"}),
		changes: prom.NewCounterVec(prom.CounterOpts{Name: "sqlelect_leadership_changes_total",
			Help: "New terms (failovers and handoffs) seen by this process, counted by term number, so terms between two rounds count too."}, ns),
		stops: prom.NewCounterVec(prom.CounterOpts{Name: "sqlelect_leadership_stops_total",
			Help: "Times an Elector or Group of this process stopped leading, by reason: resigned, left, balanced, lost, vacated, stepped_down (trust window), shutdown."},
			[]string{"namespace", "reason"}),
		tenure: prom.NewGaugeVec(prom.GaugeOpts{Name: "sqlelect_tenure_seconds",
			Help: "How long an Elector of this process has led the namespace (the longest, if several); 0 when none leads."}, ns),
		term: prom.NewGaugeVec(prom.GaugeOpts{Name: "sqlelect_term",
			Help: "The last term of the namespace this process saw (the fencing token); 0 before any."}, ns),
		duration: prom.NewHistogramVec(prom.HistogramOpts{Name: "sqlelect_attempt_duration_seconds",
			Help:    "Duration of the election rounds of this process's Electors.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, ns),
		errors: prom.NewCounterVec(prom.CounterOpts{Name: "sqlelect_errors_total",
			Help: "Failed election rounds, by class (conflict, unreachable, timeout, canceled, not_migrated, read_only, permission, invalid, other)."},
			[]string{"namespace", "class"}),
		wakes: prom.NewCounterVec(prom.CounterOpts{Name: "sqlelect_handoff_wakes_total",
			Help: "Followers of this process woken early by a handoff, by source: local (this process), notify (PostgreSQL NOTIFY)."},
			[]string{"namespace", "source"}),
		candidates: prom.NewGaugeVec(prom.GaugeOpts{Name: "sqlelect_candidates",
			Help: "Live candidates of the namespace, all processes, read on scrape for watched Elections."}, ns),
		candErrors: prom.NewCounterVec(prom.CounterOpts{Name: "sqlelect_candidates_errors_total",
			Help: "Scrapes that could not read the live candidates of a watched namespace."}, ns),
		now:         time.Now,
		leaders:     map[string]map[uuid.UUID]time.Time{},
		lastTerm:    map[string]int64{},
		watched:     map[string]*election.Election{},
		initialised: map[string]bool{},
	}
}

func (c *Collector) vecs() []prom.Collector {
	return []prom.Collector{c.isLeader, c.elections, c.changes, c.stops, c.tenure, c.term, c.duration, c.errors, c.wakes, c.candidates, c.candErrors}
}

// Watch adds e's namespace to sqlelect_candidates (read with
// e.ListCandidates on each scrape) and creates its series at zero, so that
// sqlelect_is_leader reads 0 before any Elector ran. Watching a second
// Election of the same namespace replaces the first.
func (c *Collector) Watch(e *election.Election) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched[e.Namespace()] = e
	c.initLocked(e.Namespace())
}

// initLocked creates ns's series at zero, once.
func (c *Collector) initLocked(ns string) {
	if c.initialised[ns] {
		return
	}
	c.initialised[ns] = true
	c.isLeader.WithLabelValues(ns)
	c.tenure.WithLabelValues(ns)
	c.term.WithLabelValues(ns)
	c.changes.WithLabelValues(ns)
	for _, o := range []election.Outcome{election.OutcomeLed, election.OutcomeRenewed, election.OutcomeFollower, election.OutcomeError, election.OutcomeShed, election.OutcomeSuperseded} {
		c.elections.WithLabelValues(ns, string(o))
	}
	for _, r := range election.StopReasons {
		c.stops.WithLabelValues(ns, string(r))
	}
}

// Attempt implements election.Observer.
func (c *Collector) Attempt(a election.Attempt) {
	c.elections.WithLabelValues(a.Namespace, string(a.Outcome)).Inc()
	c.duration.WithLabelValues(a.Namespace).Observe(a.Duration.Seconds())
	if a.Err != nil {
		c.errors.WithLabelValues(a.Namespace, a.ErrorClass).Inc()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.initLocked(a.Namespace)
	if t := a.Lease.Term; t > 0 {
		if last := c.lastTerm[a.Namespace]; t > last {
			if last > 0 {
				c.changes.WithLabelValues(a.Namespace).Add(float64(t - last))
			}
			c.lastTerm[a.Namespace] = t
			c.term.WithLabelValues(a.Namespace).Set(float64(t))
		}
	}
}

// LeadershipStarted implements election.Observer.
func (c *Collector) LeadershipStarted(l election.Leadership) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.initLocked(l.Namespace)
	m := c.leaders[l.Namespace]
	if m == nil {
		m = map[uuid.UUID]time.Time{}
		c.leaders[l.Namespace] = m
	}
	m[l.Candidate] = c.now()
	c.isLeader.WithLabelValues(l.Namespace).Set(1)
}

// LeadershipStopped implements election.Observer.
func (c *Collector) LeadershipStopped(l election.Leadership) {
	c.stops.WithLabelValues(l.Namespace, string(l.Reason)).Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leaders[l.Namespace], l.Candidate)
	if len(c.leaders[l.Namespace]) == 0 {
		c.isLeader.WithLabelValues(l.Namespace).Set(0)
		c.tenure.WithLabelValues(l.Namespace).Set(0)
	}
}

// HandoffWake implements election.Observer.
func (c *Collector) HandoffWake(w election.Wake) {
	c.wakes.WithLabelValues(w.Namespace, w.Source).Inc()
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prom.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
}

// Collect implements prometheus.Collector. It reads the live candidates of
// each watched Election (bounded by CandidatesTimeout each).
func (c *Collector) Collect(ch chan<- prom.Metric) {
	c.mu.Lock()
	now := c.now()
	for ns, m := range c.leaders {
		var longest time.Duration
		for _, since := range m {
			longest = max(longest, now.Sub(since))
		}
		c.tenure.WithLabelValues(ns).Set(longest.Seconds())
	}
	watched := make([]*election.Election, 0, len(c.watched))
	for _, e := range c.watched {
		watched = append(watched, e)
	}
	c.mu.Unlock()
	for _, e := range watched {
		ctx, cancel := context.WithTimeout(context.Background(), CandidatesTimeout)
		ids, err := e.ListCandidates(ctx)
		cancel()
		if err != nil {
			c.candErrors.WithLabelValues(e.Namespace()).Inc()
			continue
		}
		c.candidates.WithLabelValues(e.Namespace()).Set(float64(len(ids)))
	}
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
}
