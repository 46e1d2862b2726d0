package election

import (
	"context"
	"errors"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// prunePiece is the most namespaces a piece of a Group's prune covers
// (pruneLed): three statements, one more per expired member row (and, on
// MySQL, MariaDB and TiDB, per expired candidate row: pruneCandidates).
const prunePiece = 1024

// groupPrune is a Group's prune in progress: the namespaces it has yet to
// prune, the time per namespace its last piece took (0: none ran yet), and
// whether its last piece ran out of time (the rest then waits for the next
// prune due). Only the round loop uses it.
type groupPrune struct {
	rest []string
	per  time.Duration
	cut  bool
}

// pruneLed prunes the namespaces the Group leads, as an Elector does its
// one (Election.maybePrune): after a round, never in it, and never past
// until, when the next round may be due. A prune of a few thousand
// namespaces took 0.5 to 1.6 s on a busy database (40,000 namespaces x
// 16 processes on two cores); run whole after a round, it held up the
// next round, and with it every renewal of the Group, past the trust
// window: the Group stepped down from all its seats, and others took
// them. It runs in pieces instead, one after a round, as large as the
// time left allows at the last piece's pace, and goes on after a later
// round from where it stopped: a round's piece costs the statements the
// whole prune did (Election.prune). A piece cut short at until
// doubles the pace it is judged by, and the rest waits for the next prune
// due: on a database too busy for a piece to end in time, a piece tried
// after every round was cut after every round, and the prune's statements,
// cancelled, took more of the server than the rounds did (40,000
// namespaces x 16 processes on two cores: docs/performance.md). A round after
// which not one namespace fits halves the pace, so that a prune slowed
// once is tried again.
func (g *Group) pruneLed(ctx context.Context, until time.Time) {
	p := &g.pruning
	if len(p.rest) == 0 || p.cut {
		if !g.batch.pruneDue() {
			return
		}
		p.cut = false
	}
	if len(p.rest) == 0 {
		g.box.lock()
		for _, mem := range g.ledLocked() {
			p.rest = append(p.rest, mem.ns)
		}
		g.box.unlock()
		slices.Sort(p.rest)
	}
	if len(p.rest) == 0 {
		return
	}
	left := time.Until(until)
	n := min(prunePiece, len(p.rest))
	if p.per > 0 {
		n = min(n, int(left/p.per))
	}
	if n < 1 || left <= 0 {
		p.per /= 2
		return
	}
	began := time.Now()
	pctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	m, err := 0, error(nil)
	if g.hooks.prune != nil {
		err = g.hooks.prune(pctx)
	}
	if err == nil {
		m, err = g.batch.prune(pctx, nil, p.rest[:n])
	}
	took := time.Since(began)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded):
		// Out of time: the piece again once the next prune is due,
		// judged at twice the pace.
		p.per = max(2*p.per, took/time.Duration(n))
		p.cut = true
	case err != nil:
		// Given up until the next prune is due.
		g.batch.logPrune(ctx, m, err)
		p.rest = p.rest[:0]
	default:
		g.batch.logPrune(ctx, m, nil)
		p.rest = p.rest[n:]
		p.per = max(took/time.Duration(n), time.Microsecond)
	}
}

// lapsedRows returns the namespaces where the Group's candidate rows are
// still there after a lapse of its member row (dialect.MemberRows), or nil
// when they could not be read: all are then written again. A lapse used to
// rewrite every candidate row, though a prune deletes them only once the
// member row has been expired for its own window: a Group whose rounds
// were slow for a while (an overloaded database) spent the rounds after it
// rewriting thousands of rows that were all there, leaving those
// namespaces untried meanwhile, its lost seats unreclaimed among them.
func (g *Group) lapsedRows(ctx context.Context) map[string]bool {
	rctx, cancel := context.WithTimeout(ctx, g.t.trust())
	defer cancel()
	kept := map[string]bool{}
	err := g.batch.autocommit(rctx, "Group", nil, func(conn gorm.ConnPool, _ bool) error {
		clear(kept)
		rows, err := conn.QueryContext(rctx, dialect.MemberRows(g.base.d), g.id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ns string
			if err := rows.Scan(&ns); err != nil {
				return err
			}
			kept[ns] = true
		}
		return rows.Err()
	})
	if err != nil {
		g.log.Warn("election: reading the Group's candidate rows after a lapse failed; writing them all again", "err", err)
		return nil
	}
	return kept
}
