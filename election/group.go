package election

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// ErrGroupStarted is returned by Group.Run when Run was already called on
// that Group. A Group runs once; make a new one to run again.
var ErrGroupStarted = errors.New("election: Group.Run already called")

// ErrUnknownNamespace is returned by Group.Leave for a namespace the Group
// has not joined, or is already leaving.
var ErrUnknownNamespace = errors.New("election: namespace not joined")

// GroupConfig configures a Group. Interval, SafetyMargin and
// ShutdownTimeout mean what they mean in ElectorConfig, with the same
// defaults and rules, for every namespace of the Group.
type GroupConfig struct {
	// Namespaces are the namespaces the candidate joins when the Group is
	// made: at least one, each valid (see WithNamespace), none twice, and
	// no more than the database's batch statements can carry (4,095 on
	// SQLite, 8,191 on MySQL and MariaDB, 65,534 on PostgreSQL). Join and
	// Leave change the set while the Group runs.
	Namespaces []string

	// Interval is the time between rounds. Default Expire()/3; at most
	// Expire()/2.
	Interval time.Duration

	// SafetyMargin shortens the leader's trust in each lease, as in
	// ElectorConfig. Default Expire()/5.
	SafetyMargin time.Duration

	// ShutdownTimeout bounds Run's return as a whole (waiting for the
	// callbacks, vacating the terms whose work returned, deleting the
	// candidate rows), and Leave's wait when no context bounds it.
	// Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Balance spreads leadership over the candidates: with N live
	// candidates in the Group's M namespaces, a Group that leads more than
	// its share, ceil(M/N), hands its surplus over in one round, those it
	// has led longest first (through the graceful handoff: the work of
	// each returns first, then it vacates the term it handed over), and
	// does not try those namespaces again for two intervals. Every way a
	// Group may take a seat (a round that found it free, a handoff wake,
	// the end of another candidate's lease) respects the share: a Group at
	// or above it leaves a free seat to the others for two rounds before
	// it takes it, so while candidates come and go a Group may lead
	// ceil(M/N)+1. The share is counted afresh every round, from the
	// candidate rows (in the round's statements, at no extra round trip).
	// Off by default: then the first candidate to find a seat free takes
	// it, as Electors do.
	Balance bool

	// OnStartedLeading is called, on a goroutine of its own, when the Group
	// starts leading a namespace (lease.Namespace), with the lease granted.
	// ctx is cancelled the moment that leadership ends. A later call for
	// the same namespace waits until this one has returned; calls for
	// different namespaces run at once. The seat is never vacated while it
	// runs. Optional.
	OnStartedLeading func(ctx context.Context, lease Lease)

	// OnStoppedLeading is called when leadership of a namespace ends, with
	// the last lease held. Callbacks other than OnStartedLeading run in
	// order on one goroutine. Optional.
	OnStoppedLeading func(lease Lease)
}

// A Group runs one candidate in many namespaces with a constant number of
// statements per round, whatever the number of namespaces: one renewal of
// every lease it holds, one reading of every seat (with Balance, with the
// count of the live candidates), and one heartbeat of every candidate row.
// On PostgreSQL these are one statement, so a round is one round trip;
// elsewhere three. It tries to take a seat only when a reading shows it
// free or when its lease ends (at the lease's edge, by the database clock,
// as an Elector does), so followers of a live seat never lock it. On
// PostgreSQL it shares the pool's one LISTEN connection with every Elector
// and Group on the pool, and a vacated seat wakes it at once; a wake-up
// that names no namespace (MySQL's, or a listener's reconnection) runs one
// round.
//
// Rounds never wait for attempts: the attempts on free seats run one at a
// time beside the rounds, each a short transaction (Elect), in the order of
// the last round's reading shuffled, and a new round's reading replaces the
// list, so a cold start with many free seats never delays the renewal of
// the seats already won. A Group thus uses at most two of its pool's
// connections for the election (plus the pool's listener on PostgreSQL);
// with a pool of one connection a round waits at most for the one attempt
// in flight.
//
// The guarantees per namespace are those of an Elector: the renewal is one
// statement fenced by the term and the database clock; a lease is renewed
// only when the renewal reports that it changed its row, and one it did not
// change is reported lost for that namespace only; each leadership trusts
// its lease until the round's start plus Expire() minus SafetyMargin, and a
// timer ends it then if no renewal came; leader work is never overlapped
// by the next leadership of the same namespace, and a seat is vacated only
// once its work has returned, and only in the term the Group held it.
//
// A namespace whose term another process vacated (an operator's
// VacateSeat or VacateLease, an UnregisterCandidate of the Group's id) is
// lost at the round that finds it so; the Group then sits that namespace
// out for one Interval before it competes again, so that another live
// candidate, woken by the handoff, takes the seat; if none does, the Group
// takes it back in a new term.
//
// Observers (WithObserver) are called without the Group's lock held, in
// order: they may call the Group's methods. Handoff wakes that make the
// Group try a seat are reported as HandoffWake.
//
// Its methods are safe for concurrent use.
type Group struct {
	base  *Election // settings and statements; its namespace is not used
	batch *Election // base without prepared statements, for the batch statements
	id    uuid.UUID
	cfg   GroupConfig
	log   *slog.Logger
	limit int // most namespaces the batch statements carry

	started atomic.Bool
	kick    chan struct{} // cap 1: run a round now
	woken   chan wakeup   // edge and handoff wakes, for the attempter
	queued  chan struct{} // cap 1: the attempt queue has work
	events  *dispatcher

	mu        sync.Mutex
	members   map[string]*member
	running   bool            // Run's loop is on
	runCtx    context.Context // Run's context, for leader work
	stopping  bool            // Run is returning
	leading   int             // members with a leadership
	share     int             // with Balance: ceil(M/N) as of the last round; 0 before the first
	queue     []*member       // free seats of the last round, to try in order
	notes     []func()        // observer calls and work starts, run once mu is released (unlock)
	flushing  bool            // a goroutine runs the notes
	lastPrune time.Time       // monotonic: the last pruneLed that ran
}

