package election

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
)

// An Observer sees what the Electors and Groups of an Election do, for
// metrics and logs of one's own: each election round or attempt in a
// namespace (Attempt), each start and end of leadership
// (LeadershipStarted, LeadershipStopped), each step-down by the trust
// window (SteppedDown), and each handoff that wakes a follower
// (HandoffWake). Set it with WithObserver; package
// github.com/sqlelect/sqlelect/prometheus has one that exports Prometheus
// metrics.
//
// Observers cost no database round trip: they are told what the Elector
// or Group learnt anyway. An Elector and a Group call them the same way:
// synchronously, in the order the events happened, and never while
// holding a lock of theirs, so an observer may call their methods
// (IsLeader, Lease, Observed, Leading, even Resign or Leave). They should
// still return quickly: a slow observer delays the next event's report,
// and the goroutine that reports it may be the one running the rounds.
// They may be called concurrently (several Electors, or the drivers of
// several Elections, share an observer). Embed NopObserver to implement
// only the methods you need.
//
// Calls made directly on the Election (Elect, Resign, ...) are not
// observed; only Electors and Groups report.
type Observer interface {
	// Attempt is called after each election round of an Elector, and for
	// each namespace of a Group's round or attempt.
	Attempt(Attempt)
	// LeadershipStarted is called when an Elector or a Group starts
	// leading a namespace, before its OnStartedLeading runs.
	LeadershipStarted(Leadership)
	// LeadershipStopped is called when leadership of a namespace ends,
	// with the reason; Tenure is how long it lasted.
	LeadershipStopped(Leadership)
	// SteppedDown is called when leadership ends because its trust window
	// passed without a renewal, or a renewal came back after it (just
	// before the LeadershipStopped with reason StopSteppedDown).
	SteppedDown(Leadership)
	// HandoffWake is called when a follower wakes up early because another
	// candidate vacated the seat.
	HandoffWake(Wake)
}

// NopObserver is an Observer that does nothing. Embed it in an Observer of
// your own to implement only some of the methods.
type NopObserver struct{}

// Attempt implements Observer.
func (NopObserver) Attempt(Attempt) {}

// LeadershipStarted implements Observer.
func (NopObserver) LeadershipStarted(Leadership) {}

// LeadershipStopped implements Observer.
func (NopObserver) LeadershipStopped(Leadership) {}

// SteppedDown implements Observer.
func (NopObserver) SteppedDown(Leadership) {}

// HandoffWake implements Observer.
func (NopObserver) HandoffWake(Wake) {}

// Outcome is how an election round ended for the candidate.
type Outcome string

// Outcomes of an Attempt.
const (
	// OutcomeLed: the round granted the candidate a new term.
	OutcomeLed Outcome = "led"
	// OutcomeRenewed: the candidate led and the round renewed its lease.
	OutcomeRenewed Outcome = "renewed"
	// OutcomeFollower: another candidate leads, or the seat is vacant and
	// the candidate did not try to take it (after Resign).
	OutcomeFollower Outcome = "follower"
	// OutcomeError: the round failed; Attempt.Err says why.
	OutcomeError Outcome = "error"
	// OutcomeSuperseded: the round's answer came too late to act on,
	// and the candidate does not lead by it: the leadership it renewed
	// ended while it ran (the trust window ran out, Resign, a handover),
	// it granted a term while the candidate was resigning or stopping
	// (that term is vacated at once), or, in a Group, an attempt began
	// leading the namespace while the round ran. Lease is what the round
	// wrote or read.
	OutcomeSuperseded Outcome = "superseded"
	// OutcomeShed: a Group found the seat free and did not try it: its
	// rounds were slow (the database overloaded), and attempts on seats
	// are shed before renewals are. It tries again once its rounds are
	// quick.
	OutcomeShed Outcome = "shed"
)

// Attempt is one election round of an Elector, or what a Group's round or
// attempt did in one namespace.
type Attempt struct {
	// Namespace is the election's namespace.
	Namespace string
	// Candidate is the Elector's or Group's candidate id.
	Candidate uuid.UUID
	// Outcome is how the round ended.
	Outcome Outcome
	// Duration is how long the round's database calls took.
	Duration time.Duration
	// Lease is the lease the round saw (the zero Lease when it failed).
	Lease Lease
	// Err is the round's error when Outcome is OutcomeError, else nil.
	Err error
	// ErrorClass is ErrorClass(Err): "" when Err is nil.
	ErrorClass string
}

// StopReason says why an Elector or a Group stopped leading a namespace.
// Each is decided where it happens, and both drivers give the same one for
// the same cause.
type StopReason string

// Reasons for LeadershipStopped.
const (
	// StopResigned: Elector.Resign or Group.Resign.
	StopResigned StopReason = "resigned"
	// StopLeft: Group.Leave.
	StopLeft StopReason = "left"
	// StopBalanced: a Group with Balance handed the namespace over.
	StopBalanced StopReason = "balanced"
	// StopLost: the database named another leader or a new term, or the
	// lease lapsed before its renewal.
	StopLost StopReason = "lost"
	// StopVacated: another process vacated the term (an operator's
	// VacateSeat or VacateLease, an UnregisterCandidate of the candidate's
	// id); the candidate sits out one interval so that another takes the
	// seat.
	StopVacated StopReason = "vacated"
	// StopSteppedDown: the trust window passed without a renewal, or a
	// renewal returned after it.
	StopSteppedDown StopReason = "stepped_down"
	// StopShutdown: Run's context ended.
	StopShutdown StopReason = "shutdown"
	// StopOverloaded: a Group's rounds answered too slowly for it to renew
	// every seat it held before the trust window ends; it stopped leading
	// the seats it took last, without a statement (their leases lapse),
	// and takes seats again as its rounds become quick.
	StopOverloaded StopReason = "overloaded"
)

