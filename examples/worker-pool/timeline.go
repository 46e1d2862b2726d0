package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// timeline prints what happens, one line per event, with the time since
// start (in the demo) or the time of day (so that the timelines of several
// processes line up):
//
//	  +2.41s  cyd       scheduler   LEADS in term 2, after ada (term 1); vm/4242 [worker-pool]
//	10:42:07.118  3f2a9c1e  scheduler   sees 9b0d44e2 lead in term 1; web-2/17 [worker-pool]
//
// It also keeps the little state the demo waits on.
type timeline struct {
	mu      sync.Mutex
	out     io.Writer
	start   time.Time
	clock   bool                           // print the time of day, not the time since start
	observe bool                           // print what members see of other leaders
	names   map[uuid.UUID]string           // candidate id -> name, for members known here
	terms   map[string]map[int64]uuid.UUID // subsystem -> term -> leader, as seen here
	leaders map[string]election.Lease      // subsystem -> lease of the member of this process leading it
	jobs    int                            // jobs done by workers of this process
	gates   map[gateKey]chan struct{}      // closed once a term's LEADS line is printed
	changed chan struct{}                  // closed and replaced on every change
}

// newTimeline returns a timeline for the demo (single process: time since
// start, leaders' own reports only) or for one member process (time of day,
// and what the member sees of other processes' leaders).
func newTimeline(out io.Writer, process bool) *timeline {
	return &timeline{
		out:     out,
		start:   time.Now(),
		clock:   process,
		observe: process,
		names:   map[uuid.UUID]string{},
		terms:   map[string]map[int64]uuid.UUID{},
		leaders: map[string]election.Lease{},
		gates:   map[gateKey]chan struct{}{},
		changed: make(chan struct{}),
	}
}

func (t *timeline) name(id uuid.UUID, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.names[id] = name
}

// who names a candidate: its member name when it is in this process,
// otherwise the first eight hex digits of its id.
func (t *timeline) who(id uuid.UUID) string {
	if n, ok := t.names[id]; ok {
		return n
	}
	return shortID(id)
}

// line prints one event; t.mu must be held.
func (t *timeline) line(who, what, msg string) {
	fmt.Fprintf(t.out, "%s  %-9s %-11s %s\n", t.now(), who, what, msg)
	close(t.changed)
	t.changed = make(chan struct{})
}

// note prints a line that is about the run, not one member.
func (t *timeline) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%s  %s\n", t.now(), fmt.Sprintf(format, args...))
}

func (t *timeline) now() string {
	if t.clock {
		return time.Now().Format("15:04:05.000")
	}
	return fmt.Sprintf("%+7.2fs", time.Since(t.start).Seconds())
}

// event prints something member id did, in subsystem or worker what.
func (t *timeline) event(id uuid.UUID, what, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.line(t.who(id), what, fmt.Sprintf(format, args...))
}

func (t *timeline) seen(sub string, lease election.Lease) {
	if lease.Vacant() {
		return
	}
	if t.terms[sub] == nil {
		t.terms[sub] = map[int64]uuid.UUID{}
	}
	t.terms[sub][lease.Term] = lease.Leader
}

type gateKey struct {
	id   uuid.UUID
	sub  string
	term int64
}

// gate is closed once the LEADS line of a term is printed. The Elector
// starts the leader's work on a goroutine of its own and may call
// OnStoppedLeading before that goroutine has run; stopped waits at the gate
// so that the lines come in order.
func (t *timeline) gate(k gateKey) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.gates[k]
	if !ok {
		g = make(chan struct{})
		t.gates[k] = g
	}
	return g
}

