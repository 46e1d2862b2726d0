package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// Window is the span of the timelines and of the summary's count of
// leadership changes: the last hour.
const Window = time.Hour

// timelineSteps is how many samples the fleet timeline takes over Window:
// one a minute.
const timelineSteps = 60

// Page sizes of the namespace table.
const (
	DefaultPerPage = 50
	MaxPerPage     = 500
)

// Query is what the page asks GET /api/state for: which namespaces the
// table shows, in what order, which page of them, and which namespace's
// detail. The zero Query is the first page of every namespace by name.
type Query struct {
	// Match keeps the namespaces whose name contains it, ignoring case;
	// with * (any text) or ? (one character) it is a pattern the whole
	// name must match instead.
	Match string
	// Unled keeps the namespaces without a leader.
	Unled bool
	// Leader keeps the namespaces whose leader it names: its id (or the
	// first 8 or more characters of it), its identity as Process.Key shows
	// it, its hostname, host/pid, or label.
	Leader string
	// Sort is the table's order: "namespace" (default), "leader" (by
	// identity, vacant seats last), "term", "lease" (lease left) or
	// "candidates"; Desc reverses it. Ties go by namespace, in its order
	// whatever the direction.
	Sort string
	Desc bool
	// Page is the page of the table, from 1; PerPage its size (default
	// DefaultPerPage, at most MaxPerPage).
	Page, PerPage int
	// Namespace, when set, asks for that namespace's Detail.
	Namespace string
}

// ParseQuery reads a Query from the parameters of GET /api/state: q, unled
// (1 or true), leader, sort, desc (1 or true), page, per, ns. It returns an
// error for a value it cannot use.
func ParseQuery(v url.Values) (Query, error) {
	q := Query{Match: v.Get("q"), Leader: v.Get("leader"), Sort: v.Get("sort"), Namespace: v.Get("ns")}
	var err error
	if q.Unled, err = boolParam(v, "unled"); err != nil {
		return Query{}, err
	}
	if q.Desc, err = boolParam(v, "desc"); err != nil {
		return Query{}, err
	}
	for _, p := range []struct {
		name string
		to   *int
	}{{"page", &q.Page}, {"per", &q.PerPage}} {
		if s := v.Get(p.name); s != "" {
			if *p.to, err = strconv.Atoi(s); err != nil || *p.to < 1 {
				return Query{}, fmt.Errorf("%s: want a positive number, got %q", p.name, s)
			}
		}
	}
	return q, q.check()
}

func boolParam(v url.Values, name string) (bool, error) {
	switch v.Get(name) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("%s: want 1 or 0", name)
}

// sorts are the table's orders.
var sorts = []string{"namespace", "leader", "term", "lease", "candidates"}

// check validates q and fills in its defaults.
func (q *Query) check() error {
	if q.Sort == "" {
		q.Sort = "namespace"
	}
	if !slices.Contains(sorts, q.Sort) {
		return fmt.Errorf("sort: want one of %s", strings.Join(sorts, ", "))
	}
	if q.Page < 1 {
		q.Page = 1
	}
	if q.PerPage < 1 {
		q.PerPage = DefaultPerPage
	}
	if q.PerPage > MaxPerPage {
		return fmt.Errorf("per: at most %d", MaxPerPage)
	}
	if q.Unled && q.Leader != "" {
		return errors.New("unled and leader exclude each other")
	}
	if q.Namespace != "" {
		if err := election.ValidateNamespace(q.Namespace); err != nil {
			return fmt.Errorf("ns: %w", err)
		}
	}
	if len(q.Match) > 1024 || len(q.Leader) > 1024 {
		return errors.New("q and leader: at most 1024 bytes")
	}
	return nil
}

