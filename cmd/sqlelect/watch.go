package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
)

// watchEvent is one line of watch, and its JSON form.
type watchEvent struct {
	Time      time.Time  `json:"time"`
	Namespace string     `json:"namespace"`
	Event     string     `json:"event"` // leader, vacant, joined, left
	Leader    *uuid.UUID `json:"leader,omitempty"`
	Term      int64      `json:"term,omitempty"`
	Candidate *uuid.UUID `json:"candidate,omitempty"`
	Hostname  string     `json:"hostname,omitempty"`
	PID       int        `json:"pid,omitempty"`
	Label     string     `json:"label,omitempty"`
}

// nsState is what watch last saw of a namespace.
type nsState struct {
	leader     uuid.UUID
	term       int64
	candidates map[uuid.UUID]election.CandidateInfo
}

func (e env) watch(ctx context.Context, args []string) int {
	fs, c := e.flags("watch", "[namespace...]",
		"Prints leadership changes (leader, vacant) and candidates joining and leaving, one line each, until interrupted.\n"+
			"It reads the tables every --interval; the first lines show each namespace's current leader.\n"+
			"Without namespaces, every namespace in the tables, including those that appear later.",
		"sqlelect watch scheduler reaper --json", true)
	interval := fs.Duration("interval", 500*time.Millisecond, "how often to read the tables")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if *interval < 10*time.Millisecond {
		return e.usageError(fs, "--interval must be at least 10ms")
	}
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	named := fs.Args()
	states := map[string]*nsState{}
	elections := map[string]*election.Election{}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		nss, err := e.namespaces(ctx, db, c, named)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			return e.fail(err)
		}
		for _, ns := range nss {
			if err := e.watchOne(ctx, db, c, ns, states, elections); err != nil {
				if ctx.Err() != nil {
					return exitOK
				}
				return e.fail(fmt.Errorf("namespace %q: %w", ns, err))
			}
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
	}
}

// watchOne reads one namespace and prints what changed since the last
// reading.
func (e env) watchOne(ctx context.Context, db *gorm.DB, c *common, ns string, states map[string]*nsState, elections map[string]*election.Election) error {
	el := elections[ns]
	if el == nil {
		var err error
		if el, err = c.election(ctx, db, ns); err != nil {
			return err
		}
		elections[ns] = el
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	info, err := el.LeaderInfo(cctx)
	if err != nil {
		return err
	}
	cands, err := el.Candidates(cctx)
	if err != nil {
		return err
	}
	now := time.Now()
	prev, seen := states[ns]
	cur := &nsState{leader: info.Lease.Leader, term: info.Lease.Term, candidates: map[uuid.UUID]election.CandidateInfo{}}
	for _, ci := range cands {
		cur.candidates[ci.ID] = ci
	}
	states[ns] = cur
	var evs []watchEvent
	if !seen || prev.leader != cur.leader || prev.term != cur.term {
		if info.Lease.Vacant() {
			if seen {
				evs = append(evs, watchEvent{Time: now, Namespace: ns, Event: "vacant"})
			}
		} else {
			id := info.Lease.Leader
			evs = append(evs, watchEvent{Time: now, Namespace: ns, Event: "leader", Leader: &id, Term: info.Lease.Term,
				Hostname: info.Identity.Hostname, PID: info.Identity.PID, Label: info.Identity.Label})
		}
	}
	if seen {
		var joined, left []uuid.UUID
		for id := range cur.candidates {
			if _, ok := prev.candidates[id]; !ok {
				joined = append(joined, id)
			}
		}
		for id := range prev.candidates {
			if _, ok := cur.candidates[id]; !ok {
				left = append(left, id)
			}
		}
		slices.SortFunc(joined, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		slices.SortFunc(left, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		for _, id := range joined {
			ci := cur.candidates[id]
			evs = append(evs, watchEvent{Time: now, Namespace: ns, Event: "joined", Candidate: &id,
				Hostname: ci.Identity.Hostname, PID: ci.Identity.PID, Label: ci.Identity.Label})
		}
		for _, id := range left {
			ci := prev.candidates[id]
			evs = append(evs, watchEvent{Time: now, Namespace: ns, Event: "left", Candidate: &id,
				Hostname: ci.Identity.Hostname, PID: ci.Identity.PID, Label: ci.Identity.Label})
		}
	}
	for _, ev := range evs {
		if c.json {
			ev.Time = ev.Time.UTC()
			if err := writeJSON(e.stdout, ev); err != nil {
				return err
			}
			continue
		}
		ident := election.Identity{Hostname: ev.Hostname, PID: ev.PID, Label: ev.Label}
		at := ev.Time.Local().Format("15:04:05.000")
		switch ev.Event {
		case "leader":
			fmt.Fprintf(e.stdout, "%s  %-20s  leader %s (%s), term %d\n", at, ns, ev.Leader, ident, ev.Term)
		case "vacant":
			fmt.Fprintf(e.stdout, "%s  %-20s  no leader\n", at, ns)
		case "joined":
			fmt.Fprintf(e.stdout, "%s  %-20s  candidate %s (%s) joined\n", at, ns, ev.Candidate, ident)
		case "left":
			fmt.Fprintf(e.stdout, "%s  %-20s  candidate %s (%s) left\n", at, ns, ev.Candidate, ident)
		}
	}
	return nil
}
