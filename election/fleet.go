package election

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// The fleet reads: an operator's view of every namespace in the database
// at once (or in the schema, with WithSchema), each one statement whatever
// the number of namespaces. They only read, take no lock and write
// nothing; like ListNamespaces, they do not depend on the Election's own
// namespace. Tools that show many namespaces (the sqlelect command, the
// dashboard) use them in place of a LeaderInfo, Candidates and History per
// namespace.

// ValidateNamespace checks a namespace as New and ForNamespace do: it
// returns nil for a valid one, and otherwise an error matching
// ErrInvalidNamespace that says what is wrong without repeating the
// namespace.
func ValidateNamespace(ns string) error { return validNamespace(ns) }

// SeatInfo is one namespace's seat in ListSeats.
type SeatInfo struct {
	// Namespace is the namespace.
	Namespace string
	// Lease is the live lease, as Leader returns it: Leader is uuid.Nil
	// when the seat is vacant or its lease has lapsed.
	Lease Lease
	// Identity is the leader's identity while Lease names one: from its
	// candidate row, else as the history recorded it with the term.
	Identity Identity
	// LeaseWindow is the length the leader's renewals give its lease: its
	// candidate row's expiry minus its last heartbeat (the leader's
	// WithExpire). Zero when Lease is vacant or the leader has no
	// candidate row.
	LeaseWindow time.Duration
	// Candidates is the number of live candidates.
	Candidates int
	// LapsedAt is, for a seat that still names a leader whose lease has
	// expired, when it expired (database clock, UTC); zero otherwise. The
	// history records that term as ended only when the next one is
	// granted.
	LapsedAt time.Time
	// Last is the newest term granted in the namespace, as the history
	// keeps it (running or ended, with its leader's identity); Term is 0
	// when no term was ever granted, or its history row was pruned.
	Last TermRecord
}

// SeatList is what ListSeats returns.
type SeatList struct {
	// Now is the database clock when the seats were read (UTC).
	Now time.Time
	// Seats are every namespace with a leader row or a candidate row (live
	// or not yet pruned), sorted by namespace (byte order). Empty, not
	// nil, when there are none.
	Seats []SeatInfo
}

// ListSeats reads the seat of every namespace in one statement: its live
// lease and leader's identity, its number of live candidates, and its
// newest term. A namespace known only from its history (whose leader row
// was deleted by hand) is not listed; ListNamespaces lists it.
func (e *Election) ListSeats(ctx context.Context, opts ...CallOption) (SeatList, error) {
	out := SeatList{Seats: []SeatInfo{}}
	err := e.autocommit(ctx, "ListSeats", opts, func(conn gorm.ConnPool, _ bool) error {
		out.Seats = out.Seats[:0]
		rows, err := conn.QueryContext(ctx, e.fleet().Seats)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				now, exp, acq, hb, cexp dialect.Time
				ns                      string
				leader, lastLeader      uuid.NullUUID
				term, live              sql.NullInt64
				ident, lastIdent        identityColumns
				lastAcq, lastEnd        dialect.Time
				lastReason              sql.NullString
			)
			if err := rows.Scan(&now, &ns, &leader, &term, &exp, &acq, &ident.host, &ident.pid, &ident.label, &hb, &cexp,
				&lastLeader, &lastIdent.host, &lastIdent.pid, &lastIdent.label, &lastAcq, &lastEnd, &lastReason, &live); err != nil {
				return err
			}
			out.Now = now.Time
			s := seat{now: now.Time, exists: term.Valid, term: term.Int64, expires: exp.Time, acquired: acq.Time}
			if leader.Valid && exp.Valid {
				s.leader = leader.UUID
			}
			si := SeatInfo{Namespace: ns, Candidates: int(live.Int64)}
			if s.live() {
				si.Lease = Lease{Namespace: ns, Leader: s.leader, Term: s.term, ExpiresAt: s.expires, AcquiredAt: s.acquired}
				si.Identity = ident.identity()
				if !ident.host.Valid && lastLeader.UUID == s.leader {
					si.Identity = lastIdent.identity()
				}
				if hb.Valid && cexp.Valid {
					si.LeaseWindow = max(cexp.Time.Sub(hb.Time), 0)
				}
			} else {
				si.Lease = Lease{Namespace: ns}
				if s.leader != uuid.Nil {
					si.LapsedAt = s.expires
				}
			}
			if lastLeader.Valid {
				si.Last = TermRecord{Namespace: ns, Term: term.Int64, Leader: lastLeader.UUID, Identity: lastIdent.identity(),
					AcquiredAt: lastAcq.Time, EndedAt: lastEnd.Time, EndReason: EndReason(lastReason.String)}
			}
			out.Seats = append(out.Seats, si)
		}
		return rows.Err()
	})
	if err != nil {
		return SeatList{}, err
	}
	if out.Now.IsZero() {
		// No namespace yet: the clock still says when the tables were read.
		now, err := e.Now(ctx, opts...)
		if err != nil {
			return SeatList{}, err
		}
		out.Now = now
	}
	sort.Slice(out.Seats, func(i, j int) bool { return out.Seats[i].Namespace < out.Seats[j].Namespace })
	return out, nil
}

