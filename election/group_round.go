package election

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/pace"
)

// kickRound asks the round loop for a round now, unless a kick is
// already waiting (signaled tells the round's cause).
func (g *Group) kickRound() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// signaled is the cause of a round a kick started (driverLoop): a
// renewal a machine asked for, or a wake-up that names no namespace.
func (g *Group) signaled() (roundCause, bool) {
	if g.renewNow.Swap(false) {
		return causeRenew, false
	}
	return causeWakeNotify, false
}

// heldSeat is a lease a round renews.
type heldSeat struct {
	mem  *member
	lead *leadership // the leadership it renews; nil for a reclaim (machine.reclaimLocked)
	term int64       // a reclaim's term
}

// roundScratch holds the slices and map a round builds, emptied and kept
// for the next (fullRound, the only user: rounds run one at a time). At
// 40,000 namespaces, building them anew every round cost about a tenth
// of a Group's CPU, most of it in the garbage collector
// (docs/performance.md).
type roundScratch struct {
	read, join, free []string
	leases           []dialect.HeldLease
	held             []heldSeat
	members, joining []*member
	heldBy           map[*member]heldSeat
}

// sampleSize is how many namespaces a Balance round counts the live
// candidates of: the Groups of a fleet that join the same namespaces
// sample the same ones (the first, sorted), and a few guard against one
// that some candidates have not joined.
const sampleSize = 4

// round is one round over every namespace but those being left or tried
// at the moment (an attempt reads the seat itself) and those whose
// candidate rows wait for a later round, then, now and then, the prune.
func (g *Group) round(ctx context.Context, cause roundCause) error {
	began := time.Now()
	err := g.fullRound(ctx, cause)
	g.box.lock()
	quick := g.pace.Quick()
	g.box.unlock()
	if err == nil && quick {
		// The next round may be due three quarters of an interval from
		// this one's start (jitter, and renewEvery never shorter): the
		// prune ends by then, and within the trust window as it always
		// did.
		g.pruneLed(ctx, began.Add(min(g.t.interval*3/4, g.t.trust())))
	}
	if g.hooks.round != nil {
		g.hooks.round(roundReport{cause: cause, err: err})
	}
	return err
}

