package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
)

// watchEvent is one line of watch, and its JSON form.
type watchEvent struct {
	// Time is when watch saw the change (this host's clock).
	Time time.Time `json:"time"`
	// At is when the change happened by the database clock, where the
	// tables say: a term's grant for leader, its end (or its lease's
	// expiry) for vacant.
	At        *time.Time `json:"at,omitempty"`
	Namespace string     `json:"namespace"`
	Event     string     `json:"event"` // leader, vacant, joined, left
	// Leader and Term are the term granted (leader) or ended (vacant).
	Leader *uuid.UUID `json:"leader,omitempty"`
	Term   int64      `json:"term,omitempty"`
	// Reason is how the term ended (vacant): resigned, unregistered,
	// expired, vacated.
	Reason string `json:"reason,omitempty"`
	// VacantMS is how long the seat had no leader before the term began
	// (leader), when the history says.
	VacantMS  *int64     `json:"vacant_ms,omitempty"`
	Candidate *uuid.UUID `json:"candidate,omitempty"`
	Hostname  string     `json:"hostname,omitempty"`
	PID       int        `json:"pid,omitempty"`
	Label     string     `json:"label,omitempty"`
}

// when is the time a text line shows: when the change happened, if known.
func (ev watchEvent) when() time.Time {
	if ev.At != nil {
		return *ev.At
	}
	return ev.Time
}

// nsState is what watch last saw of a namespace.
type nsState struct {
	term   int64     // the newest term granted (0: none)
	leader uuid.UUID // its leader while the lease is live, else uuid.Nil
	ended  bool      // the term's end has been shown (or it ended before watch began)
	endAt  time.Time // when it ended, if known
	// candidates are the live candidates.
	candidates map[uuid.UUID]election.CandidateInfo
}

// followUps are when watch reads the tables again after being told that
// a seat was vacated: the candidates woken by the vacancy usually take the
// seat within milliseconds, and the later readings catch a slower grant
// before the next poll.
var followUps = []time.Duration{25 * time.Millisecond, 250 * time.Millisecond, time.Second}

// followUpSlack is how close two follow-ups may be: a wake-up whose
// follow-ups fall within it of those already due adds none, so a burst of
// vacancies costs a few readings, not a few per seat.
const followUpSlack = 20 * time.Millisecond

// minNameWidth is the narrowest namespace column of watch's text lines.
const minNameWidth = 20

