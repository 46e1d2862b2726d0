package election

import (
	"errors"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// Sentinel errors. Every error a call returns for one of these reasons
// matches the sentinel with errors.Is; its message says more.
var (
	// ErrInvalidCandidate is returned for a candidate id that is uuid.Nil.
	ErrInvalidCandidate = errors.New("election: invalid candidate id (uuid.Nil)")

	// ErrInvalidNamespace is returned by New for a namespace that is empty,
	// longer than MaxNamespaceLen bytes, not UTF-8, or contains a NUL byte.
	ErrInvalidNamespace = errors.New("election: invalid namespace")

	// ErrInvalidOption is returned for settings that do not make sense or do
	// not fit together: a nil database, a non-positive duration, an interval
	// that does not fit inside the expiry window, WithTx given something that
	// is not a transaction on the same kind of database.
	ErrInvalidOption = errors.New("election: invalid option")

	// ErrUnsafeDatabase is returned by New for a database handle whose
	// settings break elections under contention; the message names the
	// setting to add (or says to open the database with session.Open).
	ErrUnsafeDatabase = errors.New("election: database settings unsafe for elections")

	// ErrNotLeader is returned by Guard when the lease is no longer held:
	// another candidate leads, the term moved on, or the lease expired.
	ErrNotLeader = errors.New("election: not leader")

	// ErrNotMigrated is returned when the election tables do not exist.
	ErrNotMigrated = errors.New("election: election tables missing (run migrate.Up)")

	// ErrConflict wraps a transient database conflict (deadlock,
	// serialization failure, lock timeout, SQLITE_BUSY). Calls that own their
	// transaction retry those with a bounded backoff and return ErrConflict
	// only when every attempt failed. Calls made WithTx return it at once:
	// the database has then aborted or poisoned the caller's transaction,
	// which the caller must roll back and retry.
	ErrConflict = errors.New("election: transient conflict")

	// ErrReadOnly is returned by a call that had to write when the server
	// refused writes: a standby (connected to one by mistake, or a DSN
	// without target_session_attrs=read-write that reached one), or a
	// primary set read-only (PostgreSQL default_transaction_read_only,
	// MySQL/MariaDB read_only). It is not retried within the call; the
	// connection that answered is discarded, so a later call reaches the
	// server again on a new one. An Elector logs it at error level on every
	// failed round ("the database is read-only"): alert on it, since no
	// candidate can lead until the server accepts writes.
	ErrReadOnly = errors.New("election: database is read-only")

	// ErrPermissionDenied is returned by a call the database user lacks a
	// privilege for: MySQL, MariaDB and TiDB 1142 and 1143 (INSERT, UPDATE
	// or DELETE refused on an election table), 1044 (no access to the
	// database), PostgreSQL 42501. The message names the privilege and the
	// object as the server did. It is not retried within the call. On MySQL
	// and MariaDB, where a GRANT of privileges on a database reaches an open
	// session only at its next USE, session.Open's pool discards the
	// connection that answered, so the first call on a new connection after
	// the GRANT succeeds; PostgreSQL applies a GRANT to open sessions at
	// once. No candidate of that user can lead until it is granted: alert on
	// it.
	ErrPermissionDenied = errors.New("election: permission denied")
)

// deniedError is ErrPermissionDenied with what the server said was
// missing, read once by the dialect where the error is wrapped.
type deniedError struct {
	missing string // "" when the server did not say
	err     error  // wraps ErrPermissionDenied and the driver's error
}

func (d *deniedError) Error() string { return d.err.Error() }
func (d *deniedError) Unwrap() error { return d.err }

// missingPrivilege returns what the server said the database user lacks
// when err matches ErrPermissionDenied, for a log line or an alert: the
// privileges and the object on MySQL, MariaDB and TiDB ("INSERT, UPDATE on
// table `app`.`election_leaders`"), the object on PostgreSQL, which does
// not name the privilege ("a privilege on table election_leaders"); "" for
// any other error.
func missingPrivilege(err error) string {
	var d *deniedError
	if errors.As(err, &d) {
		return d.missing
	}
	return ""
}

// errUnsafe connects the dialect's error to the public sentinel.
var errUnsafe = dialect.ErrUnsafeSettings
