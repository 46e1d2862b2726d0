// Package electiontest checks, in your own integration tests, that
// elections on your database keep mutual exclusion: no term has two leaders,
// no two terms overlap, no participant sees terms go backwards, and no
// leader-only write commits under a stale leader.
//
// A test records what every participant sees in a Recorder, lets them
// compete (kill, pause or disconnect some of them if you like), and checks
// the history at the end:
//
//	rec := electiontest.NewRecorder()
//	fence, err := electiontest.NewFence(ctx, db, e, rec) // leader-only writes under Guard
//	...
//	// in each participant, after every call that returns a Lease:
//	rec.Observe(name, lease)
//	// in the leader, as its leader-only work:
//	_, err := fence.Write(ctx, lease)
//	...
//	if err := fence.Load(ctx); err != nil { ... } // the committed writes, as the database has them
//	if res := rec.Check(); res.Err() != nil {
//		t.Fatal(res.Err())
//	}
//
// # What is checked
//
// The Recorder keeps, per namespace and term, every candidate seen holding
// the term, when the term began (Lease.AcquiredAt) and the latest expiry
// seen (Lease.ExpiresAt), both by the database clock; per participant and
// namespace, the order in which terms were seen; and the fenced writes. The
// Checker reports:
//
//   - SplitTerm: a term seen held by two candidates, or begun at two
//     different times (granted twice).
//   - Overlap: a term that began before an earlier term's lease ended,
//     judged on the database clock by the interval [AcquiredAt, latest
//     ExpiresAt observed]. A term its holder gave up (Resign,
//     UnregisterCandidate; see Recorder.Released) may end before its
//     ExpiresAt, so only its start is checked.
//   - Backwards: a participant that saw a lower term after a higher one.
//   - StaleWrite: a committed fenced write whose term is lower than that of a
//     write committed before it (writes are ordered by their counter, which
//     the database assigns in commit order), or two writes with one counter.
//   - ForeignWrite: a fenced write made in a term by a candidate never seen
//     holding that term.
//
// Observations only narrow what is known: a missed renewal makes a lease
// interval look shorter, so the checks never report a violation that did not
// happen, but they can only find what the participants saw. Record every
// Lease your participants get, including those naming other candidates,
// and poll Election.Leader from a bystander for a fuller picture.
//
// The Recorder keeps one entry per term and per change of term seen by a
// participant, not one per observation, so long runs with millions of
// elections fit in memory.
package electiontest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// ErrViolation is wrapped by Result.Err when the history breaks mutual
// exclusion.
var ErrViolation = errors.New("electiontest: mutual exclusion violated")

// Kind is a kind of violation.
type Kind int

// The kinds of violation the Checker reports.
const (
	// SplitTerm is a term held by two candidates, or granted twice.
	SplitTerm Kind = iota
	// Overlap is a term that began before an earlier term's lease ended.
	Overlap
	// Backwards is a participant that saw a term lower than one it saw before.
	Backwards
	// StaleWrite is a fenced write committed with a term lower than one
	// already committed.
	StaleWrite
	// ForeignWrite is a fenced write by a candidate that did not hold its term.
	ForeignWrite
	numKinds
)

var kindNames = [numKinds]string{"split term", "overlapping terms", "term backwards", "stale write", "foreign write"}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Term is what was seen of one term of one namespace.
type Term struct {
	// Namespace and Term identify the term.
	Namespace string `json:"namespace"`
	Term      int64  `json:"term"`
	// Holders are the candidates seen holding the term; more than one is a
	// violation.
	Holders []uuid.UUID `json:"holders"`
	// AcquiredAt is when the term began (database clock), as first seen.
	// Zero when no observation carried it.
	AcquiredAt time.Time `json:"acquired_at"`
	// OtherAcquiredAt is a different start seen for the same term, which
	// means it was granted twice; zero when all observations agree.
	OtherAcquiredAt time.Time `json:"other_acquired_at"`
	// ExpiresAt is the latest lease expiry seen (database clock).
	ExpiresAt time.Time `json:"expires_at"`
	// Released is set when the holder gave the lease up early.
	Released bool `json:"released,omitempty"`
	// Observations counts the leases seen for the term.
	Observations int `json:"observations"`
}