// member is the Group in one namespace. Its fields change under g.mu.
type member struct {
	g    *Group
	e    *Election
	ns   string
	hub  *hub // nil while not running
	cur  *groupLead
	last Lease // as of the last reading

	work     *workCount    // OnStartedLeading queued or running
	prevWork chan struct{} // closed when the last OnStartedLeading returned (nil: none)

	// busy counts the rounds and attempts in flight that include the
	// member; Add only while !leaving, so Leave can wait for them.
	busy       sync.WaitGroup
	renewing   bool      // its lease is in the renewal of the round in flight
	attempting bool      // an attempt on its seat is in flight
	queued     bool      // on g.queue
	overShare  bool      // the round let it be tried above the share (Balance)
	freeRounds int       // consecutive rounds that saw the seat free while at the share (Balance)
	holdUntil  time.Time // no attempts before: after a balancing handoff, or a term vacated by someone else
	handing    int64     // the term handed over (Balance), vacated once its work returned; 0: none
	stray      int64     // a term granted when it could not lead (leaving, stopping), to vacate; 0: none
	leaving    bool
	edge       *time.Timer
	edgeFor    Lease
	edgeTries  int
	pending    atomic.Bool // on g.woken
	leading    atomic.Bool // cur != nil, for pokeOusted
}

type groupLead struct {
	lease        Lease
	trustedUntil time.Time
	cancel       context.CancelFunc
	watchdog     *time.Timer
	since        time.Time
}

// wakeup asks the attempter to try m's seat now: src is the handoff that
// woke it, or 0 for the end of another candidate's lease.
type wakeup struct {
	m   *member
	src wakeSource
}

// NewGroup returns a Group for candidate id in cfg.Namespaces on db. opts
// are the Election options that apply to every namespace (WithExpire,
// WithSchema, WithLogger, WithLabel, WithObserver, WithHistoryRetention);
// WithNamespace is refused, since the namespaces are cfg's. It checks the
// database's settings as New does, within ctx. Bad input (uuid.Nil, no
// namespace, an invalid or repeated namespace, more namespaces than the
// database's batch statements carry, a setting out of its rules) returns
// an error and changes nothing.
func NewGroup(ctx context.Context, db *gorm.DB, id uuid.UUID, cfg GroupConfig, opts ...Option) (*Group, error) {
	if id == uuid.Nil {
		return nil, fmt.Errorf("%w: NewGroup", ErrInvalidCandidate)
	}
	if len(cfg.Namespaces) == 0 {
		return nil, fmt.Errorf("%w: NewGroup: no namespace", ErrInvalidNamespace)
	}
	seen := make(map[string]bool, len(cfg.Namespaces))
	for _, ns := range cfg.Namespaces {
		if err := validNamespace(ns); err != nil {
			return nil, fmt.Errorf("NewGroup: namespace %q: %w", ns, err)
		}
		if seen[ns] {
			return nil, fmt.Errorf("%w: NewGroup: namespace %q given twice", ErrInvalidNamespace, ns)
		}
		seen[ns] = true
	}
	var c config
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		o.apply(&c)
	}
	if c.namespace != "" {
		return nil, fmt.Errorf("%w: NewGroup takes its namespaces from GroupConfig.Namespaces, not WithNamespace", ErrInvalidOption)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	base, err := NewContext(ctx, db, append(opts[:len(opts):len(opts)], WithNamespace(cfg.Namespaces[0]))...)
	if err != nil {
		return nil, err
	}
	limit := dialect.BatchMaxNamespaces(base.d)
	if len(cfg.Namespaces) > limit {
		return nil, fmt.Errorf("%w: NewGroup: %d namespaces; a Group takes at most %d on %s (the parameters one statement can carry)",
			ErrInvalidOption, len(cfg.Namespaces), limit, base.d.Name())
	}
	ecfg, err := checkRoundConfig(base.expire, ElectorConfig{Interval: cfg.Interval, SafetyMargin: cfg.SafetyMargin, ShutdownTimeout: cfg.ShutdownTimeout})
	if err != nil {
		return nil, err
	}
	cfg.Interval, cfg.SafetyMargin, cfg.ShutdownTimeout = ecfg.Interval, ecfg.SafetyMargin, ecfg.ShutdownTimeout
	cfg.Namespaces = slices.Clone(cfg.Namespaces)
	// The batch statements run unprepared: their text changes with the
	// number of namespaces (on PostgreSQL, where the round passes them as
	// arrays, only in a comment), so a cache would keep one of each; and
	// preparing takes the cache's lock while it waits for a
	// connection, which on a pool of one an attempt's transaction holds,
	// while that transaction waits for the lock.
	batch := base.inNamespace(cfg.Namespaces[0])
	batch.stmts = nil
	g := &Group{
		base:    base,
		batch:   batch,
		id:      id,
		cfg:     cfg,
		log:     base.logBase.With("candidate", id),
		limit:   limit,
		kick:    make(chan struct{}, 1),
		woken:   make(chan wakeup, 256),
		queued:  make(chan struct{}, 1),
		events:  newDispatcher(),
		members: map[string]*member{},
	}
	for _, ns := range cfg.Namespaces {
		g.members[ns] = g.newMember(ns)
	}
	return g, nil
}

// checkRoundConfig applies the defaults and rules of Interval,
// SafetyMargin and ShutdownTimeout for an expiry window.
func checkRoundConfig(expire time.Duration, cfg ElectorConfig) (ElectorConfig, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
	}
	switch {
	case cfg.Interval < 0:
		bad("Interval must be positive, got %v", cfg.Interval)
	case cfg.Interval == 0:
		cfg.Interval = expire / 3
	case cfg.Interval > expire/2:
		bad("Interval %v must be at most half the expiry window %v", cfg.Interval, expire)
	}
	switch {
	case cfg.SafetyMargin < 0:
		bad("SafetyMargin must be positive, got %v", cfg.SafetyMargin)
	case cfg.SafetyMargin == 0:
		cfg.SafetyMargin = expire / 5
	}
	if len(errs) == 0 && cfg.SafetyMargin >= expire-cfg.Interval {
		bad("SafetyMargin %v must be less than the expiry window minus the interval (%v - %v), or no renewal fits in the trust window",
			cfg.SafetyMargin, expire, cfg.Interval)
	}
	switch {
	case cfg.ShutdownTimeout < 0:
		bad("ShutdownTimeout must not be negative, got %v", cfg.ShutdownTimeout)
	case cfg.ShutdownTimeout == 0:
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	return cfg, errors.Join(errs...)
}

func (g *Group) newMember(ns string) *member {
	return &member{g: g, e: g.base.inNamespace(ns), ns: ns, work: newWorkCount()}
}