// fullRound is round without the prune: one dialect.GroupRound, which
// refreshes the Group's member row, renews the leases it holds, writes the
// candidate rows of the namespaces joined since (as many as the budget
// allows), and reads the seats that concern it (the free ones, as many as
// the budget allows: someOf), whose results it hands to the machines.
func (g *Group) fullRound(ctx context.Context, cause roundCause) error {
	start := g.clk.Now()
	g.box.lock()
	total := len(g.members) - g.leavers
	in := dialect.RoundIn{Member: g.id, Hostname: g.base.identity.Hostname, PID: g.base.identity.PID, Label: g.base.identity.Label,
		Expire: g.base.expire, Horizon: g.t.interval, Lapsed: g.base.expire}
	sc := &g.scratch
	in.Held, in.Read, in.Join = sc.leases[:0], sc.read[:0], sc.join[:0]
	var (
		held    = sc.held[:0]
		free    = sc.free[:0]    // read when the budget allows (someOf)
		members = sc.members[:0] // in the round, in namespace order
		joining = sc.joining[:0] // their candidate rows written by it
	)
	defer func() {
		clear(members)
		clear(joining)
		clear(held)
		clear(sc.heldBy)
		*sc = roundScratch{leases: in.Held[:0], read: in.Read[:0], join: in.Join[:0],
			held: held[:0], free: free[:0], members: members[:0], joining: joining[:0], heldBy: sc.heldBy}
	}()
	g.rounds++
	stamp, beat := g.rounds, g.beat
	// In an overload (carryLocked) a round that sheds the attempts reads
	// no range of seats lapsing lately: it holds most seats then.
	if g.pace.Overloaded() {
		in.Horizon, in.Lapsed = 0, 0
	}
	in.Range = g.rangeLocked()
	// The first namespaces in order whose candidate rows are not written
	// yet are written by this round, as many as the budget allows; the
	// others are neither read nor tried until a later round writes theirs
	// (those a balanced round samples come first). Seats the Group leads
	// are never left out.
	budget := g.pace.Joins()
	joins, reclaims := budget, 0
	// After rounds that failed, or read no whole range, for longer than
	// the range's window (an expiry window), a seat last read as another's
	// live lease may have lapsed unseen, and only a reading by key finds
	// it: every seat the Group does not lead is read again, in steps,
	// marked when the gap is found and again each expiry window while it
	// lasts, not in every round (in an overload, 40,000 members marked and
	// walked in each took half the rounds' CPU). Those at rest go to the
	// pool directly; those listed, by the walk below.
	if silentFor(g.ranged, start, g.base.expire) && (g.remarked.Before(g.ranged) || silentFor(g.remarked, start, g.base.expire)) {
		g.remarked = start
		for _, mem := range g.members {
			if mem.m.cur == nil {
				mem.reread = true
			}
			if mem.place != placedListed {
				g.placeLocked(mem)
			}
		}
	}
	// The members at rest are left off (group_active.go); the others, in
	// namespace order.
	active, stay, pending := g.activeLocked(), 0, false
	for _, mem := range active {
		switch {
		case mem.leaving: // and perhaps gone from g.members: Leave deletes it
			mem.place = placedNowhere
			continue
		case g.restsLocked(mem) || g.freeLocked(mem):
			mem.place = placedNowhere
			g.placeLocked(mem)
			continue
		}
		active[stay] = mem
		stay++
		if mem.attempting {
			continue
		}
		if !mem.written && mem.m.cur == nil {
			if joins == 0 {
				pending = true
				continue
			}
			joins--
		}
		members = append(members, mem)
		mem.round = stamp
		mem.busy.Add(1)
		if !mem.written {
			in.Join = append(in.Join, mem.ns)
			joining = append(joining, mem)
		}
		term, reclaim := int64(0), false
		if mem.m.cur == nil {
			term, reclaim = mem.m.reclaimLocked(start)
			reclaim = reclaim && g.withinLocked(mem, false, reclaims)
		}
		switch c := mem.m.cur; {
		case c != nil || reclaim:
			h := heldSeat{mem: mem, lead: c, term: term}
			if c != nil {
				h.term = c.lease.Term
			} else { // a reclaim, read whatever the renewal does: its lease began at acquired_at
				reclaims++
				in.Read = append(in.Read, mem.ns)
			}
			mem.renewing = true
			mem.m.inflight.add()
			held = append(held, h)
			in.Held = append(in.Held, dialect.HeldLease{Namespace: mem.ns, Term: h.term})
		case !mem.seen || mem.m.last.Vacant() || mem.reread || mem.m.last.Leader == g.id:
			// Never read, free when last read, not tried at its lease's
			// edge (a lapse older than the window is not found by the
			// index any more), or a lease of the Group's it no longer
			// leads (carryLocked): it lapses, perhaps while the Group
			// has no room.
			free = append(free, mem.ns)
		}
	}
	g.keepActiveLocked(stay)
	// The free seats read: those of the members walked first (joined
	// lately), then as many of the pool's as the reads allow.
	in.Joined = len(members) + g.active.resting + len(g.active.pool)
	if reads := g.readsLocked(budget); len(free) >= reads {
		in.Read = append(in.Read, someOf(free, reads)...)
	} else {
		in.Read = append(in.Read, free...)
		for _, mem := range g.pickPooledLocked(reads - len(free)) {
			members = append(members, mem)
			mem.round = stamp
			mem.busy.Add(1)
			in.Read = append(in.Read, mem.ns)
		}
	}
	if g.cfg.Balance {
		in.Sample = g.sampleLocked(stamp)
	}
	// The seats whose leadership ended since the last round that did so
	// lose the Group's mark (PostgreSQL): free_at shows their lease again.
	stops := g.box.stops
	in.Release = stops != g.unmarked || g.unsure
	if g.hooks.walked != nil {
		g.hooks.walked()
	}
	g.box.unlock()
	// The trust window counts from here: the walk and the lock's wait come
	// first (up to 790 ms of 1.5 s at 40,000 x 16 on two cores).
	sent := g.clk.Now()
	defer func() {
		g.box.lock()
		for _, h := range held {
			h.mem.renewing = false
			h.mem.m.inflight.done()
		}
		for _, mem := range members {
			mem.busy.Done()
		}
		g.box.unlock()
	}()
	if in.Joined == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()
	err := g.hooks.before(actx)
	var out dialect.RoundOut
	if err == nil {
		err = g.batch.autocommit(actx, "Group", nil, func(conn gorm.ConnPool, _ bool) error {
			var err error
			out, err = dialect.GroupRound(actx, conn, g.base.d, in)
			return err
		})
	}
	answered := time.Now() // with out.Sent, on the clock of the seats' readings (noteSeat)
	// The member row expired before this round refreshed it when the
	// rounds that did so began more than an expiry window apart (an
	// upper bound: each refresh ran after its round began, and this one
	// before now). A prune may then have deleted candidate rows: a prune
	// whose window is shorter than ours too, and on every database
	// (PostgreSQL and MariaDB also read the row as it was: out.Lapsed).
	// Those still there are not written again (lapsedRows). The first
	// round of a Group (beat zero) finds no member row on PostgreSQL:
	// nothing lapsed.
	now := g.clk.Now()
	took, gap := now.Sub(start), now.Sub(beat)
	lapsed := err == nil && !beat.IsZero() && (out.Lapsed || silentFor(beat, now, g.base.expire))
	var kept map[string]bool
	if lapsed {
		kept = g.lapsedRows(ctx)
	}
	g.box.lock()
	defer g.box.unlock()
	if err != nil || silentFor(g.beat, g.clk.Now(), g.base.expire-g.t.interval) {
		// This round failed, or rounds did for so long that another
		// member kept from the database as long, whose last refresh came
		// up to an interval before this Group's, has lapsed with no
		// process gone. Their rounds refresh them within an expiry window
		// of the end (balanceLocked).
		g.liveHold = g.clk.Now().Add(g.base.expire)
	}
	if err != nil {
		g.paceLocked(took, err, false)
		g.unsure = true
		for _, mem := range members {
			mem.m.settleLocked(result{start: sent, cause: cause, err: err})
		}
		g.failOffLocked(stamp, result{start: sent, cause: cause, err: err})
		return err
	}
	if out.Doubtful {
		g.log.Warn("election: the seats read as renewed outnumber the rows the renewal changed; treating the leases as lost")
	}
	g.beat = start
	if in.Release {
		g.unmarked, g.unsure = stops, false
	}
	if in.Horizon != 0 && !out.Truncated || g.ranged.IsZero() { // a cut range may miss lapses: see gapped
		g.ranged = start
	}
	if lapsed {
		// Written again, from the next round: those missing, or all when
		// the reading of those kept failed.
		missing := 0
		for ns, mem := range g.members {
			if kept != nil && kept[ns] {
				continue
			}
			missing++
			mem.written = false
			mem.m.e.rowsKept.Store(false)
			g.activateLocked(mem)
		}
		g.log.Warn("election: the Group's member row may have lapsed and been pruned; writing again the candidate rows a prune deleted",
			"since_last_round", gap.Round(time.Millisecond), "expire", g.base.expire, "missing", missing, "joined", len(g.members))
	}
	for _, mem := range joining {
		// The round wrote the candidate row, and the member row keeps it
		// alive: attempts leave it alone.
		mem.written = true
		mem.m.e.rowsKept.Store(true)
	}
	if sc.heldBy == nil {
		sc.heldBy = map[*member]heldSeat{}
	}
	heldBy := sc.heldBy
	for _, h := range held {
		heldBy[h.mem] = h
	}
	var attempts []*member
	for _, rs := range out.Seats {
		mem := g.members[rs.Namespace]
		if mem == nil || !mem.inRound(stamp) {
			continue // not in this round (nor at rest or in the pool), or left, or being left, since
		}
		s := seat{now: out.Now, exists: rs.Exists, term: rs.Term, expires: rs.Expires.Time, acquired: rs.Acquired.Time}
		if rs.Leader.Valid && rs.Expires.Valid {
			s.leader = rs.Leader.UUID
		}
		mem.m.e.noteSeat(s, out.Sent, answered)
		mem.seen = mem.seen || rs.Exists
		mem.reread = false
		l := mem.m.e.lease(s)
		h, renews := heldBy[mem]
		if exp, renewed := out.Renewed[rs.Namespace]; renews && h.lead == nil && renewed {
			// Reclaimed: a grant of the term it stepped down from.
			mem.m.settleLocked(result{start: sent, cause: cause,
				lease: Lease{Namespace: rs.Namespace, Leader: g.id, Term: h.term, ExpiresAt: exp, AcquiredAt: s.acquired}})
			continue
		}
		if lead := h.lead; renews && lead != nil {
			r := result{start: sent, cause: cause, held: lead, lease: l}
			if exp, renewed := out.Renewed[rs.Namespace]; renewed {
				r.lease = lead.lease
				r.lease.ExpiresAt = exp
			} else {
				r.why = whyLost(s, g.id, lead.lease)
				if l.HeldBy(g.id) {
					// Not renewed, whatever the reading (a snapshot from
					// before the renewal waited) says.
					r.lease = Lease{Namespace: rs.Namespace}
				}
			}
			mem.m.settleLocked(r)
			continue
		}
		mem.m.settleLocked(result{start: sent, cause: cause, lease: l, observe: true})
		if mem.place != placedListed {
			g.placeLocked(mem)
		}
		switch {
		case mem.m.cur != nil:
			// An attempt began leading while the round ran.
		case s.live() && s.leader != g.id:
			mem.freeRounds = 0
		default:
			attempts = append(attempts, mem)
		}
	}
	// Judged on its whole time, its handling included: the next round
	// begins only once this one is handled (at 40,000 x 16, up to 218 ms
	// beside a statement of 400-475 ms, judged neither slow nor heavy).
	handled := g.clk.Now().Sub(start)
	g.paceLocked(handled, nil, len(in.Join) > 0 && len(held) == 0)
	g.carryLocked(handled, len(held), len(out.Seats))
	rand.Shuffle(len(attempts), func(i, j int) { attempts[i], attempts[j] = attempts[j], attempts[i] })
	if g.cfg.Balance && out.Live > 0 {
		attempts = g.balanceLocked(start, total, out.Live, attempts, out.Truncated || len(in.Read)-reclaims < len(free))
		g.filled = g.filled || g.share > 0 && g.box.leading >= g.share
	}
	if pending {
		// No take while candidate rows wait for a later round: the seats
		// taken would be renewed by the rounds that write those rows, and
		// at a cold start of thousands of namespaces such rounds ran past
		// the trust window. The seats are read and tried again once the
		// rows are written.
		attempts = nil
	}
	if g.pace.Sheds() {
		// Shed: reported, and tried once the rounds are quick again.
		for _, mem := range attempts {
			mem.m.shedLocked(start)
		}
		attempts = nil
	}
	g.setQueueLocked(g.withinCarryLocked(start, attempts))
	if len(in.Join) == 0 {
		g.noteCostLocked(g.clk.Now().Sub(start), len(out.Seats))
	}
	return nil
}

