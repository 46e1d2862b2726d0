package election

import (
	"context"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/pace"
)

// The Group's attempts on free seats, beside its rounds, and balancing.

// setQueueLocked replaces the attempts queued by the last round with ms:
// a fresher reading; g.box is held.
func (g *Group) setQueueLocked(ms []*member) {
	for _, mem := range g.queue {
		mem.queued = false
	}
	g.queue = append(g.queue[:0], ms...)
	for _, mem := range ms {
		mem.queued = true
	}
	if len(ms) > 0 {
		select {
		case g.queued <- struct{}{}:
		default:
		}
	}
}

// callableLocked reports whether the Group may make a call on mem's seat
// now, as far as the Group's own calls go: it runs, has not left mem, and
// neither tries nor renews mem at the moment. g.box is held.
func (g *Group) callableLocked(mem *member) bool {
	return g.running && !g.stopping && !mem.leaving && g.members[mem.ns] == mem && !mem.attempting && !mem.renewing
}

// withinLocked reports whether one more seat beside batch already chosen
// keeps the Group within the seats its rounds can renew (carryLocked) and,
// with Balance, within its share, or one above it when the round allowed
// mem there (viaRound, mem.overShare); g.box is held.
func (g *Group) withinLocked(mem *member, viaRound bool, batch int) bool {
	switch n := g.box.leading + batch; {
	case !g.pace.Carries(n + 1):
		return false // above the seats the database can renew (carryLocked)
	case !g.cfg.Balance:
		return true
	case viaRound && mem.overShare:
		return n <= g.shareLocked()
	default:
		return n < g.shareLocked()
	}
}

// shareLocked is the most seats the Group's own takes may bring it to
// with Balance: the share, but one during the warm-up (balanceLocked,
// paceLocked); g.box is held.
func (g *Group) shareLocked() int {
	if g.clk.Now().Before(g.warm) {
		return min(g.share, 1)
	}
	return g.share
}

// paceLocked updates the attempts' budget after a round that took d and
// ended with err: a failed round, or one so slow that the next renewal may
// miss the trust window (heavyRound), sheds the attempts; one that is only
// slow (slowRound) keeps one attempt a round (internal/pace) where that
// attempt is one statement, a batch take (PostgreSQL, MariaDB: a round
// and a take stay within 3 statements an interval), and sheds them
// elsewhere. At 40,000 namespaces x 16 processes on two cores, rounds
// renewing 2,400 seats took 140-560 ms, rarely under slowRound's 167 ms,
// and a crashed process's seats were still not all led 20 s later: every
// round shed its attempts. A round that renewed no lease and wrote
// candidate rows (writing), slow but not heavy, is judged so for its
// attempts only: the rows the next may write double (pace: JoinsGrew).
// g.box is held.
func (g *Group) paceLocked(d time.Duration, err error, writing bool) {
	slow := err != nil || d > g.t.slowRound()
	heavy := err == nil && d > g.t.heavyRound()
	if heavy {
		g.heavy++
	} else {
		g.heavy = 0
	}
	if now := g.clk.Now(); slow && now.Before(g.warm) {
		// A slow start (a fleet connecting at once): the warm-up lasts
		// until the rounds are quick.
		g.warm = now.Add(g.t.interval * 3 / 4)
	}
	joins := g.pace.Joins()
	switch {
	case slow && err == nil && !heavy && dialect.TakesSeatsAtOnce(g.base.d):
		g.pace.Slowed()
	case g.pace.Round(slow):
		g.log.Warn("election: the database is slow; shedding attempts on free seats, keeping the renewals",
			"round", d.Round(time.Millisecond), "interval", g.t.interval, "err", err)
	}
	if writing && err == nil && !heavy {
		// Slow with its own candidate rows, which hold up no renewal of
		// its: the next round writes twice as many (at a cold start of
		// 10,000 x 16 a process's rows took three rounds, not two).
		g.pace.JoinsGrew(joins)
	}
}

