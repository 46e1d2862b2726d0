package election

import (
	"context"
	"errors"
	"slices"
	"time"
)

// A Group prunes the namespaces it leads in pieces, between its rounds,
// each piece ending before the next round is due (pruneLed).
const (
	// prunePiece is the most namespaces a piece covers, and the first
	// number: its prune is three statements, one more per expired row.
	prunePiece = 1024
	// prunePieceMin is the fewest: a piece that did not end in time is
	// halved down to it.
	prunePieceMin = 16
)

// groupPrune is a Group's prune in progress: the namespaces it has yet to
// prune, and how many the next piece covers (0: prunePiece). Only the
// round loop uses it.
type groupPrune struct {
	rest  []string
	piece int
}

// pruneLed prunes the namespaces the Group leads, as an Elector does its
// one (Election.maybePrune): after a round, never in it, and never past
// until, when the next round may be due. A prune of a few thousand
// namespaces took 0.5 to 1.6 s on a busy database (40,000 namespaces x
// 16 processes on two cores); run whole after a round, it held up the
// next round, and with it every renewal of the Group, past the trust
// window: the Group stepped down from all its seats, and others took
// them. It runs in pieces instead, as many as end by until, and goes on
// after a later round from where it stopped; a piece that did not end in
// time is tried again, halved.
func (g *Group) pruneLed(ctx context.Context, until time.Time) {
	p := &g.pruning
	if len(p.rest) == 0 {
		if !g.batch.pruneDue() {
			return
		}
		g.box.lock()
		for ns, mem := range g.members {
			if mem.m.cur != nil && !mem.leaving {
				p.rest = append(p.rest, ns)
			}
		}
		g.box.unlock()
		slices.Sort(p.rest)
	}
	if p.piece == 0 {
		p.piece = prunePiece
	}
	for len(p.rest) > 0 && time.Until(until) > 0 {
		piece := p.rest[:min(p.piece, len(p.rest))]
		pctx, cancel := context.WithDeadline(ctx, until)
		n, err := 0, error(nil)
		if g.hooks.prune != nil {
			err = g.hooks.prune(pctx)
		}
		if err == nil {
			n, err = g.batch.prune(pctx, nil, piece)
		}
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded):
			// Out of time: the piece again, smaller, after a later round.
			p.piece = max(p.piece/2, prunePieceMin)
			return
		case err != nil:
			// Given up until the next prune is due.
			g.batch.logPrune(ctx, n, err)
			p.rest = p.rest[:0]
			return
		}
		g.batch.logPrune(ctx, n, nil)
		p.rest = p.rest[len(piece):]
		p.piece = min(p.piece*2, prunePiece)
	}
}
