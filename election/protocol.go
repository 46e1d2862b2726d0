package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/handoff"
)

// RegisterCandidate creates or refreshes the row of candidate id:
// last_heartbeat_at becomes the database clock's now and expires_at now plus
// the expiry window. A candidate is live, and listed by ListCandidates, until
// expires_at passes.
//
// It returns ErrInvalidCandidate for uuid.Nil and ErrNotMigrated before
// migrate.Up has run.
func (e *Election) RegisterCandidate(ctx context.Context, id uuid.UUID, opts ...CallOption) error {
	return e.register(ctx, "RegisterCandidate", id, opts)
}

// Heartbeat keeps candidate id live. It is RegisterCandidate under another
// name, and creates the row if it is missing.
func (e *Election) Heartbeat(ctx context.Context, id uuid.UUID, opts ...CallOption) error {
	return e.register(ctx, "Heartbeat", id, opts)
}

func (e *Election) register(ctx context.Context, op string, id uuid.UUID, opts []CallOption) error {
	if id == uuid.Nil {
		return fmt.Errorf("%w: %s", ErrInvalidCandidate, op)
	}
	return e.autocommit(ctx, op, opts, func(conn gorm.ConnPool, _ bool) error {
		_, err := conn.ExecContext(ctx, e.q.UpsertNow, e.namespace, id, e.d.DurationArg(e.expire),
			e.identity.Hostname, e.identity.PID, e.identity.Label)
		return err
	})
}

// Elect runs one round of the election for candidate id and returns the
// lease as it stands after the call, which may name another candidate.
//
// In one transaction it refreshes id's candidate row and locks the
// namespace's leader row (SELECT ... FOR UPDATE; SQLite's write lock). The
// lease goes to id when the seat is vacant, the lease has expired, or id
// already holds it; a live lease of another candidate is never preempted.
// Renewing keeps the term; every other grant increases it by one. When the
// leader row does not exist yet, id creates it with term 1; if another caller
// created it at the same moment, Elect locks the new row and decides again.
// A grant records the new term in the history (see History) in the same
// transaction, and a takeover of a lapsed lease records the old term as
// expired; renewals write nothing there.
//
// A candidate that holds the lease through this Election renews it with a
// single guarded statement (WHERE leader_id = id AND term = its term AND the
// lease is live), falling back to the full transaction when that changes
// nothing. A candidate that can only lose (another candidate's lease was
// live at the last reading) first reads the seat without locking it; if
// the lease is still live by the database clock, it refreshes its own row
// and returns without taking the lock.
func (e *Election) Elect(ctx context.Context, id uuid.UUID, opts ...CallOption) (Lease, error) {
	l, _, err := e.campaign(ctx, id, false, opts)
	return l, err
}