// carryLocked bounds the seats the Group keeps after a round that answered
// in took, having returned seats seats of which it renewed held
// (internal/pace: Heavy), to what a round of a quarter of the trust window
// would return at this round's time per seat. Rounds begin an interval
// apart, or one right after the other when they take longer, so a round
// that took more than three eighths of the window leaves the next little
// time: two rounds of half the window in a row pass it, and the Group
// would step down from every seat at once. It stops leading those above
// the bound instead, the last taken first, without a statement: their
// leases lapse, and are taken by whoever the database can renew them for.
// The bound counts every seat the round returned, those it read as well
// as those it renewed: a round slow with reading (a crashed process's
// seats in its range) is bounded above the seats it leads, and the reads
// stop instead while the attempts are shed (pace.Budget.Overloaded).
// At 40,000 namespaces x 16 processes, two rounds of 613 and 605 ms that
// each renewed 2,500 seats and read 2,500 more cut a Group to 1,654 seats
// when bounded by the renewals alone, and the seats it dropped were still
// not all led again 20 s later. Only the second such round in a row
// counts (paceLocked): the one round a stall holds up answers late too,
// and its Group, whose database is fine again, must take its seats back
// at once. Below three eighths (at TTL 2 s, 600 ms) nothing changes: a
// round slowed by latency alone (400 ms more per round trip in the
// overload test) renews in time, and its leader keeps every seat. g.box
// is held.
func (g *Group) carryLocked(took time.Duration, held, seats int) {
	trust := g.t.trust()
	if g.heavy < 2 || held == 0 {
		return
	}
	bound, lowered := g.pace.Heavy(max(seats, held), took, trust/4)
	over := g.box.leading - bound
	if !lowered || over <= 0 {
		return
	}
	g.log.Warn("election: the database answers rounds too slowly to renew every seat in time; leading fewer until the rounds are quick",
		"round", took.Round(time.Millisecond), "trust", trust, "kept", bound, "dropped", over)
	now := g.clk.Now()
	for _, mem := range g.pickLed(over, true) {
		mem.m.stopLocked(whyOverloaded, now)
		mem.m.sitOutLocked(now, g.base.expire, false)
	}
}

// withinCarryLocked keeps of a round's attempts as many as the bound on the
// seats kept (carryLocked) has room for, and reports the others as shed;
// g.box is held.
func (g *Group) withinCarryLocked(start time.Time, attempts []*member) []*member {
	room := g.pace.Room(g.box.leading)
	if len(attempts) <= room {
		return attempts
	}
	for _, mem := range attempts[room:] {
		mem.m.shedLocked(start)
	}
	return attempts[:room]
}

// attempter runs the attempts, one at a time, until ctx ends: a wake (the
// end of another candidate's lease, a handoff) first, then the free seats
// of the last round, all at once where the database takes many seats in
// one statement (TakeSeats).
func (g *Group) attempter(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case w := <-g.woken:
			g.woke(ctx, w)
			continue
		default:
		}
		if dialect.TakesSeatsAtOnce(g.base.d) {
			if mems := g.nextQueued(pace.Max); len(mems) > 0 {
				g.takeSeats(ctx, mems, causeTick)
				continue
			}
		} else if mems := g.nextQueued(1); len(mems) > 0 {
			g.attempt(ctx, mems[0], causeTick)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case w := <-g.woken:
			g.woke(ctx, w)
		case <-g.queued:
		}
	}
}

// edgeGather: a batch of lease edges waits this long (in real time) for
// the edges that fire with its first.
const edgeGather = 2 * time.Millisecond

// beginAttemptLocked marks mem as tried; g.box is held.
func (g *Group) beginAttemptLocked(mem *member) {
	mem.attempting = true
	g.activateLocked(mem)
	mem.busy.Add(1)
	mem.m.inflight.add()
}

// nextQueued takes up to n seats of the queue the Group may try, marked as
// tried, within the seats the budget allows this round; none when the
// budget is spent.
func (g *Group) nextQueued(n int) []*member {
	g.box.lock()
	defer g.box.unlock()
	n = min(n, g.pace.Batch())
	now := g.clk.Now()
	var out []*member
	for len(g.queue) > 0 && len(out) < n {
		mem := g.queue[0]
		// With Balance, the seats of the batch count toward the share.
		// Seats beyond a batch that fills it (balanceLocked's spares)
		// wait for its outcome: tried if some of it was lost.
		within := g.withinLocked(mem, true, len(out))
		if !within && len(out) > 0 {
			break
		}
		if !within || !g.callableLocked(mem) || !mem.m.mayTryLocked(now) {
			g.queue = g.queue[1:]
			mem.queued, mem.overShare = false, false
			continue
		}
		if len(out) == 0 && !g.pace.Spend() {
			break
		}
		g.queue = g.queue[1:]
		mem.queued = false
		g.beginAttemptLocked(mem)
		out = append(out, mem)
	}
	g.pace.Took(len(out))
	return out
}

