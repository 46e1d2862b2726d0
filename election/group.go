package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
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
// has not joined.
var ErrUnknownNamespace = errors.New("election: namespace not joined")

// GroupConfig configures a Group. Interval, SafetyMargin and
// ShutdownTimeout mean what they mean in ElectorConfig, with the same
// defaults and rules, for every namespace of the Group.
type GroupConfig struct {
	// Namespaces are the namespaces the candidate joins when the Group is
	// made: at least one, each valid (see WithNamespace), none twice.
	// Join and Leave change the set while the Group runs.
	Namespaces []string

	// Interval is the time between rounds. Default Expire()/3; at most
	// Expire()/2.
	Interval time.Duration

	// SafetyMargin shortens the leader's trust in each lease, as in
	// ElectorConfig. Default Expire()/5.
	SafetyMargin time.Duration

	// ShutdownTimeout bounds Run's waits when it returns, and Leave's wait
	// when no context bounds it, for the leader work to return, as in
	// ElectorConfig. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Balance spreads leadership over the candidates: with N live
	// candidates in the Group's M namespaces, a Group that leads more than
	// ceil(M/N) namespaces hands its surplus over in one round, those it
	// has led longest first (through the graceful handoff: the work of
	// each returns first, then it vacates its own term), and a Group at or
	// above its share leaves a free seat to the others for two rounds
	// before it takes it. Off by default: then the
	// first candidate to find a seat free takes it, as Electors do.
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
// statements per round, whatever the number of namespaces: one reading of
// every seat, one heartbeat of every candidate row, and, while it leads
// any, one renewal of every lease it holds (plus, with Balance, one count
// of the live candidates). On PostgreSQL these are one statement, so a
// round is one round trip. It tries to take a seat only when that reading
// shows it free or when its lease ends (at the lease's edge, by the
// database clock, as an Elector does), so followers of a live seat never
// lock it. On PostgreSQL it shares the pool's one LISTEN connection with
// every Elector and Group on the pool, and a vacated seat wakes it at once.
//
// The guarantees per namespace are those of an Elector: the renewal is one
// statement fenced by the term and the database clock; a namespace whose
// lease the renewal could not extend is reported lost for that namespace
// only; each leadership trusts its lease until the round's start plus
// Expire() minus SafetyMargin, and a timer ends it then if no renewal came;
// leader work is never overlapped by the next leadership of the same
// namespace, and a seat is vacated only once its work has returned.
//
// Its methods are safe for concurrent use.
type Group struct {
	base *Election // settings and statements; its namespace is not used
	id   uuid.UUID
	cfg  GroupConfig
	log  *slog.Logger

	started atomic.Bool
	kick    chan struct{} // cap 1: run a round now
	tries   chan string   // namespaces to try now (edge, handoff)
	events  *dispatcher

	round sync.Mutex // held by rounds, attempts and Leave

	mu       sync.Mutex
	members  map[string]*member
	running  bool            // Run's loop is on
	runCtx   context.Context // Run's context, for leader work
	stopping bool            // Run is returning
}

// member is the Group in one namespace.
type member struct {
	g    *Group
	e    *Election
	ns   string
	hub  *hub // nil while not running
	cur  *groupLead
	last Lease // as of the last reading

	work     *workCount    // OnStartedLeading queued or running
	prevWork chan struct{} // closed when the last OnStartedLeading returned (nil: none)

	freeRounds int       // consecutive rounds that saw the seat free while at the share (Balance)
	holdUntil  time.Time // after a balancing resignation: no attempts before
	leaving    bool
	edge       *time.Timer
	edgeFor    Lease
	edgeTries  int
	pending    atomic.Bool // queued on tries
}

type groupLead struct {
	lease        Lease
	trustedUntil time.Time
	cancel       context.CancelFunc
	watchdog     *time.Timer
	since        time.Time
}

// NewGroup returns a Group for candidate id in cfg.Namespaces on db. opts
// are the Election options that apply to every namespace (WithExpire,
// WithSchema, WithLogger, WithLabel, WithObserver, WithHistoryRetention);
// WithNamespace is refused, since the namespaces are cfg's. It checks the
// database's settings as New does, within ctx. Bad input (uuid.Nil, no
// namespace, an invalid or repeated namespace, a setting out of its rules)
// returns an error and changes nothing.
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
	ecfg, err := checkRoundConfig(base.expire, ElectorConfig{Interval: cfg.Interval, SafetyMargin: cfg.SafetyMargin, ShutdownTimeout: cfg.ShutdownTimeout})
	if err != nil {
		return nil, err
	}
	cfg.Interval, cfg.SafetyMargin, cfg.ShutdownTimeout = ecfg.Interval, ecfg.SafetyMargin, ecfg.ShutdownTimeout
	cfg.Namespaces = slices.Clone(cfg.Namespaces)
	g := &Group{
		base:    base,
		id:      id,
		cfg:     cfg,
		log:     base.logBase.With("candidate", id),
		kick:    make(chan struct{}, 1),
		tries:   make(chan string, 64),
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

// ID returns the candidate id.
func (g *Group) ID() uuid.UUID { return g.id }

// Namespaces returns the namespaces joined, sorted.
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
// ErrInvalidNamespace, changing nothing, for an invalid namespace or one
// already joined.
func (g *Group) Join(ns string) error {
	if err := validNamespace(ns); err != nil {
		return fmt.Errorf("Join: %w", err)
	}
	g.mu.Lock()
	if g.stopping {
		g.mu.Unlock()
		return fmt.Errorf("%w: Join: the Group has stopped", ErrInvalidOption)
	}
	if _, ok := g.members[ns]; ok {
		g.mu.Unlock()
		return fmt.Errorf("%w: Join: namespace %q already joined", ErrInvalidNamespace, ns)
	}
	m := g.newMember(ns)
	g.members[ns] = m
	if g.running {
		m.hub = joinHub(m.e, m)
	}
	g.mu.Unlock()
	g.kickRound()
	return nil
}

// Leave removes namespace ns: the Group stops leading it, waits for its
// leader work to return (bounded by ctx, or by ShutdownTimeout when ctx has
// no deadline), then vacates its own term, if it holds one, and deletes its
// candidate row. If the work does not return in time, Leave neither
// vacates nor deletes (the lease and the row expire by themselves) and
// returns the context's error; the namespace is left either way. It returns
// ErrUnknownNamespace for a namespace not joined.
func (g *Group) Leave(ctx context.Context, ns string) error {
	if ctx == nil {
		return fmt.Errorf("%w: Leave: nil context", ErrInvalidOption)
	}
	g.mu.Lock()
	m := g.members[ns]
	if m == nil || m.leaving {
		g.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownNamespace, ns)
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
	g.mu.Unlock()
	if h != nil {
		leaveHub(m.e, m, h)
	}
	// No round or attempt is in flight for ns from here on.
	g.round.Lock()
	defer g.round.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.members, ns)
		g.mu.Unlock()
	}()
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		wctx, cancel = context.WithTimeout(ctx, g.cfg.ShutdownTimeout)
	}
	defer cancel()
	select {
	case <-m.work.wait():
	case <-wctx.Done():
		g.log.Warn("election: left the namespace without vacating: the leader's work has not returned; the lease expires by itself",
			"namespace", ns)
		return fmt.Errorf("election: Leave %q: waiting for the leader's work: %w", ns, wctx.Err())
	}
	return m.e.vacate(wctx, "Leave", g.id, term, true, nil)
}