// campaign is Elect. With yield, a candidate whose renewal failed because
// its own term was vacated by someone else (an operator's VacateSeat, an
// UnregisterCandidate of its id) does not take the seat back in the same
// call, whether it is still vacant or another candidate took it since: it
// refreshes its row, returns the seat as read and reports yielded, so that
// its Elector can leave the seat to the other candidates for an interval
// (whyLost tells a vacate from a lapse). Elect itself never yields: the
// protocol gives a vacant seat to the caller.
func (e *Election) campaign(ctx context.Context, id uuid.UUID, yield bool, opts []CallOption) (_ Lease, yielded bool, _ error) {
	if id == uuid.Nil {
		return Lease{}, false, fmt.Errorf("%w: Elect", ErrInvalidCandidate)
	}
	var out Lease
	if prev, ok := e.cached(id); ok {
		renewed := false
		err := e.autocommit(ctx, "Elect", opts, func(conn gorm.ConnPool, _ bool) error {
			r, ok, err := e.d.Renew(ctx, conn, e.namespace, id, prev.Term, e.expire)
			if ok {
				renewed = true
				out = prev
				out.ExpiresAt = r.ExpiresAt
			}
			return err
		})
		if err != nil {
			return Lease{}, false, err
		}
		if renewed {
			e.remember(id, out)
			e.maybePrune(ctx, opts)
			return out, false, nil
		}
		e.forget(id)
		if yield {
			vacated := false
			err := e.autocommit(ctx, "Elect", opts, func(conn gorm.ConnPool, _ bool) error {
				s, err := e.readSeat(ctx, conn, dialect.NoLock)
				if err != nil || whyLost(s, id, prev) != whyVacated {
					return err
				}
				vacated, out = true, e.lease(s)
				return e.refreshAt(ctx, conn, id, s.now)
			})
			if err != nil {
				return Lease{}, false, err
			}
			if vacated {
				return out, true, nil
			}
		}
	}
	// Where the database runs Elect in one round trip (PostgreSQL,
	// MariaDB) or two calls (SQLite), outside a caller's transaction, that
	// is the way: it reads the seat unlocked first, in the same round trip,
	// and never locks a seat another candidate holds live (the contention
	// rule below), so it needs no reading of the seat beforehand.
	acquirer := dialect.AcquirerOf(e.d)
	if acquirer != nil && !inCallerTx(opts) {
		// The seat was last read free, or a handoff said it is changing
		// hands: the locked path is the one that can succeed, and the
		// vacating transaction may not have committed yet.
		l, done, err := e.acquire(ctx, acquirer, id, !e.heldByAnother(id), opts)
		if err != nil {
			return Lease{}, false, err
		}
		if done {
			e.remember(id, l)
			return l, false, nil
		}
	}
	// The contention rule: a candidate that can only lose (another holds a
	// lease that is live by the database clock) learns it from an unlocked
	// read, refreshes its own row, and returns. It takes no lock on the
	// seat, so it never queues behind the leader's renewal or behind a
	// transaction holding the seat, and the leader never waits on it. The
	// unlocked read is tried whenever the last reading showed another
	// candidate's live lease, even one that should have ended since (its
	// holder may have renewed it: a follower trying at the lease's edge
	// must not lock a renewed seat); a lease found ended costs that one
	// read more, and so is the Election's first call, which has no
	// reading yet. Otherwise (a seat read vacant, a handoff wake-up) the
	// locked path is the one that can succeed, and is taken straight away.
	// (After the fast path above, which read the seat, the locked path is
	// taken at once.)
	if acquirer == nil && e.heldByAnother(id) {
		lost := false
		err := e.autocommit(ctx, "Elect", opts, func(conn gorm.ConnPool, _ bool) error {
			s, err := e.readSeat(ctx, conn, dialect.NoLock)
			if err != nil || !s.live() || s.leader == id {
				return err
			}
			if err := e.refreshAt(ctx, conn, id, s.now); err != nil {
				return err
			}
			out, lost = e.lease(s), true
			return nil
		})
		if err != nil {
			return Lease{}, false, err
		}
		if lost {
			e.remember(id, out)
			return out, false, nil
		}
	}
	err := e.transaction(ctx, "Elect", opts, func(conn gorm.ConnPool, _ bool) error {
		var err error
		out, err = e.elect(ctx, conn, id)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	e.remember(id, out)
	// The leader prunes on its one-statement renewals (above), at most
	// every five expiry windows. A grant (a first one, a takeover, a
	// handoff) does not: the new leader's work starts sooner, and its
	// renewals prune soon enough.
	return out, false, nil
}

// acquire runs a, Elect's fast path (dialect.Acquirer), for id. It
// reports done with the lease after the call when the call settled Elect:
// the seat granted to id or renewed, or another candidate's live lease (no
// lock taken, id's row refreshed). A seat created by another caller at the
// same moment is decided by running it once more, as the protocol's retry
// of a conflicting creation. Otherwise (a seat that changed between the
// unlocked read and the lock, a creation that conflicted twice) nothing
// but id's row was written, and Elect's transaction decides. With lock
// the statement locks the seat whatever its unlocked reading shows (see
// dialect.AcquireArgs.Lock).
func (e *Election) acquire(ctx context.Context, a dialect.Acquirer, id uuid.UUID, lock bool, opts []CallOption) (_ Lease, done bool, _ error) {
	args := dialect.AcquireArgs{Namespace: e.namespace, ID: id, Expire: e.expire, Refresh: !e.rowsKept.Load(),
		Hostname: e.identity.Hostname, PID: e.identity.PID, Label: e.identity.Label, Lapsed: string(EndExpired),
		Lock: lock}
	pool := e.pool()
	for attempt := 0; attempt < 2; attempt++ {
		var r dialect.Acquired
		sent := time.Now()
		err := e.autocommit(ctx, "Elect", opts, func(conn gorm.ConnPool, _ bool) error {
			var err error
			r, err = a.Acquire(ctx, conn, pool, args)
			return err
		})
		if err != nil {
			return Lease{}, false, err
		}
		s := seat{now: r.Now, exists: r.Seat.Exists, term: r.Seat.Term, expires: r.Seat.ExpiresAt.Time, acquired: r.Seat.AcquiredAt.Time}
		if r.Seat.Leader.Valid && r.Seat.ExpiresAt.Valid {
			s.leader = r.Seat.Leader.UUID
		}
		switch {
		case r.Undecided:
		case r.Held:
			if r.Granted {
				e.log.Debug("election: new leader", "leader", id, "term", r.Term, "previous", s.leader)
			}
			s = seat{now: r.Now, exists: true, leader: id, term: r.Term, expires: r.ExpiresAt, acquired: r.AcquiredAt}
			e.noteSeat(s, sent, time.Now())
			return e.lease(s), true, nil
		case s.live() && s.leader != id:
			e.noteSeat(s, sent, time.Now())
			return e.lease(s), true, nil
		case !s.exists && attempt == 0:
			// Created by another caller at the same moment: decide again,
			// on the row as it is now.
			continue
		}
		break
	}
	return Lease{}, false, nil
}

// inCallerTx reports whether opts run the call in the caller's transaction
// (WithTx).
func inCallerTx(opts []CallOption) bool {
	var cc callConfig
	for _, o := range opts {
		if o != nil {
			o.applyCall(&cc)
		}
	}
	return cc.tx != nil
}

// electIfFree is Elect for a candidate that saw the seat free in a reading
// that may be stale (a Group's queued attempt): it reads the seat unlocked
// first and, when another candidate's lease is live, returns that lease
// without locking the seat or refreshing the candidate's row (the Group
// refreshes its rows in its rounds). Otherwise it is Elect, which then
// takes the locked path at once. When many processes start together, the
// attempts that lose a seat taken since the reading cost one read each,
// not a transaction queued on the seat's lock. Where the database has
// Elect's fast path, that is all one round trip: the statement reads the
// seat unlocked first, and locks it only when that reading shows it free.
func (e *Election) electIfFree(ctx context.Context, id uuid.UUID) (Lease, error) {
	if a := dialect.AcquirerOf(e.d); a != nil {
		l, done, err := e.acquire(ctx, a, id, false, nil)
		if err != nil {
			return Lease{}, err
		}
		if done {
			e.remember(id, l)
			return l, nil
		}
		return e.Elect(ctx, id)
	}
	var (
		out  Lease
		held bool
	)
	err := e.autocommit(ctx, "Elect", nil, func(conn gorm.ConnPool, _ bool) error {
		s, err := e.readSeat(ctx, conn, dialect.NoLock)
		if err != nil || !s.live() || s.leader == id {
			return err
		}
		out, held = e.lease(s), true
		return nil
	})
	if err != nil {
		return Lease{}, err
	}
	if held {
		e.remember(id, out)
		return out, nil
	}
	return e.Elect(ctx, id)
}

// wakeStale reads the seat unlocked for a candidate whose sit-out after
// giving up term gaveUp a handoff wake-up ended (machine.probeLocked), and
// reports whether the wake-up was stale: the seat is still in that term,
// so no candidate has taken it since, and the wake-up announced an
// earlier vacate, or the same one twice. It returns the seat as read. A
// vacate in progress shows a later term (its holder's), and Elect, which
// follows, waits for it on the locked path.
func (e *Election) wakeStale(ctx context.Context, gaveUp int64) (Lease, bool, error) {
	var s seat
	err := e.autocommit(ctx, "Elect", nil, func(conn gorm.ConnPool, _ bool) error {
		var err error
		s, err = e.readSeat(ctx, conn, dialect.NoLock)
		return err
	})
	if err != nil {
		return Lease{}, false, err
	}
	if s.term <= gaveUp {
		return e.lease(s), true, nil
	}
	e.forgetSeat() // the seat is changing hands: Elect takes the locked path
	return e.lease(s), false, nil
}

// elect is Elect's transaction.
func (e *Election) elect(ctx context.Context, conn gorm.ConnPool, id uuid.UUID) (Lease, error) {
	for attempt := 0; attempt < 2; attempt++ {
		s, err := e.readSeat(ctx, conn, dialect.UpdateLock)
		if err != nil {
			return Lease{}, err
		}
		s.now = s.now.Truncate(time.Microsecond)
		expires := s.now.Add(e.expire).Truncate(time.Microsecond)
		now, exp := e.d.TimeArg(s.now), e.d.TimeArg(expires)
		// Where the database has one statement for it, a seat that is
		// taken is granted, its term recorded and the candidate's row
		// refreshed in that statement (grantTerm).
		folded := e.q.GrantTerm != "" && s.exists && !s.live()
		if !folded {
			if err := e.refreshAt(ctx, conn, id, s.now); err != nil {
				return Lease{}, err
			}
		}
		mine := Lease{Namespace: e.namespace, Leader: id, ExpiresAt: expires}
		switch {
		case !s.exists:
			n, err := affected(conn.ExecContext(ctx, e.q.InsertLeader, e.namespace, id, exp, now, now))
			if err != nil {
				return Lease{}, err
			}
			if n == 0 {
				// Another candidate created the row since we looked: its
				// insert has committed, so lock the row and decide again.
				continue
			}
			if err := e.recordTerm(ctx, conn, id, 1, now); err != nil {
				return Lease{}, err
			}
			mine.Term, mine.AcquiredAt = 1, s.now
			e.log.Debug("election: first leader of namespace", "leader", id, "term", 1)
			return mine, nil
		case s.leader == id && s.live():
			if _, err := conn.ExecContext(ctx, e.q.KeepLease, exp, now, e.namespace, id, s.term); err != nil {
				return Lease{}, err
			}
			mine.Term, mine.AcquiredAt = s.term, s.acquired
			return mine, nil
		case !s.live():
			var (
				n   int64
				err error
			)
			if folded {
				n, err = e.grantTerm(ctx, conn, id, s.term, now, exp)
			} else {
				n, err = affected(conn.ExecContext(ctx, e.q.Grant, id, exp, now, now, e.namespace, s.term))
			}
			if err != nil {
				return Lease{}, err
			}
			if n != 1 {
				return Lease{}, fmt.Errorf("leader row of term %d changed under its lock", s.term)
			}
			// The history: a lapsed lease ended when it expired (a vacated
			// one was recorded as ended by the call that vacated it).
			if s.leader != uuid.Nil && s.term > 0 {
				if err := e.endTerm(ctx, conn, s.term, s.expires, EndExpired); err != nil {
					return Lease{}, err
				}
			}
			if !folded {
				if err := e.recordTerm(ctx, conn, id, s.term+1, now); err != nil {
					return Lease{}, err
				}
			}
			mine.Term, mine.AcquiredAt = s.term+1, s.now
			e.log.Debug("election: new leader", "leader", id, "term", mine.Term, "previous", s.leader)
			return mine, nil
		default:
			return e.lease(s), nil
		}
	}
	// The row was created twice under us, which only a snapshot older than
	// the other inserts (a caller's REPEATABLE READ transaction) explains:
	// report the leader as it can be read.
	s, err := e.readSeat(ctx, conn, dialect.NoLock)
	if err != nil {
		return Lease{}, err
	}
	return e.lease(s), nil
}

// grantTerm grants the seat, held in term by nobody live, to id with
// GrantTerm, which records the new term too; with RefreshGrantTerm, unless
// a Group's rounds keep the row (rowsKept), it refreshes id's row as
// refreshAt does, in the same statement. now and exp are the bound times of
// the grant, a reading of the database clock and one window later. It
// returns the rows the statement reports: 1 when the seat was granted.
func (e *Election) grantTerm(ctx context.Context, conn gorm.ConnPool, id uuid.UUID, term int64, now, exp any) (int64, error) {
	args := make([]any, 0, 19)
	q := e.q.GrantTerm
	if !e.rowsKept.Load() {
		q = e.q.RefreshGrantTerm
		args = append(args, e.namespace, id, now, now, exp, e.identity.Hostname, e.identity.PID, e.identity.Label)
	}
	args = append(args, id, exp, now, now, e.namespace, term, id, e.identity.Hostname, e.identity.PID, e.identity.Label, now)
	return affected(conn.ExecContext(ctx, q, args...))
}

// refreshAt creates or refreshes id's candidate row as of now, a reading of
// the database clock: last heartbeat now, expiry one window later (nothing
// on a Group's Election whose rounds keep the row: rowsKept). Both
// times are bound as computed here, to the microsecond the columns keep, so
// a Lease reports exactly what was stored.
func (e *Election) refreshAt(ctx context.Context, conn gorm.ConnPool, id uuid.UUID, now time.Time) error {
	if e.rowsKept.Load() {
		return nil // a Group's rounds keep the row (Election.rowsKept)
	}
	now = now.Truncate(time.Microsecond)
	at, exp := e.d.TimeArg(now), e.d.TimeArg(now.Add(e.expire).Truncate(time.Microsecond))
	_, err := conn.ExecContext(ctx, e.q.UpsertAt, e.namespace, id, at, at, exp, e.identity.Hostname, e.identity.PID, e.identity.Label)
	return err
}

func affected(res interface{ RowsAffected() (int64, error) }, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// UnregisterCandidate deletes candidate id's row. If id was the leader, it
// also vacates the seat, in whatever term id holds it, so another candidate
// can take over at once, instead of waiting for the lease to expire, and
// records the term as unregistered in the history. The term is kept; the
// next grant increases it. Unregistering an unknown candidate is not an
// error.
func (e *Election) UnregisterCandidate(ctx context.Context, id uuid.UUID, opts ...CallOption) error {
	if id == uuid.Nil {
		return fmt.Errorf("%w: UnregisterCandidate", ErrInvalidCandidate)
	}
	return e.vacate(ctx, "UnregisterCandidate", id, anyTerm, true, opts)
}

// Resign gives up the lease of candidate id, in whatever term id holds it,
// and leaves the seat vacant for the next Elect of any candidate; id stays a
// candidate. The history records the term as resigned. It is not an error
// when id does not lead.
func (e *Election) Resign(ctx context.Context, id uuid.UUID, opts ...CallOption) error {
	if id == uuid.Nil {
		return fmt.Errorf("%w: Resign", ErrInvalidCandidate)
	}
	return e.vacate(ctx, "Resign", id, anyTerm, false, opts)
}

// anyTerm, as vacate's term, vacates the seat in whatever term id holds it.
// Granted terms start at 1.
const anyTerm = 0

// vacate clears the seat in one transaction if id holds it: in term only,
// unless term is anyTerm, so that a caller that resigns the term it knows
// can never vacate a newer term of the same candidate. With unregister it
// also deletes id's candidate row. Vacating wakes the other candidates.
func (e *Election) vacate(ctx context.Context, op string, id uuid.UUID, term int64, unregister bool, opts []CallOption) error {
	reason := EndResigned
	if unregister {
		reason = EndUnregistered
	}
	if v := dialect.VacaterOf(e.d, inCallerTx(opts)); v != nil {
		// One round trip does it all (see dialect.Vacater): from the
		// leader's decision to the commit, and on PostgreSQL the
		// notification too. The other processes' candidates that the
		// statement did not tell are told once it has returned (wake),
		// from other connections, so the woken find the seat vacant.
		var (
			vacated bool
			wake    func()
			moved   bool
		)
		err := e.autocommit(ctx, op, opts, func(conn gorm.ConnPool, _ bool) error {
			var err error
			vacated, wake, err = v.Vacate(ctx, conn, e.pool(), dialect.VacateArgs{Namespace: e.namespace, ID: id, Term: term,
				Unregister: unregister, Reason: string(reason), Channel: handoff.Channel(e.schema), Payload: handoff.Payload(id, e.namespace)})
			if errors.Is(err, dialect.ErrSeatMoved) {
				moved, err = true, nil
			}
			return err
		})
		if moved {
			// The seat's row changed while the statement waited for its
			// lock (a new term granted to id, perhaps): decide on the row
			// as it is now, with the statements below.
			return e.vacateBySteps(ctx, op, id, term, unregister, reason, opts)
		}
		if err == nil && vacated {
			// announceVacancy's wake-up in this process, after the fact.
			handoff.Wake(e.hubKey(), handoff.Local, id)
			if wake != nil {
				wake()
			}
		}
		e.forget(id)
		return err
	}
	return e.vacateBySteps(ctx, op, id, term, unregister, reason, opts)
}

// vacateBySteps is vacate with the protocol's separate statements, in one
// transaction (the caller's, with WithTx).
func (e *Election) vacateBySteps(ctx context.Context, op string, id uuid.UUID, term int64, unregister bool, reason EndReason, opts []CallOption) error {
	// In a transaction of its own, the wake-ups that are still being sent
	// as it ends (the MySQL family's) are waited for after the commit, so
	// the seat's row lock is not held for them; the woken candidates then
	// find the seat vacant instead of waiting for it.
	deferred, sent := ctx, func() {}
	if ctx != nil { // do reports a nil one
		deferred, sent = dialect.DeferNotifyWaits(ctx)
	}
	defer sent()
	err := e.transaction(ctx, op, opts, func(conn gorm.ConnPool, callerTx bool) error {
		notifyCtx := deferred
		if callerTx {
			notifyCtx = ctx
		}
		var (
			n   int64
			err error
		)
		if term == anyTerm {
			n, err = affected(conn.ExecContext(ctx, e.q.Vacate, e.namespace, id))
		} else {
			n, err = affected(conn.ExecContext(ctx, e.q.VacateTerm, e.namespace, id, term))
		}
		if err != nil {
			return err
		}
		if unregister {
			if _, err := conn.ExecContext(ctx, e.q.DeleteCandidate, e.namespace, id); err != nil {
				return err
			}
		}
		if n > 0 {
			if _, err := conn.ExecContext(ctx, e.q.EndHeld, string(reason), e.namespace, id, e.namespace); err != nil {
				return err
			}
			return e.runVacated(notifyCtx, conn, id)
		}
		return nil
	})
	e.forget(id)
	return err
}
