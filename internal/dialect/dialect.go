// Package dialect is the one place where PostgreSQL, MySQL/MariaDB and SQLite
// differ, and the home of the election protocol's SQL. statements.go writes
// the statements once, in portable SQL, and asks each database's file for
// the pieces that cannot be portable: the database clock, row locks and
// upserts. A Dialect gives the rest of the module those statements
// (Statements), the bound form of durations and times, the one-statement
// renewal, error classes and the settings a database needs.
package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// Lock is the strength of the row lock taken when reading the leader row.
type Lock int

const (
	// NoLock reads the row without locking it.
	NoLock Lock = iota
	// ShareLock locks the row against writers until the transaction ends.
	ShareLock
	// UpdateLock locks the row against writers and other lockers.
	UpdateLock
)

// Class sorts database errors into what the caller must do about them.
type Class int

const (
	// Other is any error the library does not treat specially.
	Other Class = iota
	// Transient is a deadlock, serialization failure, lock timeout or busy
	// database: the transaction can be retried from its start.
	Transient
	// MissingTable means the schema has not been created.
	MissingTable
	// ReadOnly means the server accepts no writes: a standby, or a primary
	// set read-only. The connection that answered so is discarded (see
	// Discard): a server that becomes writable again is reached on a new one.
	ReadOnly
	// Shutdown means the server is shutting down or not yet accepting
	// connections; the connection is discarded.
	Shutdown
	// Permission means the database user lacks a privilege the statement
	// needs (MySQL, MariaDB and TiDB 1142, 1143, 1044; PostgreSQL 42501).
	// Where the server applies a later GRANT to an open session only when
	// that session next runs USE (MySQL and MariaDB, for privileges on a
	// database), the connection is discarded (see Discard): a new one sees
	// the grant.
	Permission
)

// Renewed is the result of a successful single-statement lease renewal.
type Renewed struct {
	ExpiresAt time.Time
}

// Dialect is implemented once per database.
type Dialect interface {
	// Name is the dialect's name as GORM reports it: postgres, mysql or sqlite.
	Name() string
	// Gorm returns a GORM dialector running on pool.
	Gorm(pool *sql.DB) gorm.Dialector
	// Statements are the protocol's statements on this database, built
	// once. The value is shared and must not be changed.
	Statements() *Statements
	// Rebind rewrites ? markers into the driver's placeholder form, for the
	// statements built outside Statements (Migrations).
	Rebind(query string) string
	// DurationArg is the bound value a statement expects for a duration d.
	DurationArg(d time.Duration) any
	// TimeArg is the bound value for a timestamp column.
	TimeArg(t time.Time) any
	// Renew renews in one statement a lease the candidate holds with the given
	// term, and refreshes its candidate row. ok is false when the lease is not
	// held with that term or has expired; nothing is changed then.
	Renew(ctx context.Context, conn gorm.ConnPool, namespace string, id uuid.UUID, term int64, expire time.Duration) (r Renewed, ok bool, err error)
	// CacheStatements reports whether the library's statements should be
	// kept prepared: true where compiling a statement costs more than
	// running it (SQLite, in process).
	CacheStatements() bool
	// Classify sorts an error returned by the driver.
	Classify(err error) Class
	// Denied says what a Permission error refused, as the server named it:
	// the privileges and the object ("INSERT, UPDATE on table
	// `app`.`election_leaders`"). It returns "" for an error of another
	// class.
	Denied(err error) string
	// Check inspects the connection settings of db when an election is
	// created. It returns the options transactions owned by the library must
	// be begun with, or an error naming a setting that is unsafe.
	Check(ctx context.Context, db *gorm.DB) (*sql.TxOptions, error)
	// LockMigrations serializes schema changes across processes on the given
	// connection. release undoes it and must be called.
	LockMigrations(ctx context.Context, conn *sql.Conn) (release func(commit bool) error, err error)
}

// ErrUnsafeSettings is wrapped by errors from Check: the database handle is
// configured in a way that breaks elections under contention.
var ErrUnsafeSettings = errors.New("unsafe database settings")

// ErrSQLiteNeedsCgo is returned for SQLite through mattn/go-sqlite3 (a DSN
// with driver=mattn, or a handle opened on that driver) by a program built
// with CGO_ENABLED=0: mattn/go-sqlite3 is written in C and is then only a
// stub. Such a program opens SQLite with modernc.org/sqlite instead.
var ErrSQLiteNeedsCgo = errors.New("sqlite driver=mattn needs cgo: this program was built with CGO_ENABLED=0, " +
	"where mattn/go-sqlite3 is only a stub; use driver=modernc (pure Go, the default without cgo), " +
	"or build with CGO_ENABLED=1 and a C compiler")

// For returns the dialect of db, chosen once by the GORM dialector's name.
func For(db *gorm.DB) (Dialect, error) {
	if db == nil || db.Dialector == nil {
		return nil, errors.New("no database")
	}
	return ByName(db.Dialector.Name())
}

// Detect refines d, the dialect For chose by the GORM dialector's name, by
// asking the server what it is: on a MySQL connection, whether it is TiDB.
// It returns d itself for the other databases, without a query.
func Detect(ctx context.Context, db *gorm.DB, d Dialect) (Dialect, error) {
	if m, ok := d.(interface {
		detect(context.Context, *gorm.DB) (Dialect, error)
	}); ok {
		return m.detect(ctx, db)
	}
	return d, nil
}