// shutdown is the end of Run: no round or attempt runs any more.
func (g *Group) shutdown(ctx context.Context, err error) error {
	var (
		vacate []*member // may hold a term: vacated one by one once their work returned
		rest   []string  // hold none: their rows are deleted in one statement
		hubs   []*member
		hs     []*handoff.Hub
		all    []*member
	)
	g.box.lock()
	g.stopping = true
	g.queue = nil
	for _, mem := range g.members {
		all = append(all, mem)
		if mem.hub != nil {
			hubs, hs = append(hubs, mem), append(hs, mem.hub)
			mem.hub = nil
		}
		if mem.leaving {
			continue
		}
		if mem.m.closeLocked(whyShutdown) {
			vacate = append(vacate, mem)
		} else {
			rest = append(rest, mem.ns)
		}
	}
	g.box.flushDownsLocked()
	g.box.unlock()
	for i, mem := range hubs {
		mem.m.e.leaveHub(mem.m, hs[i])
	}
	g.events.close()
	defer func() {
		for _, mem := range all {
			mem.m.async.Wait()
		}
	}()

	// One deadline for the whole return.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	g.events.wait(sctx.Done())
	if err != nil {
		return err
	}
	// Every candidacy of the Group ends with its member row, those of the
	// namespaces vacated next included; the candidate rows of the others
	// go after the vacates, so that a statement over thousands of
	// namespaces (0.5 to 0.75 s at 10,000 x 16 on two cores) never holds
	// up a handoff.
	g.unregister(sctx, dialect.MemberGone(g.base.d), g.id)
	g.vacateAll(sctx, vacate)
	if len(rest) > 0 {
		g.unregister(sctx, dialect.BatchUnregister(g.base.d, len(rest)), append([]any{g.id}, anyArgs(rest)...)...)
	}
	return nil
}