// wakeup asks the attempter to try a member's seat now: at the end of
// another candidate's lease (sigEdge) or on a handoff (sigWake).
type wakeup struct {
	mem *member
	sig signal
}

// wake asks the attempter to try mem's seat now, once; it takes no lock.
// The attempter decides whether it may.
func (g *Group) wake(mem *member, s signal) {
	if !mem.pending.CompareAndSwap(false, true) {
		return
	}
	select {
	case g.woken <- wakeup{mem: mem, sig: s}:
	default:
		// The queue is full: a full round looks at every seat.
		mem.pending.Store(false)
		g.kickRound()
	}
}

// woke tries the seat a wake names, if the Group may; where one statement
// takes many seats, with those of the lease edges that fire with it (a
// crashed process's leases end together) in one batch take.
func (g *Group) woke(ctx context.Context, w wakeup) {
	ws, batch, edges := []wakeup{w}, dialect.TakesSeatsAtOnce(g.base.d), []*member(nil)
	if batch && w.sig.kind == sigEdge {
		ws = pace.Gather(ctx, g.woken, w, edgeGather)
	}
	for _, w := range ws {
		mem, edge := w.mem, w.sig.kind == sigEdge
		mem.pending.Store(false)
		g.box.lock()
		now := g.clk.Now()
		ok := g.callableLocked(mem) && g.withinLocked(mem, false, len(edges))
		switch {
		case ok && edge && batch:
			ok = g.pace.Batch() > 0 && (len(edges) > 0 || g.pace.Spend()) && mem.m.mayTryLocked(now)
		case ok && edge:
			ok = g.pace.Spend() && mem.m.mayTryLocked(now)
		case ok:
			ok = g.pace.Spend() && mem.m.wokenLocked(w.sig, now)
			if ok {
				mem.m.wokeLocked(w.sig.src)
			}
		}
		if ok {
			g.beginAttemptLocked(mem)
		} else if edge {
			// Not tried at its edge: once the lease has lapsed for longer
			// than a window, a round finds the seat only if it reads it.
			mem.reread = true
			g.activateLocked(mem)
		}
		if ok && edge && batch {
			edges = append(edges, mem)
			g.pace.Took(1)
		}
		g.box.unlock()
		switch {
		case !ok || edge && batch:
		case edge:
			g.attempt(ctx, mem, causeEdge)
		default:
			// The seat is changing hands: take the locked path, which
			// waits for the vacating transaction rather than read the
			// old holder.
			mem.m.e.forgetSeat()
			g.attempt(ctx, mem, wakeCause(w.sig.src))
		}
	}
	if len(edges) > 0 {
		g.takeSeats(ctx, edges, causeEdge)
	}
}

// attempt runs Elect on mem's seat, which the caller marked as tried, and
// hands the result to its machine.
func (g *Group) attempt(ctx context.Context, mem *member, cause roundCause) {
	start := g.clk.Now()
	actx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()
	g.box.lock()
	gaveUp, probeEnd := mem.m.probeLocked()
	g.box.unlock()
	var (
		l     Lease
		err   error
		stale bool
	)
	if err = g.hooks.before(actx); err == nil && gaveUp != 0 {
		l, stale, err = mem.m.e.wakeStale(actx, gaveUp)
	}
	switch {
	case err != nil, stale:
	case cause == causeTick:
		// From a reading that may be stale by now: another process may
		// have taken the seat since, and at a cold start most have.
		l, err = mem.m.e.electIfFree(actx, g.id)
	default:
		l, err = mem.m.e.Elect(actx, g.id)
	}
	g.box.lock()
	g.attemptedLocked(mem, result{start: start, cause: cause, lease: l, err: err, observe: stale})
	if stale {
		mem.m.staleWakeLocked(probeEnd)
	}
	if err != nil {
		g.pace.Failed()
	}
	g.box.unlock()
	if err != nil && ctx.Err() == nil {
		g.log.Warn("election: group attempt failed", "namespace", mem.ns, "err", err)
	}
}

