package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/pace"
)

// ErrGroupStarted is returned by Group.Run when Run was already called on
// that Group. A Group runs once; make a new one to run again.
var ErrGroupStarted = errors.New("election: Group.Run already called")

// ErrUnknownNamespace is returned by Group.Leave and Group.Resign for a
// namespace the Group has not joined, or is already leaving.
var ErrUnknownNamespace = errors.New("election: namespace not joined")

// GroupConfig configures a Group. Interval, SafetyMargin, ShutdownTimeout
// and the callbacks mean what they mean in ElectorConfig, with the same
// defaults and rules, for every namespace of the Group.
type GroupConfig struct {
	// Namespaces are the namespaces the candidate joins when the Group is
	// made: at least one, each valid (see WithNamespace), none twice, and
	// no more than the database's batch statements can carry (5,461 on
	// SQLite, 10,922 on MySQL and MariaDB, 65,534 on PostgreSQL). Join and
	// Leave change the set while the Group runs.
	Namespaces []string

	// Interval is the time between rounds while the Group follows a
	// namespace. Default Expire()/3; at most Expire()/2. A Group that
	// leads every namespace it joined renews by its leases, every
	// Expire()/3 (or Interval, when longer).
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
	// candidate rows (in the round's statements, at no extra round trip),
	// but for an expiry window after the Group's own rounds failed or
	// fell behind: what kept them from the database (a stall, a failover)
	// may have kept the others' too, so a lower count is not believed
	// (the share does not rise) until their rounds have had a window to
	// come back.
	// In its first Interval a Group takes at most one seat, the least
	// share any number of candidates gives it: the others started with it
	// are not counted before their first round, and a fleet started
	// together would otherwise see its first process take every seat and
	// hand them over again one by one.
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
	// the last lease held. Optional.
	OnStoppedLeading func(lease Lease)

	// OnNewLeader is called when the Group observes, in a namespace, a
	// leader or term different from the last it observed there, as
	// ElectorConfig.OnNewLeader is. Optional.
	OnNewLeader func(lease Lease)
}

// A Group runs one candidate in many namespaces with a constant number of
// statements per round, whatever the number of namespaces, and keeps its
// candidacy in all of them alive with one member row (schema version 3),
// which its candidate rows point to: a round refreshes that row, renews
// every lease the Group holds, and reads only the seats that concern it
// (its own, those it has not read yet, and those vacant or whose lease
// ends before its next round). On PostgreSQL that is one statement, so a
// round is one round trip; elsewhere at most three. It tries to take a
// seat only when a reading shows it free or when its lease ends (at the
// lease's edge, by the database clock, as an Elector does), so followers
// of a live seat never lock it, and write nothing while its leader
// renews. On PostgreSQL it shares the pool's one LISTEN connection with
// every Elector and Group on the pool, and a vacated seat wakes it at
// once; a wake-up that names no namespace (MySQL's, or a listener's
// reconnection) runs one round.
//
// Rounds never wait for attempts: the attempts on free seats run beside the
// rounds (on PostgreSQL a round's free seats in one statement, in batches
// that grow with quick rounds; elsewhere one Elect each), and a new round's
// reading replaces the list, so a cold start with many free seats never
// delays the renewal of the seats already won. Attempts are shed before
// renewals: while rounds are slow (the database overloaded) the Group sends
// its rounds and little else, and tries the free seats once they are quick
// again (see OutcomeShed). A Group thus uses at most two of its pool's
// connections for the election (plus its listener on PostgreSQL).
//
// In each namespace the Group follows the same rules as an Elector (the
// package doc's "The engine"): the renewal is one statement fenced by the
// term and the database clock, and one it did not change is reported lost
// for that namespace only; each leadership trusts its lease until the
// round's start plus Expire() minus SafetyMargin; leader work is never
// overlapped by the next leadership of the same namespace; a seat is
// vacated only once its work has returned; and a namespace whose term
// another process vacated is sat out for one Interval.
//
// Its methods are safe for concurrent use.
type Group struct {
	base   *Election // settings and statements; its namespace is not used
	batch  *Election // base without prepared statements, for the batch statements
	id     uuid.UUID
	cfg    GroupConfig
	t      timing
	log    *slog.Logger
	limit  int // most namespaces the batch statements carry
	clk    clock
	box    box // the lock of every member's machine, and of the fields below it
	events *dispatcher

	started atomic.Bool
	kick    chan struct{} // cap 1: run a round now
	woken   chan wakeup   // edge and handoff wakes, for the attempter
	queued  chan struct{} // cap 1: the attempt queue has work

	renewNow atomic.Bool   // a machine asked for a renewal now (sigRenew)
	giveUps  chan struct{} // cap 1: the vacates of handovers and Resign, one at a time (machine.giveUps)
	hooks    testHooks

	members  map[string]*member
	sorted   []*member       // members in namespace order (sortedLocked)
	ordered  bool            // sorted is up to date: false after a Join or Leave
	leavers  int             // members being left
	active   actives         // the members the rounds take in
	rounds   uint64          // rounds begun, the stamp of the last (member.round)
	pace     pace.Budget     // the attempts' budget
	running  bool            // Run's loop is on
	runCtx   context.Context // Run's context (Background before Run)
	stopping bool            // Run is returning
	share    int             // with Balance: ceil(M/N) as of the last round; 0 before the first
	live     int             // with Balance: the live count the share was last counted from (balanceLocked)
	filled   bool            // with Balance: the Group has led its share since it started (readsLocked)
	liveHold time.Time       // with Balance: until then a lower live count is not believed (fullRound)
	warm     time.Time       // with Balance: until then the Group takes at most one seat (shareLocked); set by the first round
	freeSeen int             // with Balance: the seats the last round found free (balanceLocked)
	beat     time.Time       // the start of the last round that succeeded, so refreshed the member row before it returned
	ranged   time.Time       // the start of the last round that succeeded and read the range of seats lapsing or freed lately
	remarked time.Time       // the start of the last round that marked the seats for reading again after a gap (fullRound)
	heavy    int             // answered rounds in a row slower than carryLocked allows; a failed round resets it
	seatCost time.Duration   // a round's time per seat it returned, of the last rounds (noteCostLocked)
	unmarked uint64          // box.stops as of the last round that took the Group's mark off the seats it stopped leading (RoundIn.Release)
	unsure   bool            // a round failed since: its renewal may have marked a seat the Group does not lead
	queue    []*member       // free seats of the last round, to try in order
	scratch  roundScratch    // the round loop's own, outside g.box
	pruning  groupPrune      // the round loop's own: the prune in pieces (pruneLed)
}

