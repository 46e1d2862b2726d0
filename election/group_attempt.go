package election

import (
	"context"
	"slices"
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

// withinShareLocked reports whether, with Balance, one more seat keeps the
// Group within its share (or the round allowed mem above it: viaRound and
// mem.overShare); always true without Balance. g.box is held.
func (g *Group) withinShareLocked(mem *member, viaRound bool) bool {
	switch {
	case !g.cfg.Balance:
		return true
	case viaRound && mem.overShare:
		return true
	}
	return g.share > 0 && g.box.leading < g.share
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
		if mem := g.nextQueued(); mem != nil {
			g.attempt(ctx, mem, causeTick)
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

// beginAttemptLocked marks mem as tried; g.box is held.
func (g *Group) beginAttemptLocked(mem *member) {
	mem.attempting = true
	mem.busy.Add(1)
	mem.m.inflight.add()
}

// nextQueued takes the next seat of the queue the Group may try, marked as
// tried; nil when none.
func (g *Group) nextQueued() *member {
	g.box.lock()
	defer g.box.unlock()
	now := g.clk.Now()
	for len(g.queue) > 0 {
		mem := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		mem.queued = false
		if g.callableLocked(mem) && mem.m.mayTryLocked(now) && g.withinShareLocked(mem, true) {
			g.beginAttemptLocked(mem)
			return mem
		}
		mem.overShare = false
	}
	return nil
}

// tryWoken tries the seat a wake names, if the Group may.
func (g *Group) tryWoken(ctx context.Context, w wakeup) {
	mem := w.mem
	mem.pending.Store(false)
	g.box.lock()
	now := g.clk.Now()
	ok := g.callableLocked(mem) && g.withinShareLocked(mem, false)
	if ok && w.sig.kind == sigEdge {
		ok = mem.m.mayTryLocked(now)
	} else if ok {
		ok = mem.m.wokenLocked(w.sig, now)
		if ok {
			mem.m.wokeLocked(w.sig.src)
		}
	}
	if ok {
		g.beginAttemptLocked(mem)
	}
	g.box.unlock()
	if !ok {
		return
	}
	cause := causeEdge
	if w.sig.kind == sigWake {
		// The seat is changing hands: take the locked path, which waits
		// for the vacating transaction rather than read the old holder.
		mem.m.e.forgetSeat()
		cause = wakeCause(w.sig.src)
	}
	g.attempt(ctx, mem, cause)
}

// attempt runs Elect on mem's seat, which the caller marked as tried, and
// hands the result to its machine.
func (g *Group) attempt(ctx context.Context, mem *member, cause roundCause) {
	start := g.clk.Now()
	actx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()
	var (
		l   Lease
		err error
	)
	switch err = g.hooks.before(actx); {
	case err != nil:
	case cause == causeTick:
		// From a reading that may be stale by now: another process may
		// have taken the seat since, and at a cold start most have.
		l, err = mem.m.e.electIfFree(actx, g.id)
	default:
		l, err = mem.m.e.Elect(actx, g.id)
	}
	g.box.lock()
	mem.attempting, mem.overShare = false, false
	mem.m.settleLocked(result{start: start, cause: cause, lease: l, err: err})
	mem.m.inflight.done()
	mem.busy.Done() // before the notes run: an observer may call Leave
	g.box.unlock()
	if err != nil && ctx.Err() == nil {
		g.log.Warn("election: group attempt failed", "namespace", mem.ns, "err", err)
	}
}

// balanceLocked applies Balance after a round that found live candidates
// in total namespaces: it hands over the surplus above the share, and
// keeps of attempts (the free seats the round found) those the share has
// room for. At or above the share, a free seat is left to the others for
// two rounds before it is tried. g.box is held.
func (g *Group) balanceLocked(total, live int, attempts []*member) []*member {
	g.share = (total + live - 1) / live
	if g.box.leading > g.share {
		for _, mem := range g.pickSurplus(g.box.leading - g.share) {
			g.handOverLocked(mem)
		}
	}
	now := g.clk.Now()
	room := g.share - g.box.leading
	kept := attempts[:0]
	for _, mem := range attempts {
		switch {
		case !g.callableLocked(mem) || !mem.m.mayTryLocked(now):
		case room > 0:
			kept = append(kept, mem)
			mem.freeRounds, mem.overShare = 0, false
			room--
		case mem.freeRounds >= 2:
			kept = append(kept, mem)
			mem.freeRounds, mem.overShare = 0, true
		default:
			mem.freeRounds++
		}
	}
	return kept
}

// pickSurplus chooses the n namespaces to hand over: those led longest;
// g.box is held.
func (g *Group) pickSurplus(n int) []*member {
	var led []*member
	for _, mem := range g.members {
		if mem.m.cur != nil && !mem.leaving {
			led = append(led, mem)
		}
	}
	slices.SortFunc(led, func(a, b *member) int { return a.m.cur.since.Compare(b.m.cur.since) })
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
