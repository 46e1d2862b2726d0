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

// followUps are when watch reads a namespace again after being told that
// its seat was vacated: the candidates woken by the vacancy usually take
// the seat within milliseconds, and the later readings catch a slower
// grant before the next poll.
var followUps = []time.Duration{25 * time.Millisecond, 250 * time.Millisecond, time.Second}

// followUpSlack is how close two follow-ups of a namespace may be: a
// wake-up whose follow-ups fall within it of those already due adds none.
const followUpSlack = 10 * time.Millisecond

func (e env) watch(ctx context.Context, args []string) int {
	fs, c := e.flags("watch", "[namespace...]",
		"Prints leadership changes (leader, vacant) and candidates joining and leaving, one line each, until\n"+
			"interrupted. The first lines show each namespace's current leader. Without namespaces, every\n"+
			"namespace in the tables, including those that appear later.\n\n"+
			"It reads the tables every --interval. Where the database wakes candidates in other processes at a\n"+
			"handoff (PostgreSQL through LISTEN/NOTIFY, SQLite on Linux through a file beside the database), watch\n"+
			"is also told at once when a seat is vacated, and reads that namespace at once and again shortly after,\n"+
			"to catch the new grant; grants after a lapsed lease, and candidates joining and leaving, are seen at\n"+
			"the next reading. A line on stderr says which applies.\n\n"+
			"JSON fields: time (RFC 3339, UTC), namespace, event (leader, vacant, joined, left); leader and term\n"+
			"for leader; candidate for joined and left; hostname, pid, label of the leader or candidate.",
		"sqlelect watch scheduler reaper --json", true)
	interval := fs.Duration("interval", time.Second, "how often to read the tables")
	named, code := e.parse(fs, args)
	if code >= 0 {
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
	base, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return e.fail(err)
	}
	w := &watcher{env: e, db: db, c: c, named: named, states: map[string]*nsState{}, elections: map[string]*election.Election{}}
	// Subscribe before the first reading, so that no vacancy falls between.
	wake, err := base.WatchVacancies(ctx)
	if ctx.Err() != nil {
		return exitOK
	}
	if err := w.readAll(ctx); err != nil {
		return w.fail(ctx, err)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sqlelect: watch: reading the tables every %v (not told of changes: %v)\n", *interval, err)
	} else {
		fmt.Fprintf(e.stderr, "sqlelect: watch: told of vacated seats by the database; reading the tables every %v as well\n", *interval)
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	var due []followUp // sorted by at
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	schedule := func(ns string) {
		now := time.Now()
		for _, d := range followUps {
			at := now.Add(d)
			// Wake-ups in a burst share their follow-ups.
			if !slices.ContainsFunc(due, func(f followUp) bool { return f.ns == ns && f.at.Sub(at).Abs() < followUpSlack }) {
				due = append(due, followUp{at: at, ns: ns})
			}
		}
		slices.SortStableFunc(due, func(a, b followUp) int { return a.at.Compare(b.at) })
		later.Reset(time.Until(due[0].at))
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
			err = w.readAll(ctx)
		case ns, ok := <-wake:
			if !ok {
				wake = nil
				if ctx.Err() == nil {
					fmt.Fprintf(e.stderr, "sqlelect: watch: no longer told of changes; reading the tables every %v\n", *interval)
				}
				continue
			}
			if err = w.read(ctx, ns); err == nil {
				schedule(ns)
			}
		case <-later.C:
			now := time.Now()
			var nss []string
			for len(due) > 0 && !due[0].at.After(now) {
				if !slices.Contains(nss, due[0].ns) {
					nss = append(nss, due[0].ns)
				}
				due = due[1:]
			}
			if len(due) > 0 {
				later.Reset(time.Until(due[0].at))
			}
			for _, ns := range nss {
				if err = w.read(ctx, ns); err != nil {
					break
				}
			}
		}
		if err != nil {
			return w.fail(ctx, err)
		}
	}
}

// followUp is a reading watch has scheduled: ns, or every namespace when
// ns is "".
type followUp struct {
	at time.Time
	ns string
}

// watcher is what watch knows of the namespaces it follows.
type watcher struct {
	env
	db        *gorm.DB
	c         *common
	named     []string // the namespaces to follow; every one when empty
	states    map[string]*nsState
	elections map[string]*election.Election
}

// fail ends watch: quietly when interrupted.
func (w *watcher) fail(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		return exitOK
	}
	return w.env.fail(err)
}

// readAll reads every namespace followed.
func (w *watcher) readAll(ctx context.Context) error {
	nss, err := w.namespaces(ctx, w.db, w.c, w.named)
	if err != nil {
		return err
	}
	for _, ns := range nss {
		if err := w.readOne(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

// read reads ns if it is followed, or every namespace when ns is "".
func (w *watcher) read(ctx context.Context, ns string) error {
	if ns == "" {
		return w.readAll(ctx)
	}
	if len(w.named) > 0 && !slices.Contains(w.named, ns) {
		return nil
	}
	return w.readOne(ctx, ns)
}

// readOne reads one namespace and prints what changed since the last
// reading.
func (w *watcher) readOne(ctx context.Context, ns string) error {
	e, c, states := w.env, w.c, w.states
	el := w.elections[ns]
	if el == nil {
		var err error
		if el, err = c.election(ctx, w.db, ns); err != nil {
			return fmt.Errorf("namespace %q: %w", ns, err)
		}
		w.elections[ns] = el
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	info, err := el.LeaderInfo(cctx)
	if err != nil {
		return fmt.Errorf("namespace %q: %w", ns, err)
	}
	cands, err := el.Candidates(cctx)
	if err != nil {
		return fmt.Errorf("namespace %q: %w", ns, err)
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