// member is the Group in one namespace: the machine, and what the Group
// keeps of its calls in flight. Its fields change under g.box.
type member struct {
	g  *Group
	m  *machine
	ns string

	hub *handoff.Hub // nil while not running
	// busy counts the rounds and attempts in flight that include the
	// member; Add only while !leaving, so Leave can wait for them.
	busy       sync.WaitGroup
	renewing   bool      // its lease is in the renewal of the round in flight
	attempting bool      // an attempt on its seat is in flight
	queued     bool      // on g.queue
	overShare  bool      // the round let it be tried above the share (Balance)
	freeRounds int       // consecutive rounds that saw the seat free while at the share (Balance)
	written    bool      // a round wrote its candidate row, pointing to the member row
	seen       bool      // a round read its seat row: later rounds read it only when vacant or lapsing
	reread     bool      // its lease's edge passed untried (the share, the budget): the next round reads the seat
	round      uint64    // the stamp of the last round that took it in (Group.rounds)
	place      placement // on the list a round walks, at rest, or in the pool (group_active.go)
	poolAt     int       // its index in the pool
	leaving    bool
	pending    atomic.Bool // on g.woken
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
	t, err := checkTiming(base.expire, cfg.Interval, cfg.SafetyMargin, cfg.ShutdownTimeout)
	if err != nil {
		return nil, err
	}
	cfg.Interval, cfg.SafetyMargin, cfg.ShutdownTimeout = t.interval, t.margin, t.shutdownTimeout
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
		t:       t,
		log:     base.logBase.With("candidate", id),
		limit:   limit,
		clk:     systemClock{},
		kick:    make(chan struct{}, 1),
		woken:   make(chan wakeup, 256),
		queued:  make(chan struct{}, 1),
		events:  newDispatcher(),
		members: map[string]*member{},
		runCtx:  context.Background(),
		pace:    pace.New(dialect.FirstJoins(base.d)),
		giveUps: make(chan struct{}, 1),
	}
	g.box.downs.log = g.log
	for _, ns := range cfg.Namespaces {
		g.members[ns] = g.newMember(ns)
	}
	return g, nil
}