// attemptedLocked hands the result of an attempt on mem's seat to its
// machine; g.box is held.
func (g *Group) attemptedLocked(mem *member, r result) {
	mem.attempting, mem.overShare = false, false
	mem.m.settleLocked(r)
	mem.m.inflight.done()
	mem.busy.Done() // before the notes run: an observer may call Leave
}

// takeSeats takes the free seats of mems, which the caller marked as
// tried, in one statement (TakeSeats), and hands each its grant or, for a
// seat found held, the seat as it is: a batch at a cold start costs one
// statement, not one transaction a seat.
func (g *Group) takeSeats(ctx context.Context, mems []*member, cause roundCause) {
	start := g.clk.Now()
	actx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()
	nss := make([]string, len(mems))
	for i, mem := range mems {
		nss[i] = mem.ns
	}
	granted := make(map[string]Lease, len(mems))
	held := map[string]heldReading{}
	err := g.hooks.before(actx)
	// In statements of at most SeatsPerTake namespaces, each committing
	// by itself: the grants of those that did stand when a later one
	// fails.
	for per := dialect.SeatsPerTake(g.base.d); err == nil && len(nss) > 0; {
		part := nss[:min(len(nss), per)]
		nss = nss[len(part):]
		id := g.base.identity
		var (
			t    dialect.Taken
			sent = time.Now()
		)
		err = g.batch.autocommit(actx, "Elect", nil, func(conn gorm.ConnPool, _ bool) error {
			var err error
			t, _, err = dialect.TakeSeats(actx, conn, g.base.d, g.id, part, g.base.expire, id.Hostname, id.PID, id.Label, string(EndExpired))
			return err
		})
		for _, s := range t.Grants {
			granted[s.Namespace] = Lease{Namespace: s.Namespace, Leader: g.id, Term: s.Term, ExpiresAt: s.Expires.Time, AcquiredAt: s.Acquired.Time}
		}
		if err == nil {
			answered := time.Now()
			for _, s := range t.Held {
				held[s.Namespace] = heldReading{seat: seat{now: t.Now, exists: true, leader: s.Leader.UUID, term: s.Term,
					expires: s.Expires.Time, acquired: s.Acquired.Time}, sent: sent, answered: answered}
			}
		}
	}
	g.box.lock()
	for _, mem := range mems {
		r := result{start: start, cause: cause}
		if l, ok := granted[mem.ns]; ok {
			r.lease = l
			mem.seen = true
		} else if h, ok := held[mem.ns]; ok {
			// Held by another, as a round's reading would show it: the
			// rounds leave the seat alone (restsLocked) until its lease
			// nears its end, instead of reading it again until they see
			// the holder.
			mem.m.e.noteSeat(h.seat, h.sent, h.answered)
			mem.seen, mem.reread = true, false
			r.lease, r.observe = mem.m.e.lease(h.seat), true
		} else if err != nil {
			r.err = err
		} else {
			// Taken by another since the reading (inserted or locked by
			// another take): the next round, or the lease's edge, shows
			// it.
			r.lease, r.observe = mem.m.last, true
		}
		g.attemptedLocked(mem, r)
	}
	if err != nil {
		g.pace.Failed()
	}
	g.box.unlock()
	if err != nil && ctx.Err() == nil {
		g.log.Warn("election: group attempt failed", "namespaces", len(nss), "err", err)
	}
}