// State is what GET /api/state returns: the summary, the processes and the
// fleet's timeline over every namespace, one page of the namespace table,
// and the detail of the namespace asked for. Reading it costs the database
// three statements (five with a detail), whatever the number of
// namespaces.
type State struct {
	// Now is the database clock when the state was read (UTC).
	Now time.Time `json:"now"`
	// RefreshMS is how often the page polls, in milliseconds.
	RefreshMS int64 `json:"refresh_ms"`
	// Resign tells whether POST /api/resign is enabled.
	Resign bool `json:"resign"`
	// WindowMS is the span of the timelines, ending at Now.
	WindowMS int64 `json:"window_ms"`
	// Summary counts over every namespace the dashboard shows.
	Summary Summary `json:"summary"`
	// Processes are the candidate identities live now or leading within
	// the window, sorted by Key.
	Processes []Process `json:"processes"`
	// Fleet is the timeline of the whole fleet over the window.
	Fleet Fleet `json:"fleet"`
	// Page describes the table's page: the query it answers and the
	// number of namespaces that match.
	Page Page `json:"page"`
	// Namespaces are the rows of the table's page.
	Namespaces []Namespace `json:"namespaces"`
	// Detail is the namespace the query asked for; nil when it asked for
	// none.
	Detail *Detail `json:"detail"`
}

// Summary counts over every namespace the dashboard shows.
type Summary struct {
	Namespaces int `json:"namespaces"`
	Led        int `json:"led"`
	Unled      int `json:"unled"`
	// Changes is the number of terms granted within the window.
	Changes int `json:"changes"`
	// Handoffs, Expiries and Vacates count the terms that ended within
	// the window: resigned or unregistered, expired, vacated by an
	// operator.
	Handoffs int `json:"handoffs"`
	Expiries int `json:"expiries"`
	Vacates  int `json:"vacates"`
	// Processes is the number of live candidate identities; Candidates
	// the number of live candidate rows.
	Processes  int `json:"processes"`
	Candidates int `json:"candidates"`
}

// Process is a candidate identity: usually one process.
type Process struct {
	// Key is the identity as the page shows it: host/pid [label].
	Key      string `json:"key"`
	Hostname string `json:"hostname"`
	PID      int    `json:"pid"`
	Label    string `json:"label"`
	// Leads is the number of seats it leads now; Candidacies the number of
	// namespaces it is a live candidate in (0 when it only led within the
	// window).
	Leads       int `json:"leads"`
	Candidacies int `json:"candidacies"`
}

// Fleet is the timeline of the whole fleet: for each process, how many
// seats it led at each minute of the window, and how many terms ended in
// each minute, by how.
type Fleet struct {
	// StepMS is the time between two samples; the last sample is Now.
	StepMS int64 `json:"step_ms"`
	// Lanes are the processes that led a seat within the window.
	Lanes []Lane `json:"lanes"`
	// Handoffs, Expiries and Vacates count the terms that ended in each
	// step (ending at the sample of the same index; the first is 0).
	Handoffs []int `json:"handoffs"`
	Expiries []int `json:"expiries"`
	Vacates  []int `json:"vacates"`
}

// Lane is one process in the fleet timeline.
type Lane struct {
	Key string `json:"key"`
	// Seats is the number of seats it led at each sample.
	Seats []int `json:"seats"`
}

// Page is the table's page.
type Page struct {
	Number  int    `json:"number"`
	PerPage int    `json:"per_page"`
	Pages   int    `json:"pages"`
	Total   int    `json:"total"` // namespaces that match the filters
	Sort    string `json:"sort"`
	Desc    bool   `json:"desc"`
	Match   string `json:"q"`
	Unled   bool   `json:"unled"`
	Leader  string `json:"leader"`
}

// Namespace is one row of the table.
type Namespace struct {
	Name string `json:"namespace"`
	// Leader is nil when the seat is vacant.
	Leader *Leader `json:"leader"`
	// Candidates is the number of live candidates.
	Candidates int `json:"candidates"`
	// VacantSince is, for a vacant seat, when its last term ended (or its
	// lease lapsed); nil when it is led or never was.
	VacantSince *time.Time `json:"vacant_since"`
	// Terms are the namespace's terms within the window, oldest first.
	Terms []Term `json:"terms"`
}