// newMember returns the Group in namespace ns; g.box is held, or the Group
// is not shared yet.
func (g *Group) newMember(ns string) *member {
	e := g.base.inNamespace(ns)
	mem := &member{g: g, ns: ns}
	cb := callbacks{started: g.cfg.OnStartedLeading, stopped: g.cfg.OnStoppedLeading, newLeader: g.cfg.OnNewLeader}
	log := withAttrsLater(g.base.logBase, slog.String("namespace", ns), slog.Any("candidate", g.id))
	mem.m = newMachine(e, g.id, g.t, &g.box, g.clk, cb, g.events, mem.signal, log)
	mem.m.parent = context.WithoutCancel(g.runCtx)
	mem.m.giveUps = g.giveUps
	g.activateLocked(mem)
	return mem
}

// signal is the member's machine's signal: tries go to the attempter,
// the rest start a round.
func (mem *member) signal(s signal) {
	switch s.kind {
	case sigEdge, sigWake:
		mem.g.wake(mem, s)
	case sigSitOut:
		// The rounds go on at their pace; the attempts respect the sit-out.
	case sigRenew:
		mem.g.renewNow.Store(true)
		mem.g.kickRound()
	default:
		mem.g.kickRound()
	}
}

// ID returns the candidate id.
func (g *Group) ID() uuid.UUID { return g.id }

// Namespaces returns the namespaces joined, sorted. A namespace being left
// (Leave has not returned) is not listed, and cannot be joined again until
// Leave returns.
func (g *Group) Namespaces() []string {
	g.box.lock()
	defer g.box.unlock()
	out := make([]string, 0, len(g.members))
	for ns, mem := range g.members {
		if !mem.leaving {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// IsLeader reports whether the Group leads namespace ns now: it holds the
// lease and is within its trust window.
func (g *Group) IsLeader(ns string) bool {
	_, ok := g.Lease(ns)
	return ok
}

// Lease returns the lease the Group leads namespace ns under, and whether
// it leads ns (IsLeader). Pass it to Guard.
func (g *Group) Lease(ns string) (Lease, bool) {
	g.box.lock()
	defer g.box.unlock()
	if mem := g.members[ns]; mem != nil {
		return mem.m.leaseLocked(g.clk.Now())
	}
	return Lease{}, false
}

// Observed returns the seat of namespace ns as the Group last saw it,
// whoever holds it: the zero Lease before the first round or for a
// namespace not joined, a Lease with Leader uuid.Nil when the seat was
// vacant.
func (g *Group) Observed(ns string) Lease {
	g.box.lock()
	defer g.box.unlock()
	if mem := g.members[ns]; mem != nil {
		return mem.m.last
	}
	return Lease{}
}

// Leading returns the namespaces the Group leads now, sorted.
func (g *Group) Leading() []string {
	g.box.lock()
	defer g.box.unlock()
	var out []string
	now := g.clk.Now()
	for ns, mem := range g.members {
		if _, ok := mem.m.leaseLocked(now); ok {
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
	g.box.lock()
	defer g.box.unlock()
	if g.stopping {
		return fmt.Errorf("%w: Join: the Group has stopped", ErrInvalidOption)
	}
	if mem, ok := g.members[ns]; ok {
		if mem.leaving {
			return fmt.Errorf("%w: Join: namespace %q is still being left; join it again once Leave has returned", ErrInvalidNamespace, ns)
		}
		return fmt.Errorf("%w: Join: namespace %q already joined", ErrInvalidNamespace, ns)
	}
	if len(g.members) >= g.limit {
		return fmt.Errorf("%w: Join: a Group takes at most %d namespaces on %s (the parameters one statement can carry)",
			ErrInvalidOption, g.limit, g.base.d.Name())
	}
	mem := g.newMember(ns)
	g.members[ns] = mem
	g.ordered = false
	if g.running {
		mem.hub = mem.m.e.joinHub(mem.m)
	}
	g.kickRound()
	return nil
}

// member returns the member of ns that is not being left; g.box is held.
func (g *Group) joined(op, ns string) (*member, error) {
	mem := g.members[ns]
	switch {
	case mem == nil:
		return nil, fmt.Errorf("%w: %s %q", ErrUnknownNamespace, op, ns)
	case mem.leaving:
		return nil, fmt.Errorf("%w: %s: %q is being left", ErrUnknownNamespace, op, ns)
	}
	return mem, nil
}

// Resign gives up the leadership of namespace ns and stays a candidate
// there, as Elector.Resign does in its namespace: the Group stops leading
// ns at once, waits for its leader work to return, vacates the term it led
// in (which wakes the other candidates), then sits ns out for one
// Interval, unless another candidate's handoff ends that sooner. Its other
// namespaces go on. Called from the leader's work of ns with its context,
// it returns at once and vacates once the work has returned; otherwise
// ctx bounds the wait, and when ctx ends first it returns ctx's error and
// leaves the seat as it is. It returns ErrUnknownNamespace for a
// namespace not joined, or being left.
func (g *Group) Resign(ctx context.Context, ns string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Resign: nil context", ErrInvalidOption)
	}
	g.box.lock()
	mem, err := g.joined("Resign", ns)
	var term int64
	if err == nil {
		term = mem.m.beginGiveUpLocked(whyResigned)
	}
	g.box.unlock()
	if err != nil {
		return err
	}
	return mem.m.giveUp(ctx, "Resign", term, g.t.interval)
}

// Leave removes namespace ns: the Group stops leading it at once (its
// other namespaces go on, renewed as usual), waits for the rounds and the
// attempt in flight that include ns and for its leader work to return
// (bounded by ctx, or by ShutdownTimeout when ctx has no deadline), then
// vacates the term it held, if any, and deletes its candidate row. If the
// work does not return in time, Leave neither vacates nor deletes (the
// lease and the row expire by themselves, since the Group no longer renews
// them) and returns the context's error; the namespace is left either way.
// Called from the leader's work of ns with its context, it returns nil at
// once and finishes on its own once the work has returned. It returns
// ErrUnknownNamespace for a namespace not joined, or already being left.
func (g *Group) Leave(ctx context.Context, ns string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Leave: nil context", ErrInvalidOption)
	}
	g.box.lock()
	mem, err := g.joined("Leave", ns)
	var h *handoff.Hub
	if err == nil {
		mem.leaving = true
		g.leavers++
		g.activateLocked(mem)
		mem.m.closeLocked(whyLeft)
		h, mem.hub = mem.hub, nil
	}
	g.box.unlock()
	if err != nil {
		return err
	}
	if h != nil {
		mem.m.e.leaveHub(mem.m, h)
	}
	leave := func(ctx context.Context) error {
		defer func() {
			g.box.lock()
			if g.members[ns] == mem {
				delete(g.members, ns)
				g.ordered = false
				g.leavers--
			}
			g.box.unlock()
		}()
		// No round or attempt takes ns in from here on; wait for those in
		// flight (a statement each), then for the work.
		idle := make(chan struct{})
		go func() {
			mem.busy.Wait()
			close(idle)
		}()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("election: Leave %q: %w: %w", ns, errWorkRunning, ctx.Err())
		}
		err := mem.m.vacateAfterWork(ctx, "Leave", anyTerm, true)
		if errors.Is(err, errWorkRunning) {
			g.log.Warn("election: left the namespace without vacating: the leader's work has not returned; the lease expires by itself",
				"namespace", ns)
		}
		return err
	}
	if mem.m.fromWork(ctx) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout+g.t.expire)
		mem.m.async.Add(1)
		go func() {
			defer mem.m.async.Done()
			defer cancel()
			_ = leave(wctx)
		}()
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.ShutdownTimeout)
		defer cancel()
	}
	return leave(ctx)
}

