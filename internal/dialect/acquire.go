package dialect

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// The one-namespace fast path: Elect and the vacating calls outside a
// caller's transaction in as few round trips as each database allows.
//
//   - PostgreSQL runs each as one statement, its parts as data-modifying
//     WITH items sharing the statement's snapshot.
//   - MariaDB runs each as one anonymous compound statement (BEGIN NOT
//     ATOMIC ... END), which holds its own transaction and rolls it back
//     on any error before the error is returned, so a pooled connection is
//     never left inside a transaction.
//   - SQLite runs each in one call of the driver that holds the
//     transaction (BEGIN IMMEDIATE ... COMMIT, several statements), on a
//     connection of its own that is rolled back, or discarded, when the
//     call fails; Elect reads the seat first.
//
// MySQL and TiDB have neither compound statements outside stored programs
// nor a way to write two tables in one INSERT: there, package election
// keeps its transactions.

// SeatRow is a namespace's leader row as a statement read it.
type SeatRow struct {
	// Exists is false when the namespace has no leader row.
	Exists bool
	// Leader is not Valid when the seat is vacant.
	Leader     uuid.NullUUID
	Term       int64
	ExpiresAt  Time
	AcquiredAt Time
}

// AcquireArgs are Elect's arguments, for Acquirer.Acquire.
type AcquireArgs struct {
	Namespace string
	ID        uuid.UUID
	// Expire is the expiry window: of the lease granted or renewed, and
	// of the candidate's row.
	Expire time.Duration
	// Refresh says to create or refresh the candidate's row (false on a
	// Group's Election, whose rounds keep it).
	Refresh bool
	// Hostname, PID and Label are the candidate's identity, written with
	// its row and with a granted term.
	Hostname string
	PID      int
	Label    string
	// Lapsed is the end reason recorded for a lapsed term taken over.
	Lapsed string
	// Lock asks for the seat's lock whatever the unlocked reading shows:
	// the candidate was told that the seat is changing hands (a handoff),
	// and the transaction vacating it may not have committed yet. Where
	// the call reads before it locks in separate calls (SQLite), a seat
	// found held is then left to the caller's locked path.
	Lock bool
}

// Acquired is what Acquire found and did.
type Acquired struct {
	// Now is the database clock, read after the seat's lock when the call
	// took it.
	Now time.Time
	// Seat is the seat before the call wrote it: as locked when the call
	// locked it, else as read without a lock (Exists false when there was
	// no row, or when the row could not be created: created by another
	// caller at the same moment).
	Seat SeatRow
	// Held is set when the candidate holds the seat after the call, in
	// Term, until ExpiresAt, granted at AcquiredAt (the database's times,
	// as stored).
	Held                  bool
	Term                  int64
	ExpiresAt, AcquiredAt time.Time
	// Granted is set when Held is for a new term: the seat was created,
	// vacant, or its lease had expired.
	Granted bool
	// Undecided is set when the call wrote nothing but, perhaps, the
	// candidate's row, and left Elect to the caller's locked path: the
	// seat changed between the unlocked read and the lock, or Lock was
	// asked where the read comes first (SQLite).
	Undecided bool
}

// Acquirer is Elect, outside a caller's transaction, in one round trip on
// PostgreSQL and MariaDB and two calls of the driver on SQLite.
//
// It reads the seat without a lock and, when another candidate holds a
// lease that is live by the database clock, neither locks nor writes the
// seat: it refreshes the candidate's row (Refresh) and reports the seat.
// Otherwise it locks the seat (creating the row when there is none) and
// decides on the row as locked, with the clock read after the lock: a
// vacant seat or a lapsed lease is granted in the next term (term 1 for a
// new row), with the term recorded in the history and a lapsed term
// recorded as ended at its expiry; the candidate's own live lease is
// renewed in its term. The candidate's row is refreshed with the same
// times, in the same transaction.
//
// When it reports neither Held nor a live lease of another candidate in
// Seat, nothing but the candidate's row was written, and the caller
// decides another way: for a seat created by another caller at the same
// moment (Seat.Exists false), by running Acquire once more (the protocol's
// retry); when Undecided, by its locked path.
type Acquirer interface {
	Acquire(ctx context.Context, conn gorm.ConnPool, pool *sql.DB, a AcquireArgs) (Acquired, error)
}