// leading: member id, who is ident, starts leading subsystem sub.
func (t *timeline) leading(id uuid.UUID, sub string, lease election.Lease, ident election.Identity) {
	defer close(t.gate(gateKey{id, sub, lease.Term}))
	t.mu.Lock()
	defer t.mu.Unlock()
	// The latest earlier term seen here, if any, names whom this one follows.
	var prev int64
	for term := range t.terms[sub] {
		if term < lease.Term && term > prev {
			prev = term
		}
	}
	t.seen(sub, lease)
	t.leaders[sub] = lease
	msg := fmt.Sprintf("LEADS in term %d", lease.Term)
	if prev > 0 && t.terms[sub][prev] != id {
		msg += fmt.Sprintf(", after %s (term %d)", t.who(t.terms[sub][prev]), prev)
	}
	t.line(t.who(id), sub, msg+"; "+ident.String())
}

// stopped: member id no longer leads subsystem sub.
func (t *timeline) stopped(id uuid.UUID, sub string, lease election.Lease) {
	k := gateKey{id, sub, lease.Term}
	select {
	case <-t.gate(k):
	case <-time.After(time.Second):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.gates, k)
	if l, ok := t.leaders[sub]; ok && l.Leader == id && l.Term == lease.Term {
		delete(t.leaders, sub)
	}
	t.line(t.who(id), sub, fmt.Sprintf("stops leading (term %d)", lease.Term))
}

// observed: member id saw a new holder or term of subsystem sub's seat,
// held by ident (zero when not known).
func (t *timeline) observed(id uuid.UUID, sub string, lease election.Lease, ident election.Identity) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen(sub, lease)
	if !t.observe || lease.Leader == id {
		return // its own leadership is printed by leading
	}
	if lease.Vacant() {
		t.line(t.who(id), sub, "sees the seat vacant")
		return
	}
	msg := fmt.Sprintf("sees %s lead in term %d", t.who(lease.Leader), lease.Term)
	if ident != (election.Identity{}) {
		msg += "; " + ident.String()
	}
	t.line(t.who(id), sub, msg)
}

// history prints the terms of subsystem sub as the database recorded them,
// newest first, one line each.
func (t *timeline) history(sub string, terms []election.TermRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(terms) == 0 {
		t.line("history", sub, "no terms yet")
		return
	}
	for _, r := range terms {
		end := "still running (or lapsed, not yet taken over)"
		if r.Ended() {
			end = fmt.Sprintf("to %s, %s", r.EndedAt.Format("15:04:05.000"), r.EndReason)
		}
		t.line("history", sub, fmt.Sprintf("term %d: %s, %v, from %s %s", r.Term, t.who(r.Leader), r.Identity,
			r.AcquiredAt.Format("15:04:05.000"), end))
	}
}

func (t *timeline) jobDone(id uuid.UUID, worker int, job string, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.jobs++
	t.line(t.who(id), fmt.Sprintf("worker %d", worker), fmt.Sprintf("done job %s (%v)", job, took.Round(time.Millisecond)))
}

// wait returns when cond, called with t.mu held, is true, or when ctx ends.
func (t *timeline) wait(ctx context.Context, cond func() bool) error {
	for {
		t.mu.Lock()
		ok, ch := cond(), t.changed
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// summary lists, per subsystem, the leaders seen in term order.
func (t *timeline) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	subs := make([]string, 0, len(t.terms))
	for sub := range t.terms {
		subs = append(subs, sub)
	}
	sort.Strings(subs)
	for _, sub := range subs {
		terms := make([]int64, 0, len(t.terms[sub]))
		for term := range t.terms[sub] {
			terms = append(terms, term)
		}
		sort.Slice(terms, func(i, j int) bool { return terms[i] < terms[j] })
		var seq []string
		for _, term := range terms {
			seq = append(seq, fmt.Sprintf("%s (term %d)", t.who(t.terms[sub][term]), term))
		}
		parts = append(parts, sub+": "+strings.Join(seq, " -> "))
	}
	return fmt.Sprintf("%d jobs done; %s", t.jobs, strings.Join(parts, "; "))
}

// lease returns the lease of the member of this process leading sub.
func (t *timeline) lease(sub string) election.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leaders[sub]
}

func (t *timeline) nameOf(id uuid.UUID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.who(id)
}