// Run runs the Group until ctx ends: every Interval (shortened at random
// by up to 20%) it renews the leases it holds, reads every seat and
// refreshes every candidate row, in one statement each, and hands the
// seats it found free to its attempts, which run beside the rounds. When
// ctx ends it stops leading everywhere, waits for the callbacks, vacates
// each term as soon as its work has returned (on PostgreSQL those whose
// work has returned in one statement), deletes its candidate rows and
// returns nil, all within ShutdownTimeout. A namespace whose work has
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
	g.box.lock()
	g.running, g.runCtx = true, ctx
	for _, mem := range g.members {
		mem.m.parent = context.WithoutCancel(ctx)
		if !mem.leaving {
			mem.hub = mem.m.e.joinHub(mem.m)
		}
	}
	g.box.unlock()
	go g.events.run()

	actx, stopAttempts := context.WithCancel(ctx)
	attempterDone := make(chan struct{})
	go func() {
		defer close(attempterDone)
		g.attempter(actx)
	}()
	err := runRounds(ctx, g, g.t, g.clk, g.kick, g.log)
	stopAttempts()
	<-attempterDone
	return g.shutdown(ctx, err)
}

// machines returns the machines of the namespaces joined (Runner).
func (g *Group) machines() []*machine {
	g.box.lock()
	defer g.box.unlock()
	out := make([]*machine, 0, len(g.members))
	for _, mem := range g.members {
		out = append(out, mem.m)
	}
	return out
}