func (e env) watch(ctx context.Context, args []string) int {
	fs, c := e.flags("watch", "[namespace...]",
		"Prints, one line each until interrupted, when a seat was vacated (how the term ended: resigned,\n"+
			"unregistered, expired, vacated by an operator) and when it was taken (the new leader and term, and how\n"+
			"long the seat had no leader), and candidates joining and leaving. The times are those the history\n"+
			"records, by the database clock, so a handoff shows both its ends even when it falls between two\n"+
			"readings. The first lines show each namespace's current leader (or its vacancy). Without namespaces,\n"+
			"every namespace in the tables, including those that appear later; a namespace named that nobody ever\n"+
			"used is an error (\"no such namespace\") unless --allow-unknown.\n\n"+
			"It reads every seat and candidate every --interval, with a constant number of statements whatever the\n"+
			"number of namespaces. Where the database wakes candidates in other processes at a handoff\n"+
			"(PostgreSQL through LISTEN/NOTIFY, MySQL/MariaDB through KILL QUERY, SQLite on Linux through a file\n"+
			"beside the database), watch is also told at once when a seat is vacated, and reads the tables at once\n"+
			"and again shortly after, to catch the new grant. A line on stderr says which applies.\n\n"+
			"JSON fields: time (when watch saw it, RFC 3339, UTC), at (when it happened by the database clock, where\n"+
			"known), namespace, event (leader, vacant, joined, left); leader and term: the term granted (leader)\n"+
			"or ended (vacant); reason (vacant): how it ended; vacant_ms (leader): how long the seat had no leader;\n"+
			"candidate for joined and left; hostname, pid, label of the leader or candidate.",
		"sqlelect watch scheduler reaper --json", true)
	interval := fs.Duration("interval", time.Second, "how often to read the tables")
	addAllowUnknown(fs, c)
	named, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if *interval < 10*time.Millisecond {
		return e.usageError(fs, "--interval must be at least 10ms")
	}
	if msg := checkNamespaces(named); msg != "" {
		return e.usageError(fs, msg)
	}
	db, err := e.openExisting(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	base, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return e.fail(err)
	}
	if err := c.known(ctx, db, named); err != nil {
		return e.fail(err)
	}
	w := &watcher{env: e, db: db, c: c, base: base, states: map[string]*nsState{}, width: minNameWidth}
	if len(named) > 0 {
		w.named = map[string]bool{}
		for _, ns := range named {
			w.named[ns] = true
		}
	}
	// Subscribe before the first reading, so that no vacancy falls between.
	wake, err := base.WatchVacancies(ctx)
	if ctx.Err() != nil {
		return exitOK
	}
	if err := w.read(ctx); err != nil {
		return w.fail(ctx, err)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "sqlelect: watch: reading the tables every %v (not told of changes: %v)\n", *interval, err)
	} else {
		fmt.Fprintf(e.stderr, "sqlelect: watch: told of vacated seats by the database; reading the tables every %v as well\n", *interval)
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	var due []time.Time // sorted
	later := time.NewTimer(time.Hour)
	later.Stop()
	defer later.Stop()
	schedule := func() {
		now := time.Now()
		for _, d := range followUps {
			at := now.Add(d)
			// Wake-ups in a burst share their follow-ups.
			if !slices.ContainsFunc(due, func(t time.Time) bool { return t.Sub(at).Abs() < followUpSlack }) {
				due = append(due, at)
			}
		}
		slices.SortFunc(due, time.Time.Compare)
		later.Reset(time.Until(due[0]))
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
			err = w.read(ctx)
		case ns, ok := <-wake:
			if !ok {
				wake = nil
				if ctx.Err() == nil {
					fmt.Fprintf(e.stderr, "sqlelect: watch: no longer told of changes; reading the tables every %v\n", *interval)
				}
				continue
			}
			if !w.follows(ns) {
				continue
			}
			if err = w.read(ctx); err == nil {
				schedule()
			}
		case <-later.C:
			now := time.Now()
			for len(due) > 0 && !due[0].After(now) {
				due = due[1:]
			}
			if len(due) > 0 {
				later.Reset(time.Until(due[0]))
			}
			err = w.read(ctx)
		}
		if err != nil {
			return w.fail(ctx, err)
		}
	}
}

// watcher is what watch knows of the namespaces it follows.
type watcher struct {
	env
	db     *gorm.DB
	c      *common
	base   *election.Election
	named  map[string]bool // the namespaces to follow; every one when nil
	states map[string]*nsState
	width  int       // of the namespace column: the longest name seen so far
	last   time.Time // the database clock at the last reading
}

// fail ends watch: quietly when interrupted.
func (w *watcher) fail(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		return exitOK
	}
	return w.env.fail(err)
}

// follows reports whether watch follows ns ("" stands for any namespace:
// a wake-up that names none).
func (w *watcher) follows(ns string) bool {
	return ns == "" || w.named == nil || w.named[ns]
}