// NamespaceCandidate is a live candidate of ListAllCandidates, with its
// namespace.
type NamespaceCandidate struct {
	// Namespace is the namespace the candidate row is in.
	Namespace string
	CandidateInfo
}

// ListAllCandidates returns the live candidates of every namespace in one
// statement, as Candidates does for one, sorted by namespace (byte order)
// and id. The slice is empty, not nil, when there are none.
func (e *Election) ListAllCandidates(ctx context.Context, opts ...CallOption) ([]NamespaceCandidate, error) {
	var now dialect.Time
	out, err := queryAll(ctx, e, "ListAllCandidates", opts, e.fleet().Candidates, nil, func(rows *sql.Rows) (NamespaceCandidate, error) {
		var c NamespaceCandidate
		var k candidateColumns
		err := rows.Scan(append([]any{&now, &c.Namespace}, k.dest()...)...)
		c.CandidateInfo = k.info()
		return c, err
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out, err
}

// ProcessInfo is one candidate identity of ListProcesses: the live
// candidate rows that carry it, usually one process (a Group, or the
// Electors of one process that share a label).
type ProcessInfo struct {
	// Identity is the hostname, process id and label the rows carry.
	Identity Identity
	// Candidacies is the number of namespaces it is a live candidate in.
	Candidacies int
	// CandidateIDs is the number of distinct candidate ids among them: 1
	// for a Group, one per Elector otherwise.
	CandidateIDs int
	// Leads is the number of namespaces whose live lease it holds.
	Leads int
	// LastHeartbeatAt is its latest heartbeat (database clock, UTC).
	LastHeartbeatAt time.Time
}

// ListProcesses returns the live candidates grouped by identity, with how
// many seats each leads, in one statement: how leadership is spread over
// the processes. Sorted by identity (hostname, pid, label). The slice is
// empty, not nil, when there are none.
func (e *Election) ListProcesses(ctx context.Context, opts ...CallOption) ([]ProcessInfo, error) {
	out, err := queryAll(ctx, e, "ListProcesses", opts, e.fleet().Processes, nil, func(rows *sql.Rows) (ProcessInfo, error) {
		var (
			p       ProcessInfo
			ident   identityColumns
			now, hb dialect.Time
			n, ids  int64
			leads   sql.NullInt64
		)
		err := rows.Scan(&now, &ident.host, &ident.pid, &ident.label, &n, &ids, &leads, &hb)
		p.Identity = ident.identity()
		p.Candidacies, p.CandidateIDs, p.Leads, p.LastHeartbeatAt = int(n), int(ids), int(leads.Int64), hb.Time
		return p, err
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Identity, out[j].Identity
		if a.Hostname != b.Hostname {
			return a.Hostname < b.Hostname
		}
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		return a.Label < b.Label
	})
	return out, err
}

// MaxRecentTerms is the most terms of one namespace ListRecentTerms
// returns: the newest ones.
const MaxRecentTerms = 100

// ListRecentTerms returns, in one statement, the terms of every namespace
// that were running at some time within the last window by the database
// clock: those running now (or whose lapse no grant has followed yet, see
// TermRecord.EndedAt) and those that ended within the window, at most
// MaxRecentTerms per namespace (the newest), sorted by namespace (byte
// order) and term. It is the material of a timeline of the whole fleet. It
// returns ErrInvalidOption for a window that is not positive. The slice is
// empty, not nil, when there are none.
func (e *Election) ListRecentTerms(ctx context.Context, window time.Duration, opts ...CallOption) ([]TermRecord, error) {
	if window <= 0 {
		return nil, fmt.Errorf("%w: ListRecentTerms window must be positive, got %v", ErrInvalidOption, window)
	}
	var now dialect.Time
	out, err := queryAll(ctx, e, "ListRecentTerms", opts, e.fleet().Terms, []any{MaxRecentTerms, e.d.DurationArg(-window)},
		func(rows *sql.Rows) (TermRecord, error) {
			var k termColumns
			err := rows.Scan(append([]any{&now, &k.t.Namespace}, k.dest()...)...)
			return k.record(), err
		})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out, err
}

// fleet returns the fleet statements on the Election's dialect and schema.
func (e *Election) fleet() *dialect.FleetStatements { return dialect.Fleet(e.d) }