// unlock releases g.mu, then runs the notes queued under it (observer
// calls, the start of leader work) in order, outside the lock. A goroutine
// that finds another one running them leaves its notes to it.
func (g *Group) unlock() {
	if g.flushing || len(g.notes) == 0 {
		g.mu.Unlock()
		return
	}
	g.flushing = true
	for len(g.notes) > 0 {
		batch := g.notes
		g.notes = nil
		g.mu.Unlock()
		for _, f := range batch {
			f()
		}
		g.mu.Lock()
	}
	g.flushing = false
	g.mu.Unlock()
}

// note queues f to run once g.mu is released; g.mu is held.
func (g *Group) note(f func()) { g.notes = append(g.notes, f) }

// ID returns the candidate id.
func (g *Group) ID() uuid.UUID { return g.id }

// Namespaces returns the namespaces joined, sorted. A namespace being left
// (Leave has not returned) is not listed, and cannot be joined again until
// Leave returns.
func (g *Group) Namespaces() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.members))
	for ns, m := range g.members {
		if !m.leaving {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// IsLeader reports whether the Group leads namespace ns now: it holds the
// lease and is within its trust window.
func (g *Group) IsLeader(ns string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[ns]
	return m != nil && m.cur != nil && time.Now().Before(m.cur.trustedUntil)
}

// Lease returns the lease of namespace ns the Group leads under, and
// whether it leads ns.
func (g *Group) Lease(ns string) (Lease, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[ns]
	if m == nil || m.cur == nil || !time.Now().Before(m.cur.trustedUntil) {
		return Lease{}, false
	}
	return m.cur.lease, true
}

// Leading returns the namespaces the Group leads now, sorted.
func (g *Group) Leading() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	now := time.Now()
	for ns, m := range g.members {
		if m.cur != nil && now.Before(m.cur.trustedUntil) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// Join adds namespace ns; a running Group takes part in its election from
// its next round, which Join starts at once. It returns
// ErrInvalidNamespace, changing nothing, for an invalid namespace, one
// already joined, or one being left (join it again once Leave has
// returned); ErrInvalidOption once Run is returning, or when the Group
// already has as many namespaces as the database's batch statements carry.
func (g *Group) Join(ns string) error {
	if err := validNamespace(ns); err != nil {
		return fmt.Errorf("Join: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return fmt.Errorf("%w: Join: the Group has stopped", ErrInvalidOption)
	}
	if m, ok := g.members[ns]; ok {
		if m.leaving {
			return fmt.Errorf("%w: Join: namespace %q is still being left; join it again once Leave has returned", ErrInvalidNamespace, ns)
		}
		return fmt.Errorf("%w: Join: namespace %q already joined", ErrInvalidNamespace, ns)
	}
	if len(g.members) >= g.limit {
		return fmt.Errorf("%w: Join: a Group takes at most %d namespaces on %s (the parameters one statement can carry)",
			ErrInvalidOption, g.limit, g.base.d.Name())
	}
	m := g.newMember(ns)
	g.members[ns] = m
	if g.running {
		m.hub = joinHub(m.e, m)
	}
	g.kickRound()
	return nil
}

// Leave removes namespace ns: the Group stops leading it at once (its
// other namespaces go on, renewed as usual), waits for the rounds and the
// attempt in flight that include ns and for its leader work to return
// (bounded by ctx, or by ShutdownTimeout when ctx has no deadline), then
// vacates the term it held, if any, and deletes its candidate row. If the
// work does not return in time, Leave neither vacates nor deletes (the
// lease and the row expire by themselves, since the Group no longer renews
// them) and returns the context's error; the namespace is left either way.
// It returns ErrUnknownNamespace for a namespace not joined, or already
// being left.
func (g *Group) Leave(ctx context.Context, ns string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Leave: nil context", ErrInvalidOption)
	}
	g.mu.Lock()
	m := g.members[ns]
	if m == nil {
		g.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
	}
	if m.leaving {
		g.mu.Unlock()
		return fmt.Errorf("%w: %q is already being left", ErrUnknownNamespace, ns)
	}
	m.leaving = true
	term := int64(anyTerm)
	if m.cur != nil {
		term = m.cur.lease.Term
		g.stopLocked(m, "left the namespace")
	}
	m.stopEdge()
	h := m.hub
	m.hub = nil
	g.unlock()
	if h != nil {
		leaveHub(m.e, m, h)
	}
	defer func() {
		g.mu.Lock()
		if g.members[ns] == m {
			delete(g.members, ns)
		}
		g.mu.Unlock()
	}()
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		wctx, cancel = context.WithTimeout(ctx, g.cfg.ShutdownTimeout)
	}
	defer cancel()
	// No round or attempt takes ns in from here on; wait for those in
	// flight (a statement each), then for the work.
	idle := make(chan struct{})
	go func() {
		m.busy.Wait()
		close(idle)
	}()
	for _, c := range []<-chan struct{}{idle, m.work.wait()} {
		select {
		case <-c:
		case <-wctx.Done():
			g.log.Warn("election: left the namespace without vacating: the leader's work has not returned; the lease expires by itself",
				"namespace", ns)
			return fmt.Errorf("election: Leave %q: waiting for the leader's work: %w", ns, wctx.Err())
		}
	}
	g.mu.Lock()
	if term == anyTerm {
		term = cmpOr(m.handing, m.stray)
	}
	g.mu.Unlock()
	if term == 0 {
		term = anyTerm
	}
	return m.e.vacate(wctx, "Leave", g.id, term, true, nil)
}

// cmpOr returns the first of a, b that is not zero.
func cmpOr(a, b int64) int64 {
	if a != 0 {
		return a
	}
	return b
}

// Run runs the Group until ctx ends: every Interval (shortened at random
// by up to 20%) it renews the leases it holds, reads every seat and
// refreshes every candidate row, in one statement each, and hands the
// seats it found free to its attempts, which run beside the rounds. When
// ctx ends it stops leading everywhere, waits for the callbacks, vacates
// each term as soon as its work has returned, deletes its candidate rows
// and returns nil, all within ShutdownTimeout. A namespace whose work has
// not returned by then is neither vacated nor unregistered: its lease and
// row expire by themselves.
//
// Run returns an error only for a nil ctx (ErrInvalidOption), a second call
// (ErrGroupStarted), or ErrNotMigrated when the tables are missing before
// any round succeeded.
func (g *Group) Run(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: Run: nil context", ErrInvalidOption)
	}
	if !g.started.CompareAndSwap(false, true) {
		return ErrGroupStarted
	}
	g.mu.Lock()
	g.running, g.runCtx = true, ctx
	for _, m := range g.members {
		if !m.leaving {
			m.hub = joinHub(m.e, m)
		}
	}
	g.mu.Unlock()
	go g.events.run()

	actx, stopAttempts := context.WithCancel(ctx)
	attempterDone := make(chan struct{})
	go func() {
		defer close(attempterDone)
		g.attempter(actx)
	}()
	err := g.loop(ctx)
	stopAttempts()
	<-attempterDone
	return g.shutdown(ctx, err)
}

// shutdown is the end of Run: no round or attempt runs any more.
func (g *Group) shutdown(ctx context.Context, err error) error {
	type out struct {
		m    *member
		term int64 // to vacate; 0: none, delete the candidate row only
	}
	var (
		outs []out
		hubs []*member
		hs   []*hub
	)
	g.mu.Lock()
	g.stopping = true
	g.queue = nil
	for _, m := range g.members {
		m.stopEdge()
		term := cmpOr(m.handing, m.stray)
		if m.cur != nil {
			term = m.cur.lease.Term
			g.stopLocked(m, "shutting down")
		}
		if m.hub != nil {
			hubs, hs = append(hubs, m), append(hs, m.hub)
			m.hub = nil
		}
		if !m.leaving {
			outs = append(outs, out{m: m, term: term})
		}
	}
	g.unlock()
	for i, m := range hubs {
		leaveHub(m.e, m, hs[i])
	}
	g.events.close()

	// One deadline for the whole return.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	expired := make(chan time.Time)
	stop := context.AfterFunc(sctx, func() { close(expired) })
	defer stop()
	g.events.wait(expired)
	if err != nil {
		return err
	}

	// Vacate each term as soon as its work has returned, several at once
	// (each in its own transaction: one seat's failure leaves the others
	// vacated); delete the rows of the namespaces without a term in one
	// statement.
	var (
		rest     []string
		vacating sync.WaitGroup
	)
	slots := make(chan struct{}, shutdownVacates(g.base.d))
	defer vacating.Wait()
	finish := func(o out) {
		if o.term == 0 {
			rest = append(rest, o.m.ns)
			return
		}
		slots <- struct{}{}
		vacating.Add(1)
		go func() {
			defer vacating.Done()
			defer func() { <-slots }()
			if err := o.m.e.vacate(sctx, "Run", g.id, o.term, true, nil); err != nil {
				g.log.Warn("election: vacating on shutdown failed; the lease expires by itself", "namespace", o.m.ns, "err", err)
			}
		}()
	}
	returned := make(chan out, len(outs))
	waiting := 0
	for _, o := range outs {
		if o.m.work.idle() {
			finish(o)
			continue
		}
		waiting++
		go func() {
			select {
			case <-o.m.work.wait():
				returned <- o
			case <-sctx.Done():
				returned <- out{m: o.m, term: -1}
			}
		}()
	}
	g.unregister(sctx, rest)
	rest = rest[:0]
	for range waiting {
		o := <-returned
		if o.term < 0 {
			g.log.Warn("election: returning without vacating: the leader's work has not returned within ShutdownTimeout; the lease expires by itself",
				"namespace", o.m.ns, "shutdown_timeout", g.cfg.ShutdownTimeout)
			continue
		}
		finish(o)
	}
	g.unregister(sctx, rest)
	return nil
}

// shutdownVacates is how many terms a Group's shutdown vacates at once: one
// on SQLite, which writes one transaction at a time; elsewhere a few, each
// on a connection of the pool, which may have fewer to give.
func shutdownVacates(d dialect.Dialect) int {
	if d.Name() == "sqlite" {
		return 1
	}
	return 4
}

// pruneLed prunes, every two expiry windows from the first round, the
// namespaces the Group leads, as an Elector's renewals do for its one namespace: the
// candidate rows expired for longer than the expiry window, and the terms
// that ended longer ago than the history retention. It costs two
// statements whatever the number of namespaces, and one more per expired
// row (each deleted by its key, so a candidate that came back is kept).
// It runs after a round, never in it.
func (g *Group) pruneLed(ctx context.Context) {
	g.mu.Lock()
	// Less often than an Elector (every half window): a Group's round is
	// one statement, which a prune every half window would more than
	// double; a row is pruned once expired for a window anyway. The first
	// prune comes two windows after the first round, not in the rounds of
	// a cold start.
	if g.lastPrune.IsZero() {
		g.lastPrune = time.Now()
	}
	due := time.Since(g.lastPrune) >= 2*g.base.expire
	var led []string
	if due {
		for ns, m := range g.members {
			if m.cur != nil && !m.leaving {
				led = append(led, ns)
			}
		}
		if len(led) > 0 {
			g.lastPrune = time.Now()
		}
	}
	g.mu.Unlock()
	if len(led) == 0 {
		return
	}
	sort.Strings(led)
	pctx, cancel := context.WithTimeout(ctx, g.base.expire-g.cfg.SafetyMargin)
	defer cancel()
	pruned := 0
	err := g.batch.autocommit(pctx, "Prune", nil, func(conn gorm.ConnPool, _ bool) error {
		pruned = 0
		args := append(anyArgs(led), g.base.d.DurationArg(-g.base.expire))
		rows, err := conn.QueryContext(pctx, dialect.BatchExpired(g.base.d, len(led)), args...)
		if err != nil {
			return err
		}
		type key struct {
			ns string
			id uuid.UUID
		}
		var expired []key
		for rows.Next() {
			var k key
			if err := rows.Scan(&k.ns, &k.id); err != nil {
				rows.Close()
				return err
			}
			expired = append(expired, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range expired {
			n, err := affected(conn.ExecContext(pctx, g.base.q.Prune, k.ns, k.id, g.base.d.DurationArg(-g.base.expire)))
			if err != nil {
				return err
			}
			pruned += int(n)
		}
		args[len(args)-1] = g.base.d.DurationArg(-g.base.retention)
		n, err := affected(conn.ExecContext(pctx, dialect.BatchPruneHistory(g.base.d, len(led)), args...))
		pruned += int(n)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("election: pruning expired candidates and old history failed", "err", err)
		}
	} else if pruned > 0 {
		g.log.Debug("election: pruned expired candidates and old history", "count", pruned)
	}
}

// unregister deletes the Group's candidate rows in namespaces nss, in one
// statement.
func (g *Group) unregister(ctx context.Context, nss []string) {
	if len(nss) == 0 {
		return
	}
	err := g.batch.autocommit(ctx, "Run", nil, func(conn gorm.ConnPool, _ bool) error {
		args := append([]any{g.id}, anyArgs(nss)...)
		_, err := conn.ExecContext(ctx, dialect.BatchUnregister(g.base.d, len(nss)), args...)
		return err
	})
	if err != nil {
		g.log.Warn("election: unregistering on shutdown failed; the rows expire by themselves", "err", err)
	}
}

func anyArgs(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (g *Group) kickRound() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// poke is the handoff wake of the Group in m's namespace. It runs under
// the hubs' lock and takes no lock of the Group's.
func (m *member) poke(src wakeSource) { m.g.wake(m, src) }

func (m *member) candidate() uuid.UUID { return m.g.id }

// wakeAny is a wake-up that names no namespace (wakeAll): the Group runs a
// round now. It runs under the hubs' lock and takes no lock of the
// Group's; the wake-ups of the Group's other namespaces coalesce into the
// same round.
func (m *member) wakeAny() { m.g.kickRound() }

// pokeOusted tells the Group that another process vacated the term of its
// candidate in m's namespace: a round now finds it out (the renewal fails)
// and stops leading, instead of at the next tick. Its own vacates come
// after it stopped leading, and wake nothing. It runs under the hubs' lock
// and takes no lock of the Group's.
func (m *member) pokeOusted() {
	if m.leading.Load() {
		m.g.kickRound()
	}
}

// wake asks the attempter to try m's seat now, once; it takes no lock. The
// attempter decides whether it may (see mayTryLocked).
func (g *Group) wake(m *member, src wakeSource) {
	if !m.pending.CompareAndSwap(false, true) {
		return
	}
	select {
	case g.woken <- wakeup{m: m, src: src}:
	default:
		// The queue is full: a full round looks at every seat.
		m.pending.Store(false)
		g.kickRound()
	}
}

func (m *member) stopEdge() {
	if m.edge != nil {
		m.edge.Stop()
		m.edge = nil
	}
}

// loop runs the rounds until ctx ends. Nothing else runs on its goroutine:
// a round's statement goes out every Interval whatever the attempts do.
func (g *Group) loop(ctx context.Context) error {
	succeeded := false
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := g.fullRound(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := g.jitter(g.cfg.Interval)
		if err != nil {
			if !succeeded && errors.Is(err, ErrNotMigrated) {
				g.log.Error("election: group stopped", "err", err)
				return err
			}
			failures++
			wait = backoff{first: max(g.cfg.Interval/8, time.Millisecond), max: g.cfg.Interval, jitter: 0.2}.wait(failures)
			g.log.Warn("election: group round failed; retrying", "err", err, "failures", failures, "retry_in", wait)
		} else {
			succeeded, failures = true, 0
			g.pruneLed(ctx)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-g.kick:
			timer.Stop()
		}
	}
}

func (g *Group) jitter(d time.Duration) time.Duration {
	return d - rand.N(d/5+1)
}

// seatFromRow is what a batch reading says of one namespace.
func seatFromRow(now time.Time, leader uuid.NullUUID, term sql.NullInt64, exp, acq dialect.Time) seat {
	s := seat{now: now, exists: term.Valid, term: term.Int64, expires: exp.Time, acquired: acq.Time}
	if leader.Valid && exp.Valid {
		s.leader = leader.UUID
	}
	return s
}

// heldSeat is a lease a round renews.
type heldSeat struct {
	m    *member
	lead *groupLead // the leadership it renews
	term int64
}

// roundResult is what a round's statements returned.
type roundResult struct {
	seats   map[string]seat
	renewed map[string]time.Time // namespace: new expiry, of each lease the renewal changed
	live    int                  // with Balance: live candidates, this one included
}

// fullRound is one round over every namespace but those being left or
// tried at the moment (an attempt reads the seat and refreshes the row
// itself).
func (g *Group) fullRound(ctx context.Context) error {
	start := time.Now()
	g.mu.Lock()
	total := 0
	var names []string
	var held []heldSeat
	in := make(map[string]*member, len(g.members))
	for ns, m := range g.members {
		if m.leaving {
			continue
		}
		total++
		if m.attempting {
			continue
		}
		names = append(names, ns)
		in[ns] = m
		m.busy.Add(1)
		if m.cur != nil {
			m.renewing = true
			held = append(held, heldSeat{m: m, lead: m.cur, term: m.cur.lease.Term})
		}
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		for _, h := range held {
			h.m.renewing = false
		}
		for _, m := range in {
			m.busy.Done()
		}
		g.unlock()
	}()
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	slices.SortFunc(held, func(a, b heldSeat) int { return cmp.Compare(a.m.ns, b.m.ns) })
	actx, cancel := context.WithTimeout(ctx, g.base.expire-g.cfg.SafetyMargin)
	defer cancel()

	res, err := g.roundStatements(actx, names, held, in)
	if err != nil {
		g.mu.Lock()
		for _, ns := range names {
			g.noteAttempt(in[ns], start, Lease{}, false, err)
		}
		g.unlock()
		return err
	}

	for _, m := range in {
		// The round wrote m's candidate row, and the rounds keep it from
		// now on: attempts leave it alone.
		m.e.rowsKept.Store(true)
	}
	trusted := start.Add(g.base.expire - g.cfg.SafetyMargin)
	heldBy := make(map[*member]heldSeat, len(held))
	for _, h := range held {
		heldBy[h.m] = h
	}
	var attempts []*member
	g.mu.Lock()
	now := time.Now()
	for _, ns := range names {
		m := in[ns]
		if g.members[ns] != m || m.leaving {
			continue
		}
		s := res.seats[ns]
		l := m.e.lease(s)
		m.last = l
		if h, ok := heldBy[m]; ok {
			if m.cur != h.lead {
				continue // that leadership ended while the round ran
			}
			exp, renewed := res.renewed[ns]
			if renewed && now.Before(trusted) {
				m.cur.lease.ExpiresAt = exp
				m.cur.trustedUntil = trusted
				m.cur.watchdog.Reset(time.Until(trusted))
				m.e.remember(g.id, m.cur.lease)
				g.noteAttempt(m, start, m.cur.lease, false, nil)
				continue
			}
			reason, sitOut := lostReason(s, g.id, m.cur.lease, renewed)
			if !renewed && l.HeldBy(g.id) {
				// Not renewed, whatever the reading (a snapshot from before
				// the renewal waited) says.
				l = Lease{Namespace: ns}
				m.last = l
			}
			g.stopLocked(m, reason)
			if sitOut {
				// Another process vacated the term (an operator moving
				// leadership on): leave the seat to the other
				// candidates, which the vacate woke, for one interval.
				m.holdUntil = now.Add(g.cfg.Interval)
			}
			g.noteAttempt(m, start, l, false, nil)
			continue
		}
		if m.cur != nil {
			continue // an attempt began leading while the round ran: the reading predates it
		}
		if s.live() && s.leader != g.id {
			m.freeRounds = 0
			g.scheduleEdge(m, l)
			g.noteAttempt(m, start, l, false, nil)
			continue
		}
		g.noteAttempt(m, start, l, false, nil)
		attempts = append(attempts, m)
	}
	rand.Shuffle(len(attempts), func(i, j int) { attempts[i], attempts[j] = attempts[j], attempts[i] })
	if g.cfg.Balance && res.live > 0 {
		g.share = (total + res.live - 1) / res.live
		if g.leading > g.share {
			for _, m := range g.pickSurplus(g.leading - g.share) {
				g.handOverLocked(m)
			}
		}
		// Below the share, try as many free seats as the share has room
		// for; at or above it, leave a free seat to the others for two
		// rounds.
		room := g.share - g.leading
		kept := attempts[:0]
		for _, m := range attempts {
			switch {
			case !g.mayTryLocked(m):
			case room > 0:
				kept = append(kept, m)
				m.freeRounds, m.overShare = 0, false
				room--
			case m.freeRounds >= 2:
				kept = append(kept, m)
				m.freeRounds, m.overShare = 0, true
			default:
				m.freeRounds++
			}
		}
		attempts = kept
	}
	g.setQueueLocked(attempts)
	g.unlock()
	return nil
}

// lostReason says why lead, a lease the round tried to renew, was not
// renewed in time, from the seat as the round read it, and whether the
// Group is to sit the namespace out: when another process vacated the
// term.
func lostReason(s seat, id uuid.UUID, lead Lease, renewed bool) (reason string, sitOut bool) {
	switch {
	case renewed:
		return "the renewal returned after the trust window", false
	case s.leader == id && s.term == lead.Term && s.live():
		// The reading (a snapshot taken before the renewal waited for the
		// row) still shows the lease, but the renewal found the row
		// changed: vacated meanwhile.
		return stopVacated, true
	case s.leader == id && s.term == lead.Term:
		return "the lease expired before its renewal", false
	case s.leader == uuid.Nil, s.now.Before(lead.ExpiresAt):
		// Vacated, or taken while the lease was live, which only a
		// vacate allows: by someone else, since the Group vacates only
		// terms it no longer leads.
		return stopVacated, true
	}
	return "the database names another leader", false
}

// roundStatements runs a round's statements: the renewal of held, the
// reading of the seats of names and the heartbeat of their candidate rows.
func (g *Group) roundStatements(ctx context.Context, names []string, held []heldSeat, in map[string]*member) (roundResult, error) {
	d := g.base.d
	id := g.base.identity
	res := roundResult{seats: make(map[string]seat, len(names)), renewed: map[string]time.Time{}}
	var dbNow time.Time
	// readSeats reads the seat rows of rows: BatchSeats' columns, then,
	// with renewed, BatchRound's renewed_expires_at, then, with live, the
	// count of live candidates.
	readSeats := func(rows *sql.Rows, sent time.Time, renewed, live bool) error {
		defer rows.Close()
		for rows.Next() {
			var (
				now, exp, acq, rexp dialect.Time
				ns                  sql.NullString
				leader              uuid.NullUUID
				term                sql.NullInt64
			)
			dest := []any{&now, &ns, &leader, &term, &exp, &acq}
			if renewed {
				dest = append(dest, &rexp)
			}
			if live {
				dest = append(dest, &res.live)
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			dbNow = now.Time
			if !ns.Valid {
				continue
			}
			s := seatFromRow(now.Time, leader, term, exp, acq)
			if rexp.Valid {
				// Renewed by this statement: the snapshot's row is the one
				// before the renewal.
				res.renewed[ns.String] = rexp.Time
				s.leader, s.expires = g.id, rexp.Time
			}
			res.seats[ns.String] = s
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, ns := range names {
			s, ok := res.seats[ns]
			if !ok {
				s = seat{now: dbNow}
				res.seats[ns] = s
			}
			in[ns].e.noteSeat(s, sent)
		}
		return nil
	}
	err := g.batch.autocommit(ctx, "Group", nil, func(conn gorm.ConnPool, _ bool) error {
		clear(res.seats)
		clear(res.renewed)
		res.live = 0
		// On PostgreSQL the whole round is one statement.
		if q, ok := dialect.BatchRound(d, len(names), len(held) > 0, g.cfg.Balance); ok {
			args := make([]any, 0, 8)
			args = append(args, d.DurationArg(g.base.expire), g.id, id.Hostname, id.PID, id.Label, dialect.TextArray(names))
			if len(held) > 0 {
				nss := make([]string, len(held))
				terms := make([]int64, len(held))
				for k, h := range held {
					nss[k], terms[k] = h.m.ns, h.term
				}
				args = append(args, dialect.TextArray(nss), dialect.Int64Array(terms))
			}
			sent := time.Now()
			rows, err := conn.QueryContext(ctx, q, args...)
			if err != nil {
				return err
			}
			return readSeats(rows, sent, true, g.cfg.Balance)
		}

		// Elsewhere: renew, then read (with the live count), then
		// heartbeat.
		returned := map[string]time.Time{}
		inferred := false
		var changed int64
		if len(held) > 0 {
			args := []any{d.DurationArg(g.base.expire), g.id}
			for _, h := range held {
				args = append(args, h.m.ns, h.term)
			}
			if q, ok := dialect.BatchRenewReturning(d, len(held)); ok {
				rows, err := conn.QueryContext(ctx, q, args...)
				if err != nil {
					return err
				}
				if err := scanRenewed(rows, returned); err != nil {
					return err
				}
			} else {
				n, err := affected(conn.ExecContext(ctx, dialect.BatchRenew(d, len(held)), args...))
				if err != nil {
					return err
				}
				inferred, changed = true, n
			}
		}
		sent := time.Now()
		var (
			rows *sql.Rows
			err  error
		)
		if g.cfg.Balance {
			args := append(anyArgs(names), g.id)
			rows, err = conn.QueryContext(ctx, dialect.BatchSeatsLive(d, len(names)), append(args, anyArgs(names)...)...)
		} else {
			rows, err = conn.QueryContext(ctx, dialect.BatchSeats(d, len(names)), anyArgs(names)...)
		}
		if err != nil {
			return err
		}
		if err := readSeats(rows, sent, false, g.cfg.Balance); err != nil {
			return err
		}
		// The reading began after the renewal committed: a lease is
		// renewed when the renewal says so (or, without RETURNING, when
		// the reading shows it held in its term and live, which only this
		// renewal can have made it) and the reading still shows it held.
		for _, h := range held {
			s := res.seats[h.m.ns]
			if s.leader != g.id || s.term != h.term || !s.live() {
				continue
			}
			if exp, ok := returned[h.m.ns]; ok || inferred {
				if ok && exp.After(s.expires) {
					s.expires = exp
				}
				res.renewed[h.m.ns] = s.expires
			}
		}
		if inferred && int64(len(res.renewed)) > changed {
			// More leases read as renewed than the renewal changed:
			// something else extended them. Trust none of them.
			g.log.Warn("election: the seats read as renewed outnumber the rows the renewal changed; treating the leases as lost",
				"renewed", len(res.renewed), "changed", changed)
			clear(res.renewed)
		}
		at := dbNow.Truncate(time.Microsecond)
		exp := at.Add(g.base.expire).Truncate(time.Microsecond)
		tat, texp := d.TimeArg(at), d.TimeArg(exp)
		args := make([]any, 0, 8*len(names))
		for _, ns := range names {
			args = append(args, ns, g.id, tat, tat, texp, id.Hostname, id.PID, id.Label)
		}
		_, err = conn.ExecContext(ctx, dialect.BatchHeartbeat(d, len(names)), args...)
		return err
	})
	return res, err
}

// scanRenewed reads BatchRenewReturning's rows into out.
func scanRenewed(rows *sql.Rows, out map[string]time.Time) error {
	defer rows.Close()
	for rows.Next() {
		var (
			ns  string
			exp dialect.Time
		)
		if err := rows.Scan(&ns, &exp); err != nil {
			return err
		}
		out[ns] = exp.Time
	}
	return rows.Err()
}

// setQueueLocked replaces the attempts queued by the last round with ms:
// a fresher reading; g.mu is held.
func (g *Group) setQueueLocked(ms []*member) {
	for _, m := range g.queue {
		m.queued = false
	}
	g.queue = append(g.queue[:0], ms...)
	for _, m := range ms {
		m.queued = true
	}
	if len(ms) > 0 {
		select {
		case g.queued <- struct{}{}:
		default:
		}
	}
}

// mayTryLocked reports whether the Group may try to take m's seat now,
// share aside: it runs, neither leads nor tries m, is not leaving it,
// handing it over, or sitting it out; g.mu is held.
func (g *Group) mayTryLocked(m *member) bool {
	switch {
	case !g.running, g.stopping, m.leaving, g.members[m.ns] != m:
		return false
	case m.cur != nil, m.attempting, m.renewing, m.handing != 0:
		return false
	}
	return !time.Now().Before(m.holdUntil)
}

// withinShareLocked reports whether, with Balance, one more seat keeps the
// Group within its share (or the round allowed m above it: viaRound and
// m.overShare); always true without Balance. g.mu is held.
func (g *Group) withinShareLocked(m *member, viaRound bool) bool {
	switch {
	case !g.cfg.Balance:
		return true
	case viaRound && m.overShare:
		return true
	}
	return g.share > 0 && g.leading < g.share
}

// attempter runs the attempts, one at a time, until ctx ends: a wake (the
// end of another candidate's lease, a handoff) first, then the free seats
// of the last round.
func (g *Group) attempter(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case w := <-g.woken:
			g.tryWoken(ctx, w)
			continue
		default:
		}
		if m := g.nextQueued(); m != nil {
			g.attempt(ctx, m, true)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case w := <-g.woken:
			g.tryWoken(ctx, w)
		case <-g.queued:
		}
	}
}

// nextQueued takes the next seat of the queue the Group may try, marked as
// tried; nil when none.
func (g *Group) nextQueued() *member {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.queue) > 0 {
		m := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		m.queued = false
		if g.mayTryLocked(m) && g.withinShareLocked(m, true) {
			m.attempting = true
			m.busy.Add(1)
			return m
		}
		m.overShare = false
	}
	return nil
}

// tryWoken tries the seat a wake names, if the Group may.
func (g *Group) tryWoken(ctx context.Context, w wakeup) {
	m := w.m
	m.pending.Store(false)
	g.mu.Lock()
	ok := g.mayTryLocked(m) && g.withinShareLocked(m, false)
	if ok {
		m.attempting = true
		m.busy.Add(1)
		if o := g.base.observer; o != nil && w.src != 0 {
			wk := Wake{Namespace: m.ns, Candidate: g.id, Source: "local"}
			if w.src == wakeNotify {
				wk.Source = "notify"
			}
			g.note(func() { o.HandoffWake(wk) })
		}
	}
	g.unlock()
	if !ok {
		return
	}
	if w.src != 0 {
		// The seat is changing hands: take the locked path, which waits
		// for the vacating transaction rather than read the old holder.
		m.e.forgetSeat()
	}
	g.attempt(ctx, m, false)
}

// pickSurplus chooses the n namespaces to hand over: those led longest;
// g.mu is held.
func (g *Group) pickSurplus(n int) []*member {
	var led []*member
	for _, m := range g.members {
		if m.cur != nil && !m.leaving {
			led = append(led, m)
		}
	}
	slices.SortFunc(led, func(a, b *member) int { return a.cur.since.Compare(b.cur.since) })
	return led[:min(n, len(led))]
}

// handOverLocked gives up the lease of m to balance leadership: the work
// stops and, once it has returned, the Group vacates the term it handed
// over, if it still holds it in that term; it does not try m again until
// then, nor for two intervals. The vacate runs in the background so the
// rounds go on; g.mu is held.
func (g *Group) handOverLocked(m *member) {
	term := m.cur.lease.Term
	m.holdUntil = time.Now().Add(2 * g.cfg.Interval)
	m.handing = term
	g.stopLocked(m, "balancing")
	ctx := g.runCtx
	go func() {
		select {
		case <-m.work.wait():
		case <-ctx.Done():
			return // Run's return vacates it once the work has returned
		}
		g.mu.Lock()
		// Otherwise Leave or Run's return vacates it (m.handing tells
		// them the term).
		ok := m.handing == term && !m.leaving && !g.stopping
		if ok {
			m.busy.Add(1)
		}
		g.mu.Unlock()
		if !ok {
			return
		}
		vctx, cancel := context.WithTimeout(ctx, g.base.expire)
		defer cancel()
		// Term-guarded: a newer term of this candidate is never vacated,
		// and no attempt runs on m while it is handed over.
		err := m.e.vacate(vctx, "Balance", g.id, term, false, nil)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("election: handing a namespace over failed; its lease expires by itself", "namespace", m.ns, "err", err)
		}
		g.mu.Lock()
		// A term not vacated runs until its lease expires; Leave and
		// Run's return try again, and otherwise an attempt may renew it
		// (Elect keeps the term of a lease the candidate still holds).
		if m.handing == term && (err == nil || !m.leaving && !g.stopping) {
			m.handing = 0
		}
		m.busy.Done()
		g.mu.Unlock()
	}()
}

// scheduleEdge arranges an attempt at the end of l, another candidate's
// live lease as the last reading of the seat showed it, when that comes
// before the next round, at most twice per lease (a second time when the
// first attempt found the lease not yet ended by the database clock);
// g.mu is held.
func (g *Group) scheduleEdge(m *member, l Lease) {
	if !sameLease(l, m.edgeFor) {
		m.edgeFor, m.edgeTries = l, 0
	}
	if m.edgeTries >= edgeTries {
		return
	}
	until, ok := m.e.seatEnds(l.Leader)
	if !ok {
		return
	}
	d := time.Until(until) + edgeMargin
	if d >= g.cfg.Interval {
		return
	}
	m.edgeTries++
	m.stopEdge()
	m.edge = time.AfterFunc(max(d, 0), func() { g.wake(m, 0) })
}

// attempt runs Elect on m's seat, which the caller marked as tried, and
// starts leading if it is granted.
func (g *Group) attempt(ctx context.Context, m *member, queued bool) {
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, g.base.expire-g.cfg.SafetyMargin)
	defer cancel()
	var (
		l   Lease
		err error
	)
	if queued {
		// From a reading that may be stale by now: another process may
		// have taken the seat since, and at a cold start most have.
		l, err = m.e.electIfFree(actx, g.id)
	} else {
		l, err = m.e.Elect(actx, g.id)
	}
	g.mu.Lock()
	defer g.unlock()
	m.attempting, m.overShare = false, false
	defer m.busy.Done() // before the notes run: an observer may call Leave
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("election: group attempt failed", "namespace", m.ns, "err", err)
		}
		g.noteAttempt(m, start, Lease{}, false, err)
		return
	}
	trusted := start.Add(g.base.expire - g.cfg.SafetyMargin)
	m.last = l
	started := false
	if l.HeldBy(g.id) {
		if m.cur == nil && !m.leaving && !g.stopping && g.members[m.ns] == m && time.Now().Before(trusted) {
			g.startLocked(m, l, trusted)
			started = true
		} else if m.cur == nil {
			// Granted, but the Group cannot lead it now: Leave or Run's
			// return vacates this term.
			m.stray = l.Term
		}
	} else if !l.Vacant() && !m.leaving {
		// Another candidate's lease: try again at its end.
		g.scheduleEdge(m, l)
	}
	g.noteAttempt(m, start, l, started, nil)
}