// Run runs the Group until ctx ends: every Interval (shortened at random
// by up to 20%) it renews the leases it holds, reads every seat and
// refreshes every candidate row, in one statement each, then tries the
// seats it found free. When ctx ends it stops leading everywhere, waits for
// the callbacks (at most ShutdownTimeout), vacates the terms whose work
// returned, deletes its candidate rows and returns nil. A namespace whose
// work has not returned is neither vacated nor unregistered: its lease and
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
		m.hub = joinHub(m.e, m)
	}
	g.mu.Unlock()
	go g.events.run()

	err := g.loop(ctx)

	g.mu.Lock()
	g.stopping = true
	var held []*member
	terms := map[*member]int64{}
	var hubsOut []*member
	for _, m := range g.members {
		m.stopEdge()
		if m.cur != nil {
			terms[m] = m.cur.lease.Term
			g.stopLocked(m, "shutting down")
		}
		if !m.leaving {
			held = append(held, m)
		}
		if m.hub != nil {
			hubsOut = append(hubsOut, m)
		}
	}
	g.mu.Unlock()
	for _, m := range hubsOut {
		leaveHub(m.e, m, m.hub)
	}
	g.events.close()
	deadline := time.NewTimer(g.cfg.ShutdownTimeout)
	defer deadline.Stop()
	g.events.wait(deadline.C)
	if err != nil {
		return err
	}

	// Vacate the terms whose work returned, and delete the candidate rows.
	g.round.Lock()
	defer g.round.Unlock()
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	var rest []string
	for _, m := range held {
		select {
		case <-m.work.wait():
		case <-deadline.C:
		}
		if !m.work.idle() {
			g.log.Warn("election: returning without vacating: the leader's work has not returned within ShutdownTimeout; the lease expires by itself",
				"namespace", m.ns, "shutdown_timeout", g.cfg.ShutdownTimeout)
			continue
		}
		if term, ok := terms[m]; ok {
			if err := m.e.vacate(uctx, "Run", g.id, term, true, nil); err != nil {
				g.log.Warn("election: vacating on shutdown failed; the lease expires by itself", "namespace", m.ns, "err", err)
			}
			continue
		}
		rest = append(rest, m.ns)
	}
	if len(rest) > 0 {
		err := g.base.autocommit(uctx, "Run", nil, func(conn gorm.ConnPool, _ bool) error {
			args := append([]any{g.id}, anyArgs(rest)...)
			_, err := conn.ExecContext(uctx, dialect.BatchUnregister(g.base.d, len(rest)), args...)
			return err
		})
		if err != nil {
			g.log.Warn("election: unregistering on shutdown failed; the rows expire by themselves", "err", err)
		}
	}
	return nil
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

