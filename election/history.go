package election

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// EndReason says how a term ended, in the history.
type EndReason string

// How terms end.
const (
	// EndResigned: the leader gave the seat up (Resign, Elector.Resign).
	EndResigned EndReason = "resigned"
	// EndUnregistered: the leader unregistered (UnregisterCandidate, an
	// Elector's Run returning).
	EndUnregistered EndReason = "unregistered"
	// EndExpired: the lease lapsed without a renewal, and the next term
	// was granted (or an operator cleared the lapsed seat). EndedAt is the
	// lease's expiry.
	EndExpired EndReason = "expired"
	// EndVacated: an operator cleared the seat (VacateSeat).
	EndVacated EndReason = "vacated"
)

// TermRecord is one granted term of a namespace, as the history keeps it.
type TermRecord struct {
	// Namespace and Term identify the term.
	Namespace string
	Term      int64
	// Leader is the candidate the term was granted to.
	Leader uuid.UUID
	// Identity is the leader's identity when the term was granted.
	Identity Identity
	// AcquiredAt is when the term was granted (database clock, UTC).
	AcquiredAt time.Time
	// EndedAt is when the term ended (database clock, UTC); zero while it
	// has not been recorded as ended. A lease that lapses is recorded as
	// ended, at its expiry, only when the next term is granted.
	EndedAt time.Time
	// EndReason says how the term ended; empty while EndedAt is zero.
	EndReason EndReason
}

// Ended reports whether the term is recorded as ended.
func (t TermRecord) Ended() bool { return t.EndReason != "" }

// CandidateInfo is a live candidate as Candidates reports it.
type CandidateInfo struct {
	// ID is the candidate id.
	ID uuid.UUID
	// Identity is who the candidate is (see WithLabel).
	Identity Identity
	// RegisteredAt, LastHeartbeatAt and ExpiresAt are the candidate row's
	// times (database clock, UTC): first registration, last refresh, and
	// when it stops being live unless refreshed again.
	RegisteredAt    time.Time
	LastHeartbeatAt time.Time
	ExpiresAt       time.Time
	// Leader is true for the candidate holding the namespace's live lease.
	Leader bool
}

// recordTerm writes a granted term to the history, in the granting
// transaction: acquired is the bound time of the grant.
func (e *Election) recordTerm(ctx context.Context, conn gorm.ConnPool, id uuid.UUID, term int64, acquired any) error {
	_, err := conn.ExecContext(ctx, e.q.InsertTerm, e.namespace, term, id,
		e.identity.Hostname, e.identity.PID, e.identity.Label, acquired)
	return err
}

// endTerm records in the history that term ended at the given time.
func (e *Election) endTerm(ctx context.Context, conn gorm.ConnPool, term int64, at time.Time, reason EndReason) error {
	_, err := conn.ExecContext(ctx, e.q.EndTerm, e.d.TimeArg(at.Truncate(time.Microsecond)), string(reason), e.namespace, term)
	return err
}

// identityColumns scans the hostname, pid and label columns, which are
// NULL when an outer join found no row.
type identityColumns struct {
	host, label sql.NullString
	pid         sql.NullInt64
}

func (c identityColumns) identity() Identity {
	return Identity{Hostname: c.host.String, PID: int(c.pid.Int64), Label: c.label.String}
}

// LeaderInfo is the namespace's seat with who holds it.
type LeaderInfo struct {
	// Lease is the current lease, as Leader returns it.
	Lease Lease
	// Identity is the leader's identity, as its candidate row says; zero
	// when the seat is vacant or the row is gone.
	Identity Identity
}

// LeaderInfo returns the namespace's current lease, as Leader does, with
// the identity of its leader, in one query.
func (e *Election) LeaderInfo(ctx context.Context, opts ...CallOption) (LeaderInfo, error) {
	var out LeaderInfo
	err := e.autocommit(ctx, "LeaderInfo", opts, func(conn gorm.ConnPool, _ bool) error {
		var (
			now, exp, acq dialect.Time
			leader        uuid.NullUUID
			term          sql.NullInt64
			ident         identityColumns
		)
		sent := time.Now()
		err := conn.QueryRowContext(ctx, e.q.LeaderIdentity, e.namespace).
			Scan(&now, &leader, &term, &exp, &acq, &ident.host, &ident.pid, &ident.label)
		if err != nil {
			return err
		}
		s := seat{now: now.Time, exists: term.Valid, term: term.Int64, expires: exp.Time, acquired: acq.Time}
		if leader.Valid && exp.Valid {
			s.leader = leader.UUID
		}
		e.noteSeat(s, sent, time.Now())
		out = LeaderInfo{Lease: e.lease(s)}
		if !out.Lease.Vacant() {
			out.Identity = ident.identity()
		}
		return nil
	})
	if err != nil {
		return LeaderInfo{}, err
	}
	return out, nil
}