// AcquirerOf returns d's Acquirer, or nil when d has none (MySQL, TiDB, a
// SQLite driver that cannot run several statements in one call).
func AcquirerOf(d Dialect) Acquirer {
	if a, ok := d.(interface{ acquirer() Acquirer }); ok {
		return a.acquirer()
	}
	return nil
}

// VacateArgs are the arguments of a vacating call, for Vacater.Vacate.
type VacateArgs struct {
	Namespace string
	ID        uuid.UUID
	// Term is the term to vacate, or 0 for whatever term ID holds.
	Term int64
	// Unregister says to delete the candidate's row too.
	Unregister bool
	// Reason is the end reason recorded in the history.
	Reason string
	// Channel and Payload are the notification of the vacancy.
	Channel, Payload string
}

// Vacater is Resign and UnregisterCandidate, outside a caller's
// transaction (on PostgreSQL in one too), in one round trip: the seat
// cleared if ID holds it (in Term, unless 0), the candidate's row deleted
// (Unregister), the term recorded as ended, and the candidates of other
// processes told (PostgreSQL: pg_notify in the statement).
//
// vacated reports whether the seat was cleared. wake, when not nil, tells
// the candidates of other processes that the database does not tell in
// the statement (the MySQL family's KILL QUERY of their listeners, from
// other connections; SQLite's line in the notification file); the caller
// calls it once the call has returned, and it returns once they are told,
// within a bound.
//
// Vacate fails with ErrSeatMoved, having changed nothing but, perhaps,
// deleted the candidate's row, when the seat's row changed while the call
// waited for its lock (PostgreSQL): the caller then vacates the seat with
// separate statements, which read the row as it is now.
type Vacater interface {
	Vacate(ctx context.Context, conn gorm.ConnPool, pool *sql.DB, a VacateArgs) (vacated bool, wake func(), err error)
}

// ErrSeatMoved reports that a Vacater's call found the seat changed while
// it waited for the seat's lock, and left it as it was.
var ErrSeatMoved = errors.New("dialect: the seat changed while the vacate waited for its lock")

// VacaterOf returns d's Vacater for a call in a caller's transaction
// (callerTx) or outside one, or nil when d has none for it.
func VacaterOf(d Dialect, callerTx bool) Vacater {
	if v, ok := d.(interface{ vacater(callerTx bool) Vacater }); ok {
		return v.vacater(callerTx)
	}
	return nil
}

// acquiredRow scans the row an Acquire statement yields: db_now, the seat
// (SeatRow.dest), and the term held after the call, its lease's end, its
// grant time (all three NULL when the candidate holds nothing) and whether
// it was granted in this call.
type acquiredRow struct {
	now           Time
	seat          SeatRow
	term          sql.NullInt64
	expires, acqd Time
	granted       bool
	exists        sql.NullBool
	seatTerm      sql.NullInt64
}

func (r *acquiredRow) dest() []any {
	return []any{&r.now, &r.exists, &r.seat.Leader, &r.seatTerm, &r.seat.ExpiresAt, &r.seat.AcquiredAt,
		&r.term, &r.expires, &r.acqd, &r.granted}
}

func (r *acquiredRow) result() Acquired {
	r.seat.Exists = r.exists.Bool && r.seatTerm.Valid
	r.seat.Term = r.seatTerm.Int64
	out := Acquired{Now: r.now.Time, Seat: r.seat}
	if r.term.Valid {
		out.Held, out.Term, out.ExpiresAt, out.AcquiredAt, out.Granted = true, r.term.Int64, r.expires.Time, r.acqd.Time, r.granted
	}
	return out
}
