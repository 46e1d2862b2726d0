// Package gocron lets go-co-op/gocron v2 run jobs on the leader only.
// gocron asks a distributed Elector before each run of a job; Elector
// answers it with an election.Elector's leadership. It is a module of its
// own, so that users of the election package who do not use gocron do not
// depend on it.
//
//	el, _ := e.NewElector(id, election.ElectorConfig{})
//	go el.Run(ctx)
//	s, _ := gocron.NewScheduler(gocron.WithDistributedElector(sqlelectgocron.New(el)))
//
// Every replica runs the same scheduler with the same jobs; only the one
// whose Elector leads runs them.
package gocron

import (
	"context"
	"fmt"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// Elector implements gocron's Elector interface (IsLeader(context.Context)
// error) over an election.
type Elector struct {
	el *election.Elector
	e  *election.Election
	id uuid.UUID
}

var _ gocron.Elector = (*Elector)(nil)

// New returns the gocron Elector of el, which answers from memory, without
// a database call: a job runs only while el leads and trusts its lease
// (election.Elector.IsLeader). el must be running (Run) for it to ever
// lead. It panics on a nil el.
func New(el *election.Elector) *Elector {
	if el == nil {
		panic("sqlelect/gocron: New(nil)")
	}
	return &Elector{el: el}
}

// ForCandidate returns a gocron Elector that asks the database, with
// election.Election.IsLeader, whether candidate id holds e's lease, once
// per job run. Use it when the leadership is kept by something other than
// an Elector of this process; New costs no round trip. It panics on a nil
// e.
func ForCandidate(e *election.Election, id uuid.UUID) *Elector {
	if e == nil {
		panic("sqlelect/gocron: ForCandidate(nil, ...)")
	}
	return &Elector{e: e, id: id}
}

// IsLeader implements gocron.Elector: nil when the candidate leads, else
// an error matching election.ErrNotLeader (or the database error, for
// ForCandidate), and gocron skips the run.
func (g *Elector) IsLeader(ctx context.Context) error {
	if g.el != nil {
		if g.el.IsLeader() {
			return nil
		}
		return fmt.Errorf("%w: candidate %s", election.ErrNotLeader, g.el.ID())
	}
	ok, err := g.e.IsLeader(ctx, g.id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: namespace %s, candidate %s", election.ErrNotLeader, g.e.Namespace(), g.id)
	}
	return nil
}