// read reads every seat and candidate (two statements, and a third for
// the history when a term moved on) and prints what changed since the last
// reading.
func (w *watcher) read(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, w.c.timeout)
	defer cancel()
	list, err := w.base.ListSeats(cctx)
	if err != nil {
		return err
	}
	all, err := w.base.ListAllCandidates(cctx)
	if err != nil {
		return err
	}
	seen := time.Now()
	cands := map[string]map[uuid.UUID]election.CandidateInfo{}
	for _, ci := range all {
		if !w.follows(ci.Namespace) {
			continue
		}
		m := cands[ci.Namespace]
		if m == nil {
			m = map[uuid.UUID]election.CandidateInfo{}
			cands[ci.Namespace] = m
		}
		m[ci.ID] = ci.CandidateInfo
	}
	seats := list.Seats[:0:0]
	moved := false
	for _, s := range list.Seats {
		if !w.follows(s.Namespace) {
			continue
		}
		seats = append(seats, s)
		w.width = max(w.width, utf8.RuneCountInString(s.Namespace))
		if prev := w.states[s.Namespace]; prev != nil && termOf(s) > prev.term+1 || prev != nil && termOf(s) == prev.term+1 && !prev.ended {
			moved = true
		}
	}
	// The terms between two readings, for the namespaces whose seat moved
	// on more than one step: one statement for all of them.
	var terms map[string][]election.TermRecord
	if moved {
		window := time.Minute
		if !w.last.IsZero() {
			window += list.Now.Sub(w.last)
		}
		recent, err := w.base.ListRecentTerms(cctx, window)
		if err != nil {
			return err
		}
		terms = map[string][]election.TermRecord{}
		for _, t := range recent {
			terms[t.Namespace] = append(terms[t.Namespace], t)
		}
	}
	w.last = list.Now
	var evs []watchEvent
	read := make(map[string]bool, len(seats))
	for _, s := range seats {
		read[s.Namespace] = true
		evs = append(evs, w.changes(s, terms[s.Namespace], cands[s.Namespace], seen)...)
	}
	// A namespace whose only rows were candidates, all gone: they left.
	for ns := range w.states {
		if !read[ns] {
			evs = append(evs, w.changes(election.SeatInfo{Namespace: ns, Lease: election.Lease{Namespace: ns}}, nil, nil, seen)...)
		}
	}
	slices.SortStableFunc(evs, func(a, b watchEvent) int { return a.when().Compare(b.when()) })
	return w.print(evs)
}

// termOf is the newest term granted in the seat's namespace.
func termOf(s election.SeatInfo) int64 { return max(s.Lease.Term, s.Last.Term) }

// changes returns the events between the last reading of a namespace and
// s: the terms that ended and began since (from terms, the namespace's
// recent history, when the seat moved on by more than one term; from s
// otherwise), and the candidates that joined and left.
func (w *watcher) changes(s election.SeatInfo, terms []election.TermRecord, cands map[uuid.UUID]election.CandidateInfo, seen time.Time) []watchEvent {
	ns := s.Namespace
	prev := w.states[ns]
	cur := &nsState{term: termOf(s), leader: s.Lease.Leader, candidates: cands}
	if cur.candidates == nil {
		cur.candidates = map[uuid.UUID]election.CandidateInfo{}
	}
	w.states[ns] = cur
	var evs []watchEvent
	leader := func(t election.TermRecord, gapFrom time.Time) {
		id, at := t.Leader, t.AcquiredAt
		ev := watchEvent{Time: seen, At: &at, Namespace: ns, Event: "leader", Leader: &id, Term: t.Term,
			Hostname: t.Identity.Hostname, PID: t.Identity.PID, Label: t.Identity.Label}
		if !gapFrom.IsZero() && !at.Before(gapFrom) {
			ms := at.Sub(gapFrom).Milliseconds()
			ev.VacantMS = &ms
		}
		evs = append(evs, ev)
	}
	vacant := func(t election.TermRecord, at time.Time, reason string) {
		id := t.Leader
		ev := watchEvent{Time: seen, Namespace: ns, Event: "vacant", Leader: &id, Term: t.Term, Reason: reason,
			Hostname: t.Identity.Hostname, PID: t.Identity.PID, Label: t.Identity.Label}
		if !at.IsZero() {
			ev.At = &at
		}
		evs = append(evs, ev)
		cur.ended, cur.endAt = true, at
	}
	// The newest term, as the seat shows it.
	last := s.Last
	if !s.Lease.Vacant() {
		last.Term, last.Leader, last.AcquiredAt, last.Identity = s.Lease.Term, s.Lease.Leader, s.Lease.AcquiredAt, s.Identity
	}
	// endOfLast shows the newest term's end, if it has ended: recorded in
	// the history, or its lease lapsed.
	endOfLast := func() {
		switch {
		case last.Term == 0:
		case last.Ended():
			vacant(last, last.EndedAt, string(last.EndReason))
		case s.Lease.Vacant() && !s.LapsedAt.IsZero():
			vacant(last, s.LapsedAt, string(election.EndExpired))
		}
	}
	switch {
	case prev == nil:
		// The first reading: the seat as it is.
		if !s.Lease.Vacant() {
			leader(last, time.Time{})
		} else {
			endOfLast()
			if last.Term == 0 {
				evs = append(evs, watchEvent{Time: seen, Namespace: ns, Event: "vacant"})
				cur.ended = true
			}
		}
	case cur.term == prev.term:
		cur.ended, cur.endAt = prev.ended, prev.endAt
		if !prev.ended {
			endOfLast()
		}
	default:
		// The seat moved on: the end of the term last seen, then each
		// term since, from the history when there are several.
		byTerm := map[int64]election.TermRecord{}
		for _, t := range terms {
			byTerm[t.Term] = t
		}
		byTerm[last.Term] = last
		gapFrom := prev.endAt
		if old, ok := byTerm[prev.term]; ok && prev.term > 0 && !prev.ended && old.Ended() {
			vacant(old, old.EndedAt, string(old.EndReason))
			gapFrom = old.EndedAt
		}
		for t := prev.term + 1; t <= cur.term; t++ {
			rec, ok := byTerm[t]
			if !ok {
				gapFrom = time.Time{}
				continue // pruned, or beyond what the history read returns
			}
			leader(rec, gapFrom)
			gapFrom = time.Time{}
			if t < cur.term && rec.Ended() {
				vacant(rec, rec.EndedAt, string(rec.EndReason))
				gapFrom = rec.EndedAt
			}
		}
		cur.ended = false
		endOfLast()
	}
	if prev == nil {
		return evs
	}
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
		evs = append(evs, watchEvent{Time: seen, Namespace: ns, Event: "joined", Candidate: &id,
			Hostname: ci.Identity.Hostname, PID: ci.Identity.PID, Label: ci.Identity.Label})
	}
	for _, id := range left {
		ci := prev.candidates[id]
		evs = append(evs, watchEvent{Time: seen, Namespace: ns, Event: "left", Candidate: &id,
			Hostname: ci.Identity.Hostname, PID: ci.Identity.PID, Label: ci.Identity.Label})
	}
	return evs
}

