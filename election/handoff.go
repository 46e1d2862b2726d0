package election

import (
	"context"
	"database/sql"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
)

// Fast handoff (internal/handoff): when a leader vacates the seat, the
// vacating transaction wakes this process's members of the namespace's
// hub and, through the dialect, the listeners of other processes, so that
// the other candidates try at once rather than at their next tick.

// hubKey names the hub of e's namespace: its pool, or e itself when it has
// none.
func (e *Election) hubKey() handoff.Key {
	if pool := e.pool(); pool != nil {
		return handoff.Key{Pool: pool, Schema: e.schema, Namespace: e.namespace}
	}
	return handoff.Key{Pool: e, Schema: e.schema, Namespace: e.namespace}
}

func (e *Election) pool() *sql.DB {
	pool, err := e.db.DB()
	if err != nil {
		return nil
	}
	return pool
}

// joinHub adds m, a member in e's namespace, to its hub, listening for
// other processes' handoffs if the database can.
func (e *Election) joinHub(m handoff.Member) *handoff.Hub {
	l := handoff.Listen{Pool: e.pool(), Log: e.log}
	if n, ok := e.d.(dialect.Notifier); ok {
		l.N = n
	}
	return handoff.Join(e.hubKey(), m, l)
}

// leaveHub removes m, a member in e's namespace, from its hub h.
func (e *Election) leaveHub(m handoff.Member, h *handoff.Hub) {
	handoff.Leave(e.hubKey(), m, h)
}

// registerHandoff installs, once per Election (New calls it), the hook that
// runs in every transaction vacating the seat.
func (e *Election) registerHandoff() {
	e.handoffOnce.Do(func() { e.onVacate(e.announceVacancy) })
}

// announceVacancy runs inside the vacating transaction: NOTIFY (delivered at
// commit) and a wake-up of this process's Electors. (On PostgreSQL, Resign
// and UnregisterCandidate notify in their one vacating statement,
// VacateNotify, and wake this process's Electors after it.) Those woken early
// block on the leader row (or SQLite's write lock) until the transaction
// ends, and then see the vacant seat.
func (e *Election) announceVacancy(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error {
	// Local first: SQLite's notification is seen as soon as it is written,
	// and this process's Electors need not wait for it.
	handoff.Wake(e.hubKey(), handoff.Local, leader)
	if n, ok := e.d.(dialect.Notifier); ok {
		if err := n.Notify(ctx, conn, handoff.Channel(e.schema), handoff.Payload(leader, e.namespace)); err != nil {
			return err
		}
	}
	return nil
}

// onVacate registers fn to run in the transaction that vacates the seat
// (UnregisterCandidate or Resign by the leader), e.g. to wake candidates.
// leader is the candidate that gave the seat up.
func (e *Election) onVacate(fn func(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.vacated = append(e.vacated, fn)
}

func (e *Election) runVacated(ctx context.Context, conn gorm.ConnPool, leader uuid.UUID) error {
	e.mu.Lock()
	fns := append([]func(context.Context, gorm.ConnPool, uuid.UUID) error(nil), e.vacated...)
	e.mu.Unlock()
	for _, fn := range fns {
		if err := fn(ctx, conn, leader); err != nil {
			return err
		}
	}
	return nil
}