// Fence makes a guarded transaction write the seat row it checked, where
// the database needs that for the transaction to conflict with a new term:
// on a Galera node, whose row locks other nodes do not see. It does nothing
// elsewhere. The row is written only if the candidate holds it in the term;
// the caller reads the seat afterwards to tell.
func Fence(ctx context.Context, d Dialect, conn gorm.ConnPool, ns string, id uuid.UUID, term int64) error {
	if fenceOff.Load() {
		return nil
	}
	if f, ok := d.(interface {
		fence(context.Context, gorm.ConnPool, string, uuid.UUID, int64) error
	}); ok {
		return f.fence(ctx, conn, ns, id, term)
	}
	return nil
}

// fenceOff is set by DisableFence.
var fenceOff atomic.Bool

// DisableFence makes Fence do nothing, on every database, until restore is
// called: a guarded transaction on a Galera node then holds only its
// node-local shared lock. It is a test hook, for the negative control of
// the test that proves the fence (a stale write that the fence stops must
// commit without it under the same conditions); nothing else calls it.
func DisableFence() (restore func()) {
	fenceOff.Store(true)
	return func() { fenceOff.Store(false) }
}

// MigrationRace reports whether err, from a migration step, may come from
// another process applying the same step at the same time where the
// migration lock cannot keep them apart (the node-local GET_LOCK of a
// Galera cluster). The caller then waits for that version to be recorded.
func MigrationRace(d Dialect, err error) bool {
	if m, ok := d.(interface{ migrationRace(error) bool }); ok {
		return m.migrationRace(err)
	}
	return false
}

// RetryPing reports whether err, from the first ping of a new pool, is
// worth retrying after a short pause: on SQLite, the "database is locked"
// a process gets while another one switches the same new file to WAL, a
// lock the busy timeout does not wait for.
func RetryPing(d Dialect, err error) bool {
	if r, ok := d.(interface{ retryPing(error) bool }); ok {
		return r.retryPing(err)
	}
	return false
}

// ByName returns the dialect called name.
func ByName(name string) (Dialect, error) {
	switch name {
	case "postgres":
		return postgres{}, nil
	case "mysql":
		return mysql{}, nil
	case "sqlite", "sqlite3":
		return sqlite{}, nil
	}
	return nil, fmt.Errorf("database %q is not supported (want postgres, mysql or sqlite)", name)
}

// Time scans a timestamp whatever form the driver returns it in: time.Time,
// or text as SQLite and MySQL without parseTime give it. The result is UTC.
type Time struct {
	Time  time.Time
	Valid bool
}

// The text layouts whose shape textLayout tells apart, and the others
// tried after them.
const (
	spaceLayout     = "2006-01-02 15:04:05.999999999"
	tLayout         = "2006-01-02T15:04:05.999999999"
	spaceZoneLayout = "2006-01-02 15:04:05.999999999Z07:00"
	tZoneLayout     = "2006-01-02T15:04:05.999999999Z07:00"
)

var textLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	spaceLayout,
	tLayout,
	tZoneLayout,
	spaceZoneLayout,
}

// textLayout is the layout s looks written in: its date and time separated
// by a space or a T, with or without a zone after the seconds.
func textLayout(s string) (string, bool) {
	const seconds = len("2006-01-02 15:04:05")
	if len(s) < seconds {
		return "", false
	}
	zone := strings.ContainsAny(s[seconds:], "+-Z")
	switch s[10] {
	case ' ':
		if zone {
			return spaceZoneLayout, true
		}
		return spaceLayout, true
	case 'T':
		if zone {
			return tZoneLayout, true
		}
		return tLayout, true
	}
	return "", false
}

// Scan implements sql.Scanner.
func (t *Time) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = Time{}
		return nil
	case time.Time:
		*t = Time{Time: v.UTC(), Valid: true}
		return nil
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	}
	return fmt.Errorf("cannot scan %T into a timestamp", src)
}

func (t *Time) parse(s string) error {
	// The layout the text's shape names first: trying them in turn cost
	// two failed parses, each allocating its error, for every timestamp
	// MariaDB returns as text, thousands in a Group's round.
	if layout, ok := textLayout(s); ok {
		if v, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			*t = Time{Time: v.UTC(), Valid: true}
			return nil
		}
	}
	for _, layout := range textLayouts {
		if v, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			*t = Time{Time: v.UTC(), Valid: true}
			return nil
		}
	}
	return fmt.Errorf("cannot parse timestamp %q", s)
}

// rebindDollar rewrites ? into $1, $2, ...
func rebindDollar(q string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// endTransaction returns the function that ends the transaction a
// LockMigrations began on conn: COMMIT when commit is set, else ROLLBACK.
func endTransaction(conn *sql.Conn) func(commit bool) error {
	return func(commit bool) error {
		stmt := "ROLLBACK"
		if commit {
			stmt = "COMMIT"
		}
		_, err := conn.ExecContext(context.Background(), stmt)
		return err
	}
}

// SyncMigrationReads readies conn, which holds the migration lock, to read
// the versions other processes recorded. On a Galera node the lock is the
// node's own, and a read may not yet see what another node committed: reads
// on conn then wait until the node has applied every commit of the cluster
// (wsrep_sync_wait), and restore sets the connection back as it was.
// Elsewhere it does nothing. Call restore when done with conn.
func SyncMigrationReads(ctx context.Context, d Dialect, conn *sql.Conn) (restore func(), err error) {
	if !Galera(d) {
		return func() {}, nil
	}
	if _, err := conn.ExecContext(ctx, galeraSyncReads); err != nil {
		return nil, err
	}
	return func() { _, _ = conn.ExecContext(context.Background(), galeraDefaultReads) }, nil
}

// ConcurrentWriters is how many writing transactions the library runs at
// once when it has several to run (a Group's vacates on shutdown): one on
// SQLite, which writes one transaction at a time; elsewhere a few, each on
// a connection of the pool, which may have fewer to give.
func ConcurrentWriters(d Dialect) int {
	if _, ok := d.(interface{ singleWriter() }); ok {
		return 1
	}
	return 4
}