// Seen is one participant's view of one namespace: the terms it saw, in
// order, with repeats of the same term collapsed.
type Seen struct {
	Observer  string  `json:"observer"`
	Namespace string  `json:"namespace"`
	Terms     []int64 `json:"terms"`
}

// Write is one committed leader-only write: the Counter-th write of the
// namespace, made by Leader in Term.
type Write struct {
	Namespace string    `json:"namespace"`
	Counter   int64     `json:"counter"`
	Term      int64     `json:"term"`
	Leader    uuid.UUID `json:"leader"`
}

// Release says that Candidate gave up whatever lease it held in Namespace
// at some moment between From and To (database clock; a zero time leaves
// that side open). See Recorder.ReleasedBetween.
type Release struct {
	Namespace string    `json:"namespace"`
	Candidate uuid.UUID `json:"candidate"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
}

// covers reports whether the release may have ended term t early: t is
// held by the candidate, began by To, and its lease was seen running at
// From or later.
func (rl Release) covers(t Term) bool {
	return rl.Namespace == t.Namespace && slices.Contains(t.Holders, rl.Candidate) &&
		(rl.To.IsZero() || t.AcquiredAt.IsZero() || !t.AcquiredAt.After(rl.To)) &&
		(rl.From.IsZero() || !t.ExpiresAt.Before(rl.From))
}

// History is everything a Recorder holds, in a form that can be built by
// hand, stored as JSON, or merged from several processes.
type History struct {
	Terms        []Term    `json:"terms"`
	Seen         []Seen    `json:"seen"`
	Writes       []Write   `json:"writes"`
	Releases     []Release `json:"releases"`
	Observations int       `json:"observations"`
}

type termKey struct {
	ns   string
	term int64
}

type seenKey struct {
	observer, ns string
}

// Recorder collects what participants see. It is safe for concurrent use;
// the zero value is not, use NewRecorder.
//
// Observations of one participant must be recorded in the order it made
// them (from one goroutine, or under the participant's own lock), since
// their order is what the Backwards check looks at.
type Recorder struct {
	mu           sync.Mutex
	terms        map[termKey]*Term
	seen         map[seenKey]*Seen
	writes       []Write
	releases     []Release
	observations int
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{terms: map[termKey]*Term{}, seen: map[seenKey]*Seen{}}
}

// Observe records that observer (any name unique to the participant, such
// as its candidate id) saw lease. Vacant leases are counted but tell
// nothing about terms.
func (r *Recorder) Observe(observer string, lease election.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observations++
	if lease.Vacant() || lease.Term == 0 {
		return
	}
	t := r.term(lease.Namespace, lease.Term)
	t.Observations++
	if !slices.Contains(t.Holders, lease.Leader) {
		t.Holders = append(t.Holders, lease.Leader)
	}
	if a := lease.AcquiredAt; !a.IsZero() {
		switch {
		case t.AcquiredAt.IsZero():
			t.AcquiredAt = a
		case !a.Equal(t.AcquiredAt) && t.OtherAcquiredAt.IsZero():
			t.OtherAcquiredAt = a
		}
	}
	if lease.ExpiresAt.After(t.ExpiresAt) {
		t.ExpiresAt = lease.ExpiresAt
	}
	k := seenKey{observer, lease.Namespace}
	s := r.seen[k]
	if s == nil {
		s = &Seen{Observer: observer, Namespace: lease.Namespace}
		r.seen[k] = s
	}
	if n := len(s.Terms); n == 0 || s.Terms[n-1] != lease.Term {
		s.Terms = append(s.Terms, lease.Term)
	}
}

// Released records that the holder of lease gives it up before it expires
// (Resign, UnregisterCandidate, or an Elector's Run returning). Call it
// before the call that releases: recording a release that then fails only
// makes the Overlap check less strict for that term.
func (r *Recorder) Released(lease election.Lease) {
	if lease.Vacant() || lease.Term == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.term(lease.Namespace, lease.Term).Released = true
}

// ReleasedBetween records that candidate id gave up whatever lease it held
// in namespace ns at some moment between from and to, by the database clock:
// for a release whose term the caller does not know, such as an
// UnregisterCandidate when the candidate may hold a lease it never heard
// of (its Elect committed but the answer was lost), or a call whose outcome
// is unknown. Every term of ns held by id that began by to, and whose lease
// was seen running at from or later, counts as released. A zero from or to
// leaves that side open; read the bounds with a query of the database
// clock just before and just after the call.
func (r *Recorder) ReleasedBetween(ns string, id uuid.UUID, from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, Release{Namespace: ns, Candidate: id, From: from, To: to})
}

func (r *Recorder) term(ns string, term int64) *Term {
	k := termKey{ns, term}
	t := r.terms[k]
	if t == nil {
		t = &Term{Namespace: ns, Term: term}
		r.terms[k] = t
	}
	return t
}

// Wrote records a committed fenced write. Recording the same write twice
// (from the writer and from Fence.Load) is harmless.
func (r *Recorder) Wrote(w Write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, w)
}

// Add merges h into the Recorder, e.g. the history of another process.
// Observers' sequences are appended to those of the same name.
func (r *Recorder) Add(h History) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observations += h.Observations
	for _, in := range h.Terms {
		t := r.term(in.Namespace, in.Term)
		t.Observations += in.Observations
		for _, id := range in.Holders {
			if !slices.Contains(t.Holders, id) {
				t.Holders = append(t.Holders, id)
			}
		}
		for _, a := range []time.Time{in.AcquiredAt, in.OtherAcquiredAt} {
			switch {
			case a.IsZero():
			case t.AcquiredAt.IsZero():
				t.AcquiredAt = a
			case !a.Equal(t.AcquiredAt) && t.OtherAcquiredAt.IsZero():
				t.OtherAcquiredAt = a
			}
		}
		if in.ExpiresAt.After(t.ExpiresAt) {
			t.ExpiresAt = in.ExpiresAt
		}
		t.Released = t.Released || in.Released
	}
	for _, in := range h.Seen {
		k := seenKey{in.Observer, in.Namespace}
		s := r.seen[k]
		if s == nil {
			s = &Seen{Observer: in.Observer, Namespace: in.Namespace}
			r.seen[k] = s
		}
		for _, term := range in.Terms {
			if n := len(s.Terms); n == 0 || s.Terms[n-1] != term {
				s.Terms = append(s.Terms, term)
			}
		}
	}
	r.writes = append(r.writes, h.Writes...)
	r.releases = append(r.releases, h.Releases...)
}

// History returns a copy of what was recorded, sorted by namespace, term,
// observer and counter.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{Observations: r.observations, Writes: slices.Clone(r.writes), Releases: slices.Clone(r.releases)}
	for _, t := range r.terms {
		c := *t
		c.Holders = slices.Clone(t.Holders)
		h.Terms = append(h.Terms, c)
	}
	for _, s := range r.seen {
		c := *s
		c.Terms = slices.Clone(s.Terms)
		h.Seen = append(h.Seen, c)
	}
	slices.SortFunc(h.Terms, func(a, b Term) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Term, b.Term))
	})
	slices.SortFunc(h.Seen, func(a, b Seen) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Observer, b.Observer))
	})
	slices.SortFunc(h.Writes, compareWrites)
	return h
}

// Check runs a Checker with default settings over what was recorded.
func (r *Recorder) Check() Result {
	return Checker{}.Check(r.History())
}

func compareWrites(a, b Write) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Counter, b.Counter),
		cmp.Compare(a.Term, b.Term), strings.Compare(a.Leader.String(), b.Leader.String()))
}

// Violation is one breach of mutual exclusion.
type Violation struct {
	Kind      Kind
	Namespace string
	// Term is the term the violation is about (the later one for Overlap,
	// StaleWrite and Backwards).
	Term int64
	// Detail says what was seen.
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s in namespace %q, term %d: %s", v.Kind, v.Namespace, v.Term, v.Detail)
}

// Checker checks a History. The zero value is ready to use.
type Checker struct {
	// MaxViolations caps how many violations Result.Violations keeps; the
	// counts stay exact. Zero means 1000.
	MaxViolations int
}

// Result is the outcome of a check.
type Result struct {
	// Namespaces, Terms, Observations and Writes count what was checked.
	Namespaces   int
	Terms        int
	Observations int
	Writes       int
	// Violations lists what was found, up to Checker.MaxViolations.
	Violations []Violation
	counts     [numKinds]int
}

// Count returns how many violations of kind k were found.
func (r Result) Count(k Kind) int {
	if k < 0 || k >= numKinds {
		return 0
	}
	return r.counts[k]
}

// Total returns how many violations were found.
func (r Result) Total() int {
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

// OK reports whether no violation was found.
func (r Result) OK() bool { return r.Total() == 0 }

// String summarizes the result on one line.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d namespaces, %d terms, %d observations, %d fenced writes: ", r.Namespaces, r.Terms, r.Observations, r.Writes)
	if r.OK() {
		b.WriteString("no violations")
		return b.String()
	}
	first := true
	for k := Kind(0); k < numKinds; k++ {
		if r.counts[k] == 0 {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		fmt.Fprintf(&b, "%d %s", r.counts[k], k)
	}
	return b.String()
}

// Err returns nil when no violation was found, and otherwise an error
// wrapping ErrViolation that lists the first violations.
func (r Result) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s)", ErrViolation.Error(), r.String())
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "\n\t... and %d more", r.Total()-i)
			break
		}
		b.WriteString("\n\t")
		b.WriteString(v.String())
	}
	return &violationError{msg: b.String()}
}

type violationError struct{ msg string }

func (e *violationError) Error() string { return e.msg }
func (e *violationError) Unwrap() error { return ErrViolation }

func (r *Result) report(limit int, v Violation) {
	r.counts[v.Kind]++
	if len(r.Violations) < limit {
		r.Violations = append(r.Violations, v)
	}
}

// Check checks h; see the package documentation for what it reports.
func (c Checker) Check(h History) Result {
	limit := c.MaxViolations
	if limit <= 0 {
		limit = 1000
	}
	res := Result{Terms: len(h.Terms), Observations: h.Observations}
	namespaces := map[string]struct{}{}

	terms := slices.Clone(h.Terms)
	slices.SortFunc(terms, func(a, b Term) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Term, b.Term))
	})
	byNamespace := map[string][]Release{}
	for _, rl := range h.Releases {
		byNamespace[rl.Namespace] = append(byNamespace[rl.Namespace], rl)
	}
	for i := range terms {
		for _, rl := range byNamespace[terms[i].Namespace] {
			if rl.covers(terms[i]) {
				terms[i].Released = true
				break
			}
		}
	}
	holders := map[termKey][]uuid.UUID{}
	for i, t := range terms {
		namespaces[t.Namespace] = struct{}{}
		holders[termKey{t.Namespace, t.Term}] = t.Holders
		if len(t.Holders) > 1 {
			res.report(limit, Violation{SplitTerm, t.Namespace, t.Term, fmt.Sprintf("held by %d candidates: %s", len(t.Holders), ids(t.Holders))})
		}
		if !t.OtherAcquiredAt.IsZero() {
			res.report(limit, Violation{SplitTerm, t.Namespace, t.Term, fmt.Sprintf("granted twice, at %s and at %s", stamp(t.AcquiredAt), stamp(t.OtherAcquiredAt))})
		}
		if i > 0 && terms[i-1].Namespace == t.Namespace && terms[i-1].Term == t.Term {
			res.report(limit, Violation{SplitTerm, t.Namespace, t.Term, "listed twice in the history"})
		}
	}
	c.checkOverlaps(&res, limit, terms)

	for _, s := range h.Seen {
		namespaces[s.Namespace] = struct{}{}
		high := int64(0)
		for _, term := range s.Terms {
			if term < high {
				res.report(limit, Violation{Backwards, s.Namespace, term, fmt.Sprintf("%s saw term %d after term %d", s.Observer, term, high)})
			}
			high = max(high, term)
		}
	}

	writes := slices.Clone(h.Writes)
	slices.SortFunc(writes, compareWrites)
	writes = slices.Compact(writes)
	res.Writes = len(writes)
	var (
		ns      string
		high    Write
		started bool
	)
	for i, w := range writes {
		namespaces[w.Namespace] = struct{}{}
		if !started || w.Namespace != ns {
			ns, high, started = w.Namespace, w, true
		} else {
			if prev := writes[i-1]; prev.Counter == w.Counter {
				res.report(limit, Violation{StaleWrite, w.Namespace, w.Term, fmt.Sprintf("write %d committed twice: by %s in term %d and by %s in term %d",
					w.Counter, prev.Leader, prev.Term, w.Leader, w.Term)})
			}
			if w.Term < high.Term {
				res.report(limit, Violation{StaleWrite, w.Namespace, w.Term, fmt.Sprintf("write %d by %s in term %d committed after write %d of term %d",
					w.Counter, w.Leader, w.Term, high.Counter, high.Term)})
			}
			if w.Term > high.Term {
				high = w
			}
		}
		if hs, ok := holders[termKey{w.Namespace, w.Term}]; ok && w.Leader != uuid.Nil && !slices.Contains(hs, w.Leader) {
			res.report(limit, Violation{ForeignWrite, w.Namespace, w.Term, fmt.Sprintf("write %d by %s, but term %d was held by %s", w.Counter, w.Leader, w.Term, ids(hs))})
		}
	}
	res.Namespaces = len(namespaces)
	return res
}

// checkOverlaps sweeps each namespace's terms in order, keeping the latest
// end among the earlier terms that were not released.
func (c Checker) checkOverlaps(res *Result, limit int, terms []Term) {
	var (
		ns       string
		prev     *Term // the previous term with a known start
		longest  *Term // the earlier unreleased term whose lease ends last
		startedN bool
	)
	for i := range terms {
		t := &terms[i]
		if !startedN || t.Namespace != ns {
			ns, prev, longest, startedN = t.Namespace, nil, nil, true
		}
		if !t.AcquiredAt.IsZero() {
			if prev != nil && t.AcquiredAt.Before(prev.AcquiredAt) {
				res.report(limit, Violation{Overlap, t.Namespace, t.Term, fmt.Sprintf("term %d began at %s, before term %d began at %s",
					t.Term, stamp(t.AcquiredAt), prev.Term, stamp(prev.AcquiredAt))})
			}
			if longest != nil && t.AcquiredAt.Before(longest.ExpiresAt) {
				res.report(limit, Violation{Overlap, t.Namespace, t.Term, fmt.Sprintf("term %d (%s) began at %s, while the lease of term %d (%s) ran until %s",
					t.Term, ids(t.Holders), stamp(t.AcquiredAt), longest.Term, ids(longest.Holders), stamp(longest.ExpiresAt))})
			}
			prev = t
		}
		if !t.Released && !t.ExpiresAt.IsZero() && (longest == nil || t.ExpiresAt.After(longest.ExpiresAt)) {
			longest = t
		}
	}
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

func ids(xs []uuid.UUID) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}