// Leader is a namespace's current lease and its holder.
type Leader struct {
	ID               uuid.UUID `json:"id"`
	Term             int64     `json:"term"`
	Key              string    `json:"key"` // the leader's Process.Key
	Hostname         string    `json:"hostname"`
	PID              int       `json:"pid"`
	Label            string    `json:"label"`
	AcquiredAt       time.Time `json:"acquired_at"`
	ExpiresAt        time.Time `json:"expires_at"`
	LeaseRemainingMS int64     `json:"lease_remaining_ms"` // by the database clock
	// LeaseWindowMS is the lease's full length as each renewal sets it: the
	// leader's expiry window (its Election's WithExpire), read from its
	// candidate row (expires_at minus last_heartbeat_at). Zero when the
	// leader has no live candidate row.
	LeaseWindowMS int64 `json:"lease_window_ms"`
}

// Detail is one namespace in full.
type Detail struct {
	Name string `json:"namespace"`
	// Missing is true when no namespace of that name exists; the other
	// fields are then empty.
	Missing bool `json:"missing"`
	// Leader is nil when the seat is vacant.
	Leader *Leader `json:"leader"`
	// Candidates are the live candidates, sorted by id.
	Candidates []Candidate `json:"candidates"`
	// History is the recent terms, newest first (WithHistory).
	History []Term `json:"history"`
	// Terms are the terms within the window, oldest first, for the
	// timeline.
	Terms []Term `json:"terms"`
}