// vacateAll vacates the terms of mems and deletes their candidate rows,
// each once its work has returned. On PostgreSQL and MariaDB the seats
// whose work has returned go in one statement (VacateSeats), and those
// whose work returns later in the next ones, gathered for edgeGather;
// elsewhere, and for a seat whose row changed while the statement waited,
// several at once, each in its own transaction. One seat's failure leaves
// the others vacated.
func (g *Group) vacateAll(ctx context.Context, mems []*member) {
	slots := make(chan struct{}, dialect.ConcurrentWriters(g.base.d))
	var single sync.WaitGroup
	one := func(mem *member) {
		single.Add(1)
		go func() {
			defer single.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := mem.m.e.vacate(ctx, "Run", g.id, anyTerm, true, nil); err != nil {
				g.log.Warn("election: vacating on shutdown failed; the lease expires by itself", "namespace", mem.ns, "err", err)
			}
		}()
	}
	batch := dialect.VacatesSeatsAtOnce(g.base.d)
	vacate := func(got []*member) {
		if batch && len(got) > 1 {
			g.vacateSeats(ctx, got, one)
			return
		}
		for _, mem := range got {
			one(mem)
		}
	}
	var now, later []*member
	for _, mem := range mems {
		if mem.m.workReturned() {
			now = append(now, mem)
		} else {
			later = append(later, mem)
		}
	}
	vacate(now)
	ready := make(chan *member, len(later)) // nil: one whose work did not return
	for _, mem := range later {
		go func() {
			if err := mem.m.afterWork(ctx, "Run"); err != nil {
				g.log.Warn("election: returning without vacating: the leader's work has not returned within ShutdownTimeout; the lease expires by itself",
					"namespace", mem.ns, "shutdown_timeout", g.cfg.ShutdownTimeout)
				mem = nil
			}
			ready <- mem
		}()
	}
	for left := len(later); left > 0; {
		got := []*member{<-ready}
		if batch {
			got = pace.Gather(ctx, ready, got[0], edgeGather)
		}
		left -= len(got)
		vacate(slices.DeleteFunc(got, func(mem *member) bool { return mem == nil }))
	}
	single.Wait()
}