// poke is the handoff wake of the Group in m's namespace.
func (m *member) poke(wakeSource) { m.g.try(m) }

func (m *member) candidate() uuid.UUID { return m.g.id }

// try queues an attempt on m's seat for the loop, once.
func (g *Group) try(m *member) {
	if !m.pending.CompareAndSwap(false, true) {
		return
	}
	select {
	case g.tries <- m.ns:
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
		}
		timer.Reset(wait)
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				break wait
			case <-g.kick:
				timer.Stop()
				break wait
			case ns := <-g.tries:
				g.attemptOne(ctx, ns)
			}
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

// fullRound is one round over every namespace.
func (g *Group) fullRound(ctx context.Context) error {
	g.round.Lock()
	defer g.round.Unlock()
	start := time.Now()
	g.mu.Lock()
	var names []string
	var held []*member
	byName := make(map[string]*member, len(g.members))
	heldTerms := map[*member]int64{}
	for ns, m := range g.members {
		if m.leaving {
			continue
		}
		names = append(names, ns)
		byName[ns] = m
		if m.cur != nil {
			held = append(held, m)
			heldTerms[m] = m.cur.lease.Term
		}
	}
	g.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	actx, cancel := context.WithTimeout(ctx, g.base.expire-g.cfg.SafetyMargin)
	defer cancel()

	seats := make(map[string]seat, len(names))
	var dbNow time.Time
	live := 0
	// noteSeats reads the seat rows of rows (BatchSeats' columns, then the
	// live count when withLive) and tells each member what its seat was.
	noteSeats := func(rows *sql.Rows, sent time.Time, withLive bool) error {
		defer rows.Close()
		clear(seats)
		for rows.Next() {
			var (
				now, exp, acq dialect.Time
				ns            sql.NullString
				leader        uuid.NullUUID
				term          sql.NullInt64
			)
			dest := []any{&now, &ns, &leader, &term, &exp, &acq}
			if withLive {
				dest = append(dest, &live)
			}
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			dbNow = now.Time
			if ns.Valid {
				seats[ns.String] = seatFromRow(now.Time, leader, term, exp, acq)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, ns := range names {
			s, ok := seats[ns]
			if !ok {
				s = seat{now: dbNow}
				seats[ns] = s
			}
			byName[ns].e.noteSeat(s, sent)
		}
		return nil
	}
	id := g.base.identity
	err := g.base.autocommit(actx, "Group", nil, func(conn gorm.ConnPool, _ bool) error {
		// On PostgreSQL the whole round is one statement.
		index := make(map[string]int, len(names))
		for i, ns := range names {
			index[ns] = i
		}
		heldAt := make([]int, len(held))
		for k, m := range held {
			heldAt[k] = index[m.ns]
		}
		if q, ok := dialect.BatchRound(g.base.d, len(names), heldAt, g.cfg.Balance); ok {
			args := make([]any, 0, 5+len(names)+len(held))
			args = append(args, g.base.d.DurationArg(g.base.expire), g.id, id.Hostname, id.PID, id.Label)
			args = append(args, anyArgs(names)...)
			for _, m := range held {
				args = append(args, heldTerms[m])
			}
			sent := time.Now()
			rows, err := conn.QueryContext(actx, q, args...)
			if err != nil {
				return err
			}
			return noteSeats(rows, sent, g.cfg.Balance)
		}

		if len(held) > 0 {
			args := []any{g.base.d.DurationArg(g.base.expire), g.id}
			for _, m := range held {
				args = append(args, m.ns, heldTerms[m])
			}
			if _, err := conn.ExecContext(actx, dialect.BatchRenew(g.base.d, len(held)), args...); err != nil {
				return err
			}
		}
		sent := time.Now()
		rows, err := conn.QueryContext(actx, dialect.BatchSeats(g.base.d, len(names)), anyArgs(names)...)
		if err != nil {
			return err
		}
		if err := noteSeats(rows, sent, false); err != nil {
			return err
		}
		at := dbNow.Truncate(time.Microsecond)
		exp := at.Add(g.base.expire).Truncate(time.Microsecond)
		tat, texp := g.base.d.TimeArg(at), g.base.d.TimeArg(exp)
		args := make([]any, 0, 8*len(names))
		for _, ns := range names {
			args = append(args, ns, g.id, tat, tat, texp, id.Hostname, id.PID, id.Label)
		}
		if _, err := conn.ExecContext(actx, dialect.BatchHeartbeat(g.base.d, len(names)), args...); err != nil {
			return err
		}
		if g.cfg.Balance {
			if err := conn.QueryRowContext(actx, dialect.BatchLive(g.base.d, len(names)), anyArgs(names)...).Scan(&live); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for _, ns := range names {
			g.observeAttempt(byName[ns], start, Lease{}, false, err)
		}
		return err
	}

	trusted := start.Add(g.base.expire - g.cfg.SafetyMargin)
	var attempts, surplus []*member
	g.mu.Lock()
	leading := 0
	for _, ns := range names {
		m := g.members[ns]
		if m == nil || m.leaving {
			continue
		}
		s := seats[ns]
		l := m.e.lease(s)
		m.last = l
		if m.cur != nil {
			if l.HeldBy(g.id) && l.Term == m.cur.lease.Term && time.Now().Before(trusted) {
				m.cur.lease.ExpiresAt = l.ExpiresAt
				m.cur.trustedUntil = trusted
				m.cur.watchdog.Reset(time.Until(trusted))
				m.e.remember(g.id, m.cur.lease)
				leading++
				g.observeAttempt(m, start, m.cur.lease, false, nil)
				continue
			}
			reason := "the database names another leader"
			if l.HeldBy(g.id) && l.Term == m.cur.lease.Term {
				reason = "the renewal returned after the trust window"
			}
			g.stopLocked(m, reason)
		}
		if s.live() && s.leader != g.id {
			m.freeRounds = 0
			g.scheduleEdge(m, s)
			g.observeAttempt(m, start, l, false, nil)
			continue
		}
		attempts = append(attempts, m)
	}
	if g.cfg.Balance && live > 0 {
		share := (len(names) + live - 1) / live
		if leading > share {
			surplus = g.pickSurplus(leading - share)
		}
		// Below the share, try as many free seats as the share has room
		// for; at or above it, leave a free seat to the others for two
		// rounds.
		room := share - leading
		kept := attempts[:0]
		for _, m := range attempts {
			switch {
			case time.Now().Before(m.holdUntil):
			case room > 0, m.freeRounds >= 2:
				kept = append(kept, m)
				m.freeRounds = 0
				room--
			default:
				m.freeRounds++
			}
		}
		attempts = kept
	}
	g.mu.Unlock()

	for _, m := range attempts {
		if ctx.Err() != nil {
			return nil
		}
		g.attempt(ctx, m)
	}
	for _, m := range surplus {
		g.handOver(ctx, m)
	}
	return nil
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

// handOver gives up the lease of m to balance leadership: the work stops
// and, once it has returned, the Group vacates its term; it does not try m
// again for two intervals. It runs in the background so the rounds go on.
func (g *Group) handOver(ctx context.Context, m *member) {
	g.mu.Lock()
	if m.cur == nil || m.leaving {
		g.mu.Unlock()
		return
	}
	term := m.cur.lease.Term
	m.holdUntil = time.Now().Add(2 * g.cfg.Interval)
	g.stopLocked(m, "balancing")
	g.mu.Unlock()
	go func() {
		select {
		case <-m.work.wait():
		case <-ctx.Done():
			return
		}
		g.round.Lock()
		defer g.round.Unlock()
		vctx, cancel := context.WithTimeout(ctx, g.base.expire)
		defer cancel()
		if err := m.e.vacate(vctx, "Balance", g.id, term, false, nil); err != nil && ctx.Err() == nil {
			g.log.Warn("election: handing a namespace over failed; its lease expires by itself", "namespace", m.ns, "err", err)
		}
	}()
}

// scheduleEdge arranges an attempt at the end of another candidate's lease
// when it comes before the next round, at most twice per lease; g.mu is
// held.
func (g *Group) scheduleEdge(m *member, s seat) {
	l := m.e.lease(s)
	if !sameLease(l, m.edgeFor) {
		m.edgeFor, m.edgeTries = l, 0
	}
	if m.edgeTries >= edgeTries {
		return
	}
	until, ok := m.e.seatEnds(s.leader)
	if !ok {
		return
	}
	d := time.Until(until) + edgeMargin
	if d >= g.cfg.Interval {
		return
	}
	m.edgeTries++
	m.stopEdge()
	m.edge = time.AfterFunc(max(d, 0), func() { g.try(m) })
}

// attemptOne is an attempt on one namespace outside a round: at a lease's
// edge or after a handoff wake.
func (g *Group) attemptOne(ctx context.Context, ns string) {
	g.mu.Lock()
	m := g.members[ns]
	if m != nil {
		m.pending.Store(false)
	}
	if m == nil || m.leaving || m.cur != nil || time.Now().Before(m.holdUntil) {
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.round.Lock()
	defer g.round.Unlock()
	g.attempt(ctx, m)
}

// attempt runs Elect on m's seat and starts leading if it is granted.
func (g *Group) attempt(ctx context.Context, m *member) {
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, g.base.expire-g.cfg.SafetyMargin)
	defer cancel()
	l, err := m.e.Elect(actx, g.id)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("election: group attempt failed", "namespace", m.ns, "err", err)
		}
		g.observeAttempt(m, start, Lease{}, false, err)
		return
	}
	trusted := start.Add(g.base.expire - g.cfg.SafetyMargin)
	g.mu.Lock()
	m.last = l
	started := false
	if l.HeldBy(g.id) && !m.leaving && !g.stopping && time.Now().Before(trusted) && time.Now().After(m.holdUntil) {
		if m.cur == nil {
			g.startLocked(m, l, trusted)
			started = true
		} else if m.cur.lease.Term == l.Term {
			m.cur.lease.ExpiresAt = l.ExpiresAt
			m.cur.trustedUntil = trusted
			m.cur.watchdog.Reset(time.Until(trusted))
		}
	}
	g.mu.Unlock()
	g.observeAttempt(m, start, l, started, nil)
}

// startLocked begins leading m under l; g.mu is held.
func (g *Group) startLocked(m *member, l Lease, trusted time.Time) {
	lctx, cancel := context.WithCancel(context.WithoutCancel(g.runCtx))
	cur := &groupLead{lease: l, trustedUntil: trusted, cancel: cancel, since: time.Now()}
	cur.watchdog = time.AfterFunc(time.Until(trusted), func() { g.trustEnded(m, cur) })
	m.cur = cur
	m.stopEdge()
	g.log.Info("election: leading", "namespace", m.ns, "term", l.Term, "lease_expires_at", l.ExpiresAt)
	if o := g.base.observer; o != nil {
		o.LeadershipStarted(Leadership{Namespace: m.ns, Candidate: g.id, Lease: l})
	}
	cb := g.cfg.OnStartedLeading
	if cb == nil {
		return
	}
	m.work.add()
	prev := m.prevWork
	done := make(chan struct{})
	m.prevWork = done
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
}

// trustEnded is the watchdog of one leadership: it ends it when its trust
// window passed without a renewal.
func (g *Group) trustEnded(m *member, c *groupLead) {
	g.mu.Lock()
	defer g.mu.Unlock()
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
	c.cancel()
	c.watchdog.Stop()
	m.e.forget(g.id)
	g.log.Info("election: stopped leading", "namespace", m.ns, "term", c.lease.Term, "reason", reason)
	if o := g.base.observer; o != nil {
		reportStop(o, Leadership{Namespace: m.ns, Candidate: g.id, Lease: c.lease, Tenure: time.Since(c.since)}, reason)
	}
	if cb := g.cfg.OnStoppedLeading; cb != nil {
		l := c.lease
		g.events.push(func() { cb(l) })
	}
}

func (g *Group) observeAttempt(m *member, start time.Time, l Lease, started bool, err error) {
	o := g.base.observer
	if o == nil {
		return
	}
	o.Attempt(newAttempt(m.ns, g.id, time.Since(start), l, started, err))
}