// startLocked begins leading m under l; g.mu is held.
func (g *Group) startLocked(m *member, l Lease, trusted time.Time) {
	lctx, cancel := context.WithCancel(context.WithoutCancel(g.runCtx))
	cur := &groupLead{lease: l, trustedUntil: trusted, cancel: cancel, since: time.Now()}
	cur.watchdog = time.AfterFunc(time.Until(trusted), func() { g.trustEnded(m, cur) })
	m.cur = cur
	m.leading.Store(true)
	m.stray = 0
	g.leading++
	m.stopEdge()
	g.log.Info("election: leading", "namespace", m.ns, "term", l.Term, "lease_expires_at", l.ExpiresAt)
	if o := g.base.observer; o != nil {
		ld := Leadership{Namespace: m.ns, Candidate: g.id, Lease: l}
		g.note(func() { o.LeadershipStarted(ld) })
	}
	cb := g.cfg.OnStartedLeading
	if cb == nil {
		return
	}
	m.work.add()
	prev := m.prevWork
	done := make(chan struct{})
	m.prevWork = done
	// Started after the observer heard of the leadership.
	g.note(func() {
		go func() {
			defer close(done)
			defer m.work.done()
			if prev != nil {
				<-prev
			}
			if lctx.Err() != nil {
				return
			}
			cb(lctx, l)
		}()
	})
}