// vacateSeats vacates the terms of mems in one statement (VacateSeats),
// and the seats whose rows changed while it waited with one.
func (g *Group) vacateSeats(ctx context.Context, mems []*member, one func(*member)) {
	a := dialect.SeatsVacate{ID: g.id, Reason: string(EndUnregistered), Channel: handoff.Channel(g.base.schema), Pool: g.base.pool()}
	by := make(map[string]*member, len(mems))
	for _, mem := range mems {
		a.Namespaces = append(a.Namespaces, mem.ns)
		a.Payloads = append(a.Payloads, handoff.Payload(g.id, mem.ns))
		by[mem.ns] = mem
	}
	var vacated, moved []string
	err := g.batch.autocommit(ctx, "Run", nil, func(conn gorm.ConnPool, _ bool) error {
		var err error
		vacated, moved, _, err = dialect.VacateSeats(ctx, conn, g.base.d, a)
		return err
	})
	for _, mem := range mems {
		mem.m.e.forget(g.id)
	}
	if err != nil {
		g.log.Warn("election: vacating on shutdown failed; the leases expire by themselves", "namespaces", len(mems), "err", err)
		return
	}
	for _, ns := range vacated {
		// announceVacancy's wake-up in this process, after the fact.
		handoff.Wake(by[ns].m.e.hubKey(), handoff.Local, g.id)
	}
	for _, ns := range moved {
		one(by[ns])
	}
}

// unregister runs q, one statement of the Group's unregistering on
// shutdown, and logs its failure.
func (g *Group) unregister(ctx context.Context, q string, args ...any) {
	err := g.batch.autocommit(ctx, "Run", nil, func(conn gorm.ConnPool, _ bool) error {
		_, err := conn.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		g.log.Warn("election: unregistering on shutdown failed; the rows expire by themselves", "err", err)
	}
}

// silentFor reports whether the Group's rounds have not succeeded for
// longer than window at at, the last that did having begun at beat (zero:
// none has yet, and nothing can have lapsed).
func silentFor(beat, at time.Time, window time.Duration) bool {
	return !beat.IsZero() && at.Sub(beat) > window
}