// print writes the events, as JSON lines or as aligned text.
func (w *watcher) print(evs []watchEvent) error {
	for _, ev := range evs {
		if w.c.json {
			ev.Time = ev.Time.UTC()
			if ev.At != nil {
				at := ev.At.UTC()
				ev.At = &at
			}
			if err := writeJSON(w.stdout, ev); err != nil {
				return err
			}
			continue
		}
		ident := election.Identity{Hostname: ev.Hostname, PID: ev.PID, Label: ev.Label}
		var what string
		switch ev.Event {
		case "leader":
			what = fmt.Sprintf("leader %s (%s), term %d", ev.Leader, ident, ev.Term)
			if ev.VacantMS != nil {
				what += fmt.Sprintf(", after %v without a leader", time.Duration(*ev.VacantMS)*time.Millisecond)
			}
		case "vacant":
			what = "no leader"
			if ev.Leader != nil {
				what += fmt.Sprintf(": term %d of %s (%s) %s", ev.Term, ev.Leader, ident, endPhrase(ev.Reason))
			}
		case "joined", "left":
			what = fmt.Sprintf("candidate %s (%s) %s", ev.Candidate, ident, ev.Event)
		}
		pad := strings.Repeat(" ", max(w.width-utf8.RuneCountInString(ev.Namespace), 0))
		fmt.Fprintf(w.stdout, "%s  %s%s  %s\n", ev.when().Local().Format("15:04:05.000"), ev.Namespace, pad, what)
	}
	return nil
}

// endPhrase says how a term ended, for watch's text.
func endPhrase(reason string) string {
	switch election.EndReason(reason) {
	case election.EndResigned:
		return "resigned"
	case election.EndUnregistered:
		return "ended: its leader unregistered"
	case election.EndExpired:
		return "expired"
	case election.EndVacated:
		return "was vacated by an operator"
	}
	return "ended"
}