// trustEnded is the watchdog of one leadership: it ends it when its trust
// window passed without a renewal.
func (g *Group) trustEnded(m *member, c *groupLead) {
	g.mu.Lock()
	defer g.unlock()
	if m.cur == c && !time.Now().Before(c.trustedUntil) {
		g.stopLocked(m, "trust window passed")
	} else if m.cur == c {
		c.watchdog.Reset(time.Until(c.trustedUntil))
	}
}

// stopLocked ends m's leadership; g.mu is held.
func (g *Group) stopLocked(m *member, reason string) {
	c := m.cur
	m.cur = nil
	m.leading.Store(false)
	g.leading--
	c.cancel()
	c.watchdog.Stop()
	m.e.forget(g.id)
	g.log.Info("election: stopped leading", "namespace", m.ns, "term", c.lease.Term, "reason", reason)
	if o := g.base.observer; o != nil {
		ld := Leadership{Namespace: m.ns, Candidate: g.id, Lease: c.lease, Tenure: time.Since(c.since)}
		g.note(func() { reportStop(o, ld, reason) })
	}
	if cb := g.cfg.OnStoppedLeading; cb != nil {
		l := c.lease
		g.events.push(func() { cb(l) })
	}
}

// noteAttempt queues the report of an attempt or a round in m's namespace;
// g.mu is held.
func (g *Group) noteAttempt(m *member, start time.Time, l Lease, started bool, err error) {
	o := g.base.observer
	if o == nil {
		return
	}
	a := newAttempt(m.ns, g.id, time.Since(start), l, started, err)
	g.note(func() { o.Attempt(a) })
}