// Candidate is a live candidate.
type Candidate struct {
	ID              uuid.UUID `json:"id"`
	Key             string    `json:"key"`
	Hostname        string    `json:"hostname"`
	PID             int       `json:"pid"`
	Label           string    `json:"label"`
	Leader          bool      `json:"leader"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

// Term is one term of a timeline or a history.
type Term struct {
	Term       int64     `json:"term"`
	Leader     uuid.UUID `json:"leader"`
	Key        string    `json:"key"` // the leader's Process.Key
	Hostname   string    `json:"hostname"`
	PID        int       `json:"pid"`
	Label      string    `json:"label"`
	AcquiredAt time.Time `json:"acquired_at"`
	// EndedAt is null while the term runs. A lease that lapsed ends at its
	// expiry, with EndReason "expired", even before the history records it.
	EndedAt   *time.Time `json:"ended_at"`
	EndReason string     `json:"end_reason"` // "" while running
}

// ReadState reads what /api/state serves for q: ListSeats, ListRecentTerms
// and ListProcesses (ListAllCandidates when WithNamespaces limits the
// page), and for a detail the namespace's Candidates and History. q is
// checked as ParseQuery checks it.
func (h *Handler) ReadState(ctx context.Context, q Query) (State, error) {
	if err := q.check(); err != nil {
		return State{}, fmt.Errorf("dashboard: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.timeout)
	defer cancel()
	base, err := h.election(ctx, election.DefaultNamespace)
	if err != nil {
		return State{}, err
	}
	list, err := base.ListSeats(ctx)
	if err != nil {
		return State{}, err
	}
	recent, err := base.ListRecentTerms(ctx, Window)
	if err != nil {
		return State{}, err
	}
	now := list.Now
	seats := list.Seats
	if h.cfg.namespaces != nil {
		seats = h.only(seats)
	}
	shown := make(map[string]bool, len(seats))
	for _, s := range seats {
		shown[s.Namespace] = true
	}
	// Every term within the window, by namespace; a lapsed lease ends its
	// term at its expiry.
	lapsed := map[string]time.Time{}
	for _, s := range seats {
		if !s.LapsedAt.IsZero() {
			lapsed[s.Namespace] = s.LapsedAt
		}
	}
	terms := map[string][]Term{}
	for _, t := range recent {
		if !shown[t.Namespace] {
			continue
		}
		tr := term(t)
		if at, ok := lapsed[t.Namespace]; ok && tr.EndedAt == nil && at.After(t.AcquiredAt) {
			end := at.UTC()
			tr.EndedAt, tr.EndReason = &end, string(election.EndExpired)
		}
		terms[t.Namespace] = append(terms[t.Namespace], tr)
	}

	st := State{Now: now.UTC(), RefreshMS: h.cfg.refresh.Milliseconds(), Resign: h.cfg.resign, WindowMS: Window.Milliseconds(),
		Processes: []Process{}, Namespaces: []Namespace{}}
	procs, cands, err := h.processes(ctx, base, shown)
	if err != nil {
		return State{}, err
	}
	st.Summary = summarize(seats, terms, now)
	st.Summary.Processes, st.Summary.Candidates = len(procs), cands
	st.Fleet, procs = fleet(terms, procs, now)
	st.Processes = procs

	rows := h.table(seats, q, now)
	st.Page = Page{Number: q.Page, PerPage: q.PerPage, Total: len(rows), Pages: max(1, (len(rows)+q.PerPage-1)/q.PerPage),
		Sort: q.Sort, Desc: q.Desc, Match: q.Match, Unled: q.Unled, Leader: q.Leader}
	from := min((q.Page-1)*q.PerPage, len(rows))
	for _, s := range rows[from:min(from+q.PerPage, len(rows))] {
		n := Namespace{Name: s.Namespace, Leader: leader(s, now), Candidates: s.Candidates, Terms: terms[s.Namespace]}
		if n.Terms == nil {
			n.Terms = []Term{}
		}
		if n.Leader == nil {
			n.VacantSince = vacantSince(s)
		}
		st.Namespaces = append(st.Namespaces, n)
	}
	if q.Namespace != "" {
		if st.Detail, err = h.detail(ctx, seats, terms, q.Namespace, now); err != nil {
			return State{}, err
		}
	}
	return st, nil
}

// only keeps the seats of the namespaces WithNamespaces names, each once,
// in their order; a namespace not in the tables yet is a vacant seat.
func (h *Handler) only(all []election.SeatInfo) []election.SeatInfo {
	by := make(map[string]election.SeatInfo, len(all))
	for _, s := range all {
		by[s.Namespace] = s
	}
	out := []election.SeatInfo{}
	for _, ns := range h.cfg.namespaces {
		s, ok := by[ns]
		if !ok {
			s = election.SeatInfo{Namespace: ns, Lease: election.Lease{Namespace: ns}}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b election.SeatInfo) int { return strings.Compare(a.Namespace, b.Namespace) })
	return slices.CompactFunc(out, func(a, b election.SeatInfo) bool { return a.Namespace == b.Namespace })
}

// processes reads the live candidate identities, with the seats each
// leads, and the number of live candidate rows: in one statement over the
// whole database, or, when WithNamespaces limits the page, from every
// live candidate of the namespaces shown.
func (h *Handler) processes(ctx context.Context, base *election.Election, shown map[string]bool) ([]Process, int, error) {
	var out []Process
	cands := 0
	if h.cfg.namespaces == nil {
		ps, err := base.ListProcesses(ctx)
		if err != nil {
			return nil, 0, err
		}
		for _, p := range ps {
			out = append(out, process(p.Identity, p.Leads, p.Candidacies))
			cands += p.Candidacies
		}
		return out, cands, nil
	}
	all, err := base.ListAllCandidates(ctx)
	if err != nil {
		return nil, 0, err
	}
	by := map[election.Identity]*Process{}
	for _, c := range all {
		if !shown[c.Namespace] {
			continue
		}
		cands++
		p := by[c.Identity]
		if p == nil {
			np := process(c.Identity, 0, 0)
			p = &np
			by[c.Identity] = p
		}
		p.Candidacies++
		if c.Leader {
			p.Leads++
		}
	}
	for _, p := range by {
		out = append(out, *p)
	}
	return out, cands, nil
}

func process(id election.Identity, leads, candidacies int) Process {
	return Process{Key: id.String(), Hostname: id.Hostname, PID: id.PID, Label: id.Label, Leads: leads, Candidacies: candidacies}
}

// summarize counts the seats and the terms of the window.
func summarize(seats []election.SeatInfo, terms map[string][]Term, now time.Time) Summary {
	s := Summary{Namespaces: len(seats)}
	for _, seat := range seats {
		if seat.Lease.Vacant() {
			s.Unled++
		} else {
			s.Led++
		}
	}
	from := now.Add(-Window)
	for _, ts := range terms {
		for _, t := range ts {
			if t.AcquiredAt.After(from) {
				s.Changes++
			}
			if t.EndedAt != nil && t.EndedAt.After(from) {
				switch kind(t.EndReason) {
				case "handoff":
					s.Handoffs++
				case "expiry":
					s.Expiries++
				case "vacate":
					s.Vacates++
				}
			}
		}
	}
	return s
}

// kind sorts end reasons for the timelines: a handoff (the leader gave the
// seat up), an expiry, or an operator's vacate.
func kind(reason string) string {
	switch election.EndReason(reason) {
	case election.EndResigned, election.EndUnregistered:
		return "handoff"
	case election.EndExpired:
		return "expiry"
	case election.EndVacated:
		return "vacate"
	}
	return ""
}

// fleet samples, once a minute over the window, how many seats each
// process led, and counts the terms that ended in each minute by kind. It
// returns the timeline and the processes, with those that led within the
// window but are no longer candidates added, sorted by key.
func fleet(terms map[string][]Term, procs []Process, now time.Time) (Fleet, []Process) {
	step := Window / timelineSteps
	f := Fleet{StepMS: step.Milliseconds(), Lanes: []Lane{},
		Handoffs: make([]int, timelineSteps+1), Expiries: make([]int, timelineSteps+1), Vacates: make([]int, timelineSteps+1)}
	from := now.Add(-Window)
	lanes := map[string][]int{}
	known := map[string]bool{}
	for _, p := range procs {
		known[p.Key] = true
	}
	for _, ts := range terms {
		for _, t := range ts {
			seats := lanes[t.Key]
			if seats == nil {
				seats = make([]int, timelineSteps+1)
				lanes[t.Key] = seats
			}
			for i := range seats {
				at := from.Add(time.Duration(i) * step)
				if !t.AcquiredAt.After(at) && (t.EndedAt == nil || t.EndedAt.After(at)) {
					seats[i]++
				}
			}
			if t.EndedAt != nil && t.EndedAt.After(from) {
				i := min(int(t.EndedAt.Sub(from)/step)+1, timelineSteps)
				switch kind(t.EndReason) {
				case "handoff":
					f.Handoffs[i]++
				case "expiry":
					f.Expiries[i]++
				case "vacate":
					f.Vacates[i]++
				}
			}
			if !known[t.Key] {
				known[t.Key] = true
				procs = append(procs, Process{Key: t.Key, Hostname: t.Hostname, PID: t.PID, Label: t.Label})
			}
		}
	}
	for key, seats := range lanes {
		f.Lanes = append(f.Lanes, Lane{Key: key, Seats: seats})
	}
	slices.SortFunc(f.Lanes, func(a, b Lane) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(procs, func(a, b Process) int { return strings.Compare(a.Key, b.Key) })
	if procs == nil {
		procs = []Process{}
	}
	return f, procs
}

// table filters and sorts the seats as q asks.
func (h *Handler) table(seats []election.SeatInfo, q Query, now time.Time) []election.SeatInfo {
	match := matcher(q.Match)
	var rows []election.SeatInfo
	for _, s := range seats {
		switch {
		case !match(s.Namespace):
		case q.Unled && !s.Lease.Vacant():
		case q.Leader != "" && (s.Lease.Vacant() || !leaderMatches(q.Leader, s.Lease.Leader, s.Identity)):
		default:
			rows = append(rows, s)
		}
	}
	cmp := func(a, b election.SeatInfo) int {
		switch q.Sort {
		case "leader":
			return strings.Compare(a.Identity.String(), b.Identity.String())
		case "term":
			return cmpInt(max(a.Lease.Term, a.Last.Term), max(b.Lease.Term, b.Last.Term))
		case "lease":
			return cmpInt(leaseLeft(a, now), leaseLeft(b, now))
		case "candidates":
			return cmpInt(int64(a.Candidates), int64(b.Candidates))
		}
		return 0
	}
	slices.SortStableFunc(rows, func(a, b election.SeatInfo) int {
		// By leader, vacant seats come last whichever the direction.
		if av, bv := a.Lease.Vacant(), b.Lease.Vacant(); q.Sort == "leader" && av != bv {
			if av {
				return 1
			}
			return -1
		}
		c := cmp(a, b)
		if q.Desc {
			c = -c
		}
		if c == 0 {
			c = strings.Compare(a.Namespace, b.Namespace)
		}
		return c
	})
	return rows
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// leaseLeft is the lease's time left, or -1 for a vacant seat.
func leaseLeft(s election.SeatInfo, now time.Time) int64 {
	if s.Lease.Vacant() {
		return -1
	}
	return max(s.Lease.ExpiresAt.Sub(now), 0).Milliseconds()
}

// matcher returns the test of Query.Match.
func matcher(pattern string) func(string) bool {
	if pattern == "" {
		return func(string) bool { return true }
	}
	if !strings.ContainsAny(pattern, "*?") {
		lower := strings.ToLower(pattern)
		return func(ns string) bool { return strings.Contains(strings.ToLower(ns), lower) }
	}
	var b strings.Builder
	b.WriteString("(?s)^")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	re := regexp.MustCompile(b.String())
	return re.MatchString
}

// leaderMatches reports whether x names the leader: its id or a prefix of
// at least 8 characters of it, its identity, hostname, host/pid or label.
func leaderMatches(x string, leader uuid.UUID, id election.Identity) bool {
	s := leader.String()
	return x == s || (len(x) >= 8 && strings.HasPrefix(s, strings.ToLower(x))) || x == id.String() ||
		x == id.Hostname || x == fmt.Sprintf("%s/%d", id.Hostname, id.PID) || (id.Label != "" && x == id.Label)
}

// leader is the seat's lease and holder, or nil when it is vacant.
func leader(s election.SeatInfo, now time.Time) *Leader {
	l := s.Lease
	if l.Vacant() {
		return nil
	}
	return &Leader{ID: l.Leader, Term: l.Term, Key: s.Identity.String(), Hostname: s.Identity.Hostname, PID: s.Identity.PID,
		Label: s.Identity.Label, AcquiredAt: l.AcquiredAt.UTC(), ExpiresAt: l.ExpiresAt.UTC(),
		LeaseRemainingMS: max(l.ExpiresAt.Sub(now), 0).Milliseconds(), LeaseWindowMS: s.LeaseWindow.Milliseconds()}
}

// vacantSince is when a vacant seat's last term ended or lapsed.
func vacantSince(s election.SeatInfo) *time.Time {
	var at time.Time
	switch {
	case !s.LapsedAt.IsZero():
		at = s.LapsedAt
	case s.Last.Ended():
		at = s.Last.EndedAt
	default:
		return nil
	}
	at = at.UTC()
	return &at
}

// term is a history record as the page shows it.
func term(t election.TermRecord) Term {
	tr := Term{Term: t.Term, Leader: t.Leader, Key: t.Identity.String(), Hostname: t.Identity.Hostname, PID: t.Identity.PID,
		Label: t.Identity.Label, AcquiredAt: t.AcquiredAt.UTC(), EndReason: string(t.EndReason)}
	if t.Ended() {
		end := t.EndedAt.UTC()
		tr.EndedAt = &end
	}
	return tr
}

// detail reads one namespace in full: its candidates and history (two
// statements); its seat and recent terms come from the fleet reads.
func (h *Handler) detail(ctx context.Context, seats []election.SeatInfo, terms map[string][]Term, ns string, now time.Time) (*Detail, error) {
	i, found := slices.BinarySearchFunc(seats, ns, func(s election.SeatInfo, ns string) int { return strings.Compare(s.Namespace, ns) })
	if !found {
		return &Detail{Name: ns, Missing: true, Candidates: []Candidate{}, History: []Term{}, Terms: []Term{}}, nil
	}
	s := seats[i]
	e, err := h.election(ctx, ns)
	if err != nil {
		return nil, err
	}
	cands, err := e.Candidates(ctx)
	if err != nil {
		return nil, err
	}
	hist, err := e.History(ctx, h.cfg.history)
	if err != nil {
		return nil, err
	}
	d := &Detail{Name: ns, Leader: leader(s, now), Candidates: []Candidate{}, History: []Term{}, Terms: terms[ns]}
	if d.Terms == nil {
		d.Terms = []Term{}
	}
	for _, c := range cands {
		d.Candidates = append(d.Candidates, Candidate{ID: c.ID, Key: c.Identity.String(), Hostname: c.Identity.Hostname, PID: c.Identity.PID,
			Label: c.Identity.Label, Leader: c.Leader, LastHeartbeatAt: c.LastHeartbeatAt.UTC()})
	}
	for _, t := range hist {
		d.History = append(d.History, term(t))
	}
	return d, nil
}