// balanceLocked applies Balance after a round that found live candidates
// in total namespaces: it hands over the surplus above the share, and
// keeps of attempts (the free seats the round found) those the share has
// room for, first, then the rest as spares when it had room: tried at
// once should others take some of the first (processes below their share
// try the same few free seats at a cold start's end and after a crash),
// not a round later (nextQueued). At the share, a free seat is left to
// the others for two rounds, then taken, never above share+1, and only
// once the free seats the rounds find stop falling. Taken while the
// others below their share still take them (a cold start's end), such a
// seat is handed back the next round, a vacate whose wake sends every
// Group below its share after the same seat; taken once they take no more
// (shedding while the database is slow, or counting a share of their
// own), it keeps the namespace led. Never more: a Group must not take all
// the others leave free and become the one whose renewals cannot keep up.
// sampled: the round read only some of the seats believed free (someOf),
// whose count then says nothing.
// The first round begins the warm-up, in which the Group takes one seat
// at most (the others started with it are not counted yet): three
// quarters of an interval, so that the next tick, jittered by at most a
// fifth, ends it. g.box is held.
func (g *Group) balanceLocked(start time.Time, total, live int, attempts []*member, sampled bool) []*member {
	if live < g.live && g.clk.Now().Before(g.liveHold) {
		// Fewer live members right after this Group's rounds failed: not
		// believed until the others' rounds have had an expiry window to
		// refresh their rows (fullRound). Believed at once, the share
		// rises, this Group takes the others' seats as their leases end,
		// then hands them back, a statement each, once they count again.
		live = g.live
	}
	g.live = live
	g.share = (total + live - 1) / live
	if g.warm.IsZero() {
		g.warm = start.Add(g.t.interval * 3 / 4)
	}
	// No handover while the database is slow: a seat handed over costs
	// its taking, and the shed attempts leave it unled.
	if g.box.leading > g.share && g.pace.Quick() {
		for _, mem := range g.pickLed(g.box.leading-g.share, false) {
			g.handOverLocked(mem)
		}
	}
	now := g.clk.Now()
	room := g.shareLocked() - g.box.leading
	below := room > 0
	warming := now.Before(g.warm)
	falling := sampled || len(attempts) < g.freeSeen
	g.freeSeen = len(attempts)
	kept, spares := attempts[:0], []*member(nil)
	for _, mem := range attempts {
		switch {
		case !g.callableLocked(mem) || !mem.m.mayTryLocked(now):
		case room > 0:
			kept = append(kept, mem)
			mem.freeRounds, mem.overShare = 0, false
			room--
		case warming:
			// Not counted: the seat may be another's share.
		case mem.freeRounds >= 2 && !falling && g.box.leading+len(kept) <= g.share:
			// Left free by the others for two rounds, and they take no
			// more: taken, one seat above the share at most.
			kept = append(kept, mem)
			mem.freeRounds, mem.overShare = 0, true
		default:
			mem.freeRounds++
			if below {
				spares = append(spares, mem)
			}
		}
	}
	return append(kept, spares...)
}

// ledLocked returns the members the Group leads and is not leaving, in no
// order; g.box is held.
func (g *Group) ledLocked() []*member {
	var led []*member
	for _, mem := range g.activeLocked() { // a leader is never at rest
		if mem.m.cur != nil && !mem.leaving {
			led = append(led, mem)
		}
	}
	return led
}

// pickLed chooses n of the namespaces the Group leads: those led longest,
// or with latest those taken last; g.box is held.
func (g *Group) pickLed(n int, latest bool) []*member {
	led := g.ledLocked()
	slices.SortFunc(led, func(a, b *member) int {
		if latest {
			return b.m.cur.since.Compare(a.m.cur.since)
		}
		return a.m.cur.since.Compare(b.m.cur.since)
	})
	return led[:min(n, len(led))]
}

// handOverLocked gives up the lease of mem to balance leadership: a
// give-up, as Resign's, whose vacate runs in the background so the rounds
// go on, and after which the Group sits mem out for two intervals. Run's
// return vacates the term instead if it comes first. g.box is held.
func (g *Group) handOverLocked(mem *member) {
	term := mem.m.beginGiveUpLocked(whyBalanced)
	ctx := g.runCtx // ends when Run begins to return, whose own vacates take over then
	mem.m.async.Add(1)
	go func() {
		defer mem.m.async.Done()
		err := mem.m.giveUp(ctx, "Balance", term, 2*g.t.interval)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("election: handing a namespace over failed; its lease expires by itself", "namespace", mem.ns, "err", err)
		}
	}()
}
