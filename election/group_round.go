package election

import (
	"cmp"
	"context"
	"database/sql"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// leadsAll reports whether the Group leads every namespace it joined
// (driverLoop).
func (g *Group) leadsAll() bool {
	g.box.lock()
	defer g.box.unlock()
	for _, mem := range g.members {
		if mem.m.cur == nil && !mem.leaving {
			return false
		}
	}
	return true
}

// signaled is the cause of a round a kick started (driverLoop): a
// renewal a machine asked for, or a wake-up that names no namespace.
func (g *Group) signaled() (roundCause, bool) {
	if g.renewNow.Swap(false) {
		return causeRenew, false
	}
	return causeWakeNotify, false
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
	mem  *member
	lead *leadership // the leadership it renews
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

// round is one round over every namespace but those being left or tried
// at the moment (an attempt reads the seat and refreshes the row itself),
// then, now and then, the prune.
func (g *Group) round(ctx context.Context, cause roundCause) error {
	err := g.fullRound(ctx, cause)
	if err == nil {
		g.pruneLed(ctx)
	}
	return err
}

// fullRound is round without the prune.
func (g *Group) fullRound(ctx context.Context, cause roundCause) error {
	start := g.clk.Now()
	g.box.lock()
	total := 0
	var names []string
	var held []heldSeat
	in := make(map[string]*member, len(g.members))
	for ns, mem := range g.members {
		if mem.leaving {
			continue
		}
		total++
		if mem.attempting {
			continue
		}
		names = append(names, ns)
		in[ns] = mem
		mem.busy.Add(1)
		if c := mem.m.cur; c != nil {
			mem.renewing = true
			mem.m.inflight.add()
			held = append(held, heldSeat{mem: mem, lead: c, term: c.lease.Term})
		}
	}
	g.box.unlock()
	defer func() {
		g.box.lock()
		for _, h := range held {
			h.mem.renewing = false
			h.mem.m.inflight.done()
		}
		for _, mem := range in {
			mem.busy.Done()
		}
		g.box.unlock()
	}()
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	slices.SortFunc(held, func(a, b heldSeat) int { return cmp.Compare(a.mem.ns, b.mem.ns) })
	actx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()

	err := g.hooks.before(actx)
	var res roundResult
	if err == nil {
		res, err = g.roundStatements(actx, names, held, in)
	}
	g.box.lock()
	defer g.box.unlock()
	if err != nil {
		for _, ns := range names {
			in[ns].m.settleLocked(result{start: start, cause: cause, err: err})
		}
		return err
	}
	for _, mem := range in {
		// The round wrote the member's candidate row, and the rounds keep
		// it from now on: attempts leave it alone.
		mem.m.e.rowsKept.Store(true)
	}
	heldBy := make(map[*member]heldSeat, len(held))
	for _, h := range held {
		heldBy[h.mem] = h
	}
	var attempts []*member
	for _, ns := range names {
		mem := in[ns]
		if g.members[ns] != mem || mem.leaving {
			continue
		}
		s := res.seats[ns]
		l := mem.m.e.lease(s)
		if h, ok := heldBy[mem]; ok {
			r := result{start: start, cause: cause, held: h.lead, lease: l}
			if exp, renewed := res.renewed[ns]; renewed {
				r.lease = h.lead.lease
				r.lease.ExpiresAt = exp
			} else {
				r.why = whyLost(s, g.id, h.lead.lease)
				if l.HeldBy(g.id) {
					// Not renewed, whatever the reading (a snapshot from
					// before the renewal waited) says.
					r.lease = Lease{Namespace: ns}
				}
			}
			mem.m.settleLocked(r)
			continue
		}
		mem.m.settleLocked(result{start: start, cause: cause, lease: l, observe: true})
		switch {
		case mem.m.cur != nil:
			// An attempt began leading while the round ran.
		case s.live() && s.leader != g.id:
			mem.freeRounds = 0
		default:
			attempts = append(attempts, mem)
		}
	}
	rand.Shuffle(len(attempts), func(i, j int) { attempts[i], attempts[j] = attempts[j], attempts[i] })
	if g.cfg.Balance && res.live > 0 {
		attempts = g.balanceLocked(total, res.live, attempts)
	}
	g.setQueueLocked(attempts)
	return nil
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
			in[ns].m.e.noteSeat(s, sent)
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
					nss[k], terms[k] = h.mem.ns, h.term
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
				args = append(args, h.mem.ns, h.term)
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
			s := res.seats[h.mem.ns]
			if s.leader != g.id || s.term != h.term || !s.live() {
				continue
			}
			if exp, ok := returned[h.mem.ns]; ok || inferred {
				if ok && exp.After(s.expires) {
					s.expires = exp
				}
				res.renewed[h.mem.ns] = s.expires
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

// pruneLed prunes the namespaces the Group leads, as an Elector does its
// one (Election.maybePrune): after a round, never in it.
func (g *Group) pruneLed(ctx context.Context) {
	g.box.lock()
	var led []string
	for ns, mem := range g.members {
		if mem.m.cur != nil && !mem.leaving {
			led = append(led, ns)
		}
	}
	g.box.unlock()
	pctx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()
	g.batch.maybePrune(pctx, nil, led)
}

// unregister deletes the Group's candidate rows in namespaces nss, in one

// shutdown is the end of Run: no round or attempt runs any more.
func (g *Group) shutdown(ctx context.Context, err error) error {
	var (
		vacate []*member // may hold a term: vacated one by one once their work returned
		rest   []string  // hold none: their rows are deleted in one statement
		hubs   []*member
		hs     []*hub
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
	g.box.unlock()
	for i, mem := range hubs {
		leaveHub(mem.m.e, mem.m, hs[i])
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
	g.unregister(sctx, rest)
	// Vacate each term as soon as its work has returned, several at once
	// (each in its own transaction: one seat's failure leaves the others
	// vacated).
	slots := make(chan struct{}, dialect.ConcurrentWriters(g.base.d))
	var vacating sync.WaitGroup
	for _, mem := range vacate {
		vacating.Add(1)
		go func() {
			defer vacating.Done()
			select {
			case <-mem.m.work.wait():
			case <-sctx.Done():
				g.log.Warn("election: returning without vacating: the leader's work has not returned within ShutdownTimeout; the lease expires by itself",
					"namespace", mem.ns, "shutdown_timeout", g.cfg.ShutdownTimeout)
				return
			}
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := mem.m.vacateAfterWork(sctx, "Run", anyTerm, true); err != nil {
				g.log.Warn("election: vacating on shutdown failed; the lease expires by itself", "namespace", mem.ns, "err", err)
			}
		}()
	}
	vacating.Wait()
	return nil
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