// StopReasons lists every StopReason, for metrics that declare their label
// values up front.
var StopReasons = []StopReason{StopResigned, StopLeft, StopBalanced, StopLost, StopVacated, StopSteppedDown, StopShutdown, StopOverloaded}

// Leadership is the start or the end of a leadership of a namespace.
type Leadership struct {
	// Namespace is the election's namespace.
	Namespace string
	// Candidate is the Elector's or Group's candidate id.
	Candidate uuid.UUID
	// Lease is the lease granted (at the start) or the last lease held (at
	// the end).
	Lease Lease
	// Reason is why leadership ended; "" at the start.
	Reason StopReason
	// Tenure is how long the leadership lasted, on the local monotonic
	// clock; zero at the start.
	Tenure time.Duration
}

// Wake is a follower woken by a handoff.
type Wake struct {
	// Namespace is the election's namespace.
	Namespace string
	// Candidate is the woken Elector's or Group's candidate id.
	Candidate uuid.UUID
	// Source is "local" when the seat was vacated in this process, "notify"
	// when a notification from the database announced it. Wake-ups
	// coalesce: on PostgreSQL a Resign or UnregisterCandidate in this
	// process wakes the process after its commit, and the pool's listener
	// may deliver the notification first, so its Source is "notify".
	Source string
}

// WithObserver sets the Observer of the Election's Electors and of the
// Groups made with it (default none, which costs nothing). See Observer
// for how it is called.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil Observer", ErrInvalidOption))
			return
		}
		c.observer = o
	})
}

// Error classes returned by ErrorClass, for metrics labels.
const (
	// ClassConflict: a transient conflict that outlasted the retries
	// (ErrConflict).
	ClassConflict = "conflict"
	// ClassNotMigrated: the election tables are missing (ErrNotMigrated).
	ClassNotMigrated = "not_migrated"
	// ClassTimeout: the call's deadline passed, or a network timeout.
	ClassTimeout = "timeout"
	// ClassCanceled: the call's context was cancelled.
	ClassCanceled = "canceled"
	// ClassUnreachable: the connection to the database failed or was cut.
	ClassUnreachable = "unreachable"
	// ClassReadOnly: the server accepts no writes (a standby, or a
	// primary set read-only): ErrReadOnly.
	ClassReadOnly = "read_only"
	// ClassPermission: the database user lacks a privilege the call needs
	// (ErrPermissionDenied).
	ClassPermission = "permission"
	// ClassInvalid: the call was given bad input (ErrInvalidOption,
	// ErrInvalidCandidate, ErrInvalidNamespace).
	ClassInvalid = "invalid"
	// ClassOther: any other error.
	ClassOther = "other"
)

// ErrorClass sorts an error returned by the election calls into a small,
// fixed set of classes (the Class constants), for a metrics label: "" for
// nil.
func ErrorClass(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrConflict):
		return ClassConflict
	case errors.Is(err, ErrNotMigrated):
		return ClassNotMigrated
	case errors.Is(err, ErrReadOnly):
		return ClassReadOnly
	case errors.Is(err, ErrPermissionDenied):
		return ClassPermission
	case errors.Is(err, ErrInvalidOption), errors.Is(err, ErrInvalidCandidate), errors.Is(err, ErrInvalidNamespace):
		return ClassInvalid
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTimeout
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.As(err, &ne):
		if ne.Timeout() {
			return ClassTimeout
		}
		return ClassUnreachable
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysqldriver.ErrInvalidConn),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return ClassUnreachable
	}
	return ClassOther
}

// reportLocked tells the observer of a call's outcome.
func (m *machine) reportLocked(r result, now time.Time, started, superseded bool, err error) {
	o := m.e.observer
	if o == nil {
		return
	}
	l := r.lease
	if r.observe && l.HeldBy(m.id) {
		l.Leader, l.Term = uuid.Nil, 0 // seen, not renewed
	}
	a := newAttempt(m.e.namespace, m.id, now.Sub(r.start), l, started, superseded, err)
	m.box.note(func() { o.Attempt(a) })
}

// newAttempt is the report of a round of candidate id in namespace ns that
// took d and left it with lease l (started: a new leadership; superseded:
// an answer not acted on) or err.
func newAttempt(ns string, id uuid.UUID, d time.Duration, l Lease, started, superseded bool, err error) Attempt {
	a := Attempt{Namespace: ns, Candidate: id, Duration: d, Lease: l}
	switch {
	case err != nil:
		a.Outcome, a.Err, a.ErrorClass, a.Lease = OutcomeError, err, ErrorClass(err), Lease{}
	case superseded:
		a.Outcome = OutcomeSuperseded
	case started:
		a.Outcome = OutcomeLed
	case l.HeldBy(id):
		a.Outcome = OutcomeRenewed
	default:
		a.Outcome = OutcomeFollower
	}
	return a
}