// Candidates returns the live candidates (expires_at later than the
// database clock's now) with their identity and times, ordered by id, as
// ListCandidates lists their ids. The slice is empty, not nil, when there
// are none.
func (e *Election) Candidates(ctx context.Context, opts ...CallOption) ([]CandidateInfo, error) {
	return queryAll(ctx, e, "Candidates", opts, e.q.Candidates, []any{e.namespace}, func(rows *sql.Rows) (CandidateInfo, error) {
		var c candidateColumns
		err := rows.Scan(c.dest()...)
		return c.info(), err
	})
}

// queryAll runs query with args in a call named op (in the caller's
// transaction with WithTx) and returns what scan makes of each row: empty,
// not nil, when there are none.
func queryAll[T any](ctx context.Context, e *Election, op string, opts []CallOption, query string, args []any,
	scan func(*sql.Rows) (T, error)) ([]T, error) {
	out := []T{}
	err := e.autocommit(ctx, op, opts, func(conn gorm.ConnPool, _ bool) error {
		out = out[:0]
		rows, err := conn.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// candidateColumns scans a candidate as the Candidates statements give it:
// candidate_id, hostname, pid, label, registered_at, last_heartbeat_at,
// expires_at, and 1 when it holds the live lease.
type candidateColumns struct {
	c            CandidateInfo
	ident        identityColumns
	reg, hb, exp dialect.Time
	leader       int64
}

func (k *candidateColumns) dest() []any {
	return []any{&k.c.ID, &k.ident.host, &k.ident.pid, &k.ident.label, &k.reg, &k.hb, &k.exp, &k.leader}
}

func (k *candidateColumns) info() CandidateInfo {
	k.c.Identity = k.ident.identity()
	k.c.RegisteredAt, k.c.LastHeartbeatAt, k.c.ExpiresAt = k.reg.Time, k.hb.Time, k.exp.Time
	k.c.Leader = k.leader != 0
	return k.c
}

// termColumns scans a term as the history statements give it: term,
// leader_id, hostname, pid, label, acquired_at, ended_at, end_reason.
type termColumns struct {
	t          TermRecord
	ident      identityColumns
	acq, ended dialect.Time
	reason     sql.NullString
}

func (k *termColumns) dest() []any {
	return []any{&k.t.Term, &k.t.Leader, &k.ident.host, &k.ident.pid, &k.ident.label, &k.acq, &k.ended, &k.reason}
}

func (k *termColumns) record() TermRecord {
	k.t.Identity = k.ident.identity()
	k.t.AcquiredAt, k.t.EndedAt, k.t.EndReason = k.acq.Time, k.ended.Time, EndReason(k.reason.String)
	return k.t
}

// History returns up to limit terms of the namespace, newest first. Every
// term granted since schema version 2 is there, written in the transaction
// that granted it, until Prune removes it (WithHistoryRetention); a term
// still running, or whose lapse no grant has followed yet, is not ended.
// Renewals do not change it. It returns ErrInvalidOption for a limit that
// is not positive.
func (e *Election) History(ctx context.Context, limit int, opts ...CallOption) ([]TermRecord, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: History limit must be positive, got %d", ErrInvalidOption, limit)
	}
	return queryAll(ctx, e, "History", opts, e.q.History, []any{e.namespace, limit}, func(rows *sql.Rows) (TermRecord, error) {
		k := termColumns{t: TermRecord{Namespace: e.namespace}}
		err := rows.Scan(k.dest()...)
		return k.record(), err
	})
}

// ListNamespaces lists the namespaces found in the Election's tables, sorted:
// every namespace with a leader row (held or vacant), a candidate row (live
// or expired and not yet pruned) or a term in the history. It is the
// operator's view of the whole database (or schema, with WithSchema); the
// Election's own namespace is listed only when it has rows. The slice is
// empty, not nil, when there are none.
func (e *Election) ListNamespaces(ctx context.Context, opts ...CallOption) ([]string, error) {
	return queryAll(ctx, e, "ListNamespaces", opts, e.q.Namespaces, nil, func(rows *sql.Rows) (ns string, err error) {
		err = rows.Scan(&ns)
		return ns, err
	})
}

// VacateSeat clears the namespace's seat, whoever holds it: the operator's
// way to move leadership on (as a "resign" command would). The history
// records the term as vacated (or as expired, if its lease had already
// lapsed), and the other candidates are woken as by a resignation. It
// returns the lease that was cleared, with Leader uuid.Nil when the seat
// was vacant and nothing changed.
//
// The old leader's term is over at once: Guard with its lease fails, its
// renewal fails, and its Elector (or Group) stops leading at its next
// round, before any new term. The seat goes to whichever candidate elects
// first. An Elector or Group whose seat was vacated by someone else sits
// out one interval before it competes again, so another live candidate
// takes the seat; when there is none, the old leader takes it back in a
// new term.
//
// To vacate only a lease that was looked at first (a confirmation), use
// VacateLease.
func (e *Election) VacateSeat(ctx context.Context, opts ...CallOption) (Lease, error) {
	return e.vacateSeat(ctx, "VacateSeat", Lease{}, opts)
}

// VacateLease is VacateSeat for one lease: it clears the seat only if it is
// still held by lease.Leader in lease.Term (live or lapsed), and otherwise
// changes nothing and returns an error matching ErrNotLeader, so that an
// operator who confirmed "vacate the term of X" never vacates a term that
// began since. It returns the lease that was cleared, as read under the
// seat's lock. lease must name a leader and a term (ErrInvalidOption), in
// the Election's namespace.
func (e *Election) VacateLease(ctx context.Context, lease Lease, opts ...CallOption) (Lease, error) {
	switch {
	case lease.Leader == uuid.Nil || lease.Term <= 0:
		return Lease{}, fmt.Errorf("%w: VacateLease: the lease names no leader and term", ErrInvalidOption)
	case lease.Namespace != "" && lease.Namespace != e.namespace:
		return Lease{}, fmt.Errorf("%w: VacateLease: lease of namespace %q, election of %q", ErrInvalidOption, lease.Namespace, e.namespace)
	}
	return e.vacateSeat(ctx, "VacateLease", lease, opts)
}

// vacateSeat is VacateSeat, and with a non-zero want VacateLease.
func (e *Election) vacateSeat(ctx context.Context, op string, want Lease, opts []CallOption) (Lease, error) {
	var out Lease
	err := e.transaction(ctx, op, opts, func(conn gorm.ConnPool, _ bool) error {
		out = Lease{Namespace: e.namespace}
		s, err := e.readSeat(ctx, conn, dialect.UpdateLock)
		if err != nil {
			return err
		}
		if want.Leader != uuid.Nil && (s.leader != want.Leader || s.term != want.Term) {
			return final("%w: %s: the seat is no longer held by %s in term %d", ErrNotLeader, op, want.Leader, want.Term)
		}
		if s.leader == uuid.Nil {
			return nil
		}
		n, err := affected(conn.ExecContext(ctx, e.q.VacateTerm, e.namespace, s.leader, s.term))
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("leader row of term %d changed under its lock", s.term)
		}
		ended, reason := s.now, EndVacated
		if !s.live() {
			ended, reason = s.expires, EndExpired
		}
		if err := e.endTerm(ctx, conn, s.term, ended, reason); err != nil {
			return err
		}
		out = Lease{Namespace: e.namespace, Leader: s.leader, Term: s.term, ExpiresAt: s.expires, AcquiredAt: s.acquired}
		return e.runVacated(ctx, conn, s.leader)
	})
	if err != nil {
		return Lease{}, err
	}
	e.forgetSeat()
	if !out.Vacant() {
		e.forget(out.Leader)
		e.log.Info("election: seat vacated by an operator", "leader", out.Leader, "term", out.Term)
	}
	return out, nil
}
