package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	gormsqlite "gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// sqlite is SQLite, through mattn/go-sqlite3 (which works only in programs
// built with cgo) or modernc.org/sqlite (pure Go): sqlite_driver.go. It has
// no row locks: elections are serialized by the database's single write
// lock. Timestamps are stored
// as fixed-width UTC text with six fractional digits, so that comparing them
// as text orders them in time; the clock itself ticks in milliseconds.
//
// multi is set when the driver runs several statements in one call (with
// numbered, when each statement binds the call's arguments by number, as
// modernc.org/sqlite does, rather than taking the next ones in order, as
// mattn/go-sqlite3 does), and file is the path of the database's file (""
// in memory) when fileKnown: all found by detect on the Election's pool
// (sqlite_fast.go).
type sqlite struct {
	multi     bool
	numbered  bool
	file      string
	fileKnown bool
}

var _ Dialect = sqlite{}

const sqliteNow = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"

// sqliteLayout is how timestamps are written: the same shape as sqliteNow.
const sqliteLayout = "2006-01-02 15:04:05.000000"

var sqliteStatements = build(sqlite{})

func (sqlite) Name() string            { return "sqlite" }
func (sqlite) Statements() *Statements { return sqliteStatements }
func (sqlite) Rebind(q string) string  { return q }
func (sqlite) rebind(q string) string  { return q }
func (sqlite) now() string             { return sqliteNow }
func (sqlite) nowPlus() string {
	return "(strftime('%Y-%m-%d %H:%M:%f', 'now', ?) || '000')"
}
func (sqlite) plus(expr string) string {
	return "(strftime('%Y-%m-%d %H:%M:%f', " + expr + ", ?) || '000')"
}
func (sqlite) DurationArg(d time.Duration) any {
	return fmt.Sprintf("%+.3f seconds", d.Seconds())
}
func (sqlite) TimeArg(t time.Time) any { return t.UTC().Format(sqliteLayout) }

func (sqlite) upsertCandidate() string {
	return "ON CONFLICT (namespace, candidate_id) DO UPDATE SET last_heartbeat_at = excluded.last_heartbeat_at, expires_at = excluded.expires_at"
}

func (sqlite) upsert(keys, cols []string) string { return onConflictUpdate(keys, cols) }

func (sqlite) insertIgnore() string { return "ON CONFLICT (namespace) DO NOTHING" }

// freeBetween reads free_at, a virtual column with an index (schema
// version 3).
func (sqlite) freeBetween(lo, hi string) string {
	return "l.free_at > " + lo + " AND l.free_at < " + hi
}
func (sqlite) freeArgs(lo, hi any) []any { return []any{lo, hi} }

// selectLeader with UpdateLock reads the row with a write: an upsert that
// creates the namespace's row vacant with term 0 when it is missing, changes
// nothing when it exists, and returns it. A transaction that reads first and
// writes later can fail with SQLITE_BUSY without waiting when another
// connection wrote in between; writing first makes it wait for the database's
// write lock instead, as BEGIN IMMEDIATE does, and holding that lock is what
// serializes elections. Reading and locking in one statement saves the round
// trip a separate locking write would cost. The vacant row is what the
// schema's term default describes; the protocol grants it as term 1.
func (sqlite) selectLeader(lock Lock) string {
	if lock == UpdateLock {
		return "INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) " +
			"VALUES (?, NULL, 0, NULL, NULL, " + sqliteNow + ") ON CONFLICT (namespace) DO UPDATE SET term = term " +
			"RETURNING " + sqliteNow + ", leader_id, term, lease_expires_at, acquired_at"
	}
	return "SELECT " + sqliteNow + ", l.leader_id, l.term, l.lease_expires_at, l.acquired_at FROM (SELECT 1) d " +
		"LEFT JOIN election_leaders l ON l.namespace = ?"
}

func (d sqlite) Renew(ctx context.Context, conn gorm.ConnPool, ns string, id uuid.UUID, term int64, expire time.Duration) (Renewed, bool, error) {
	var exp Time
	err := conn.QueryRowContext(ctx,
		"UPDATE election_leaders SET lease_expires_at = "+d.nowPlus()+", updated_at = "+sqliteNow+
			" WHERE namespace = ? AND leader_id = ? AND term = ? AND lease_expires_at > "+sqliteNow+
			" RETURNING lease_expires_at",
		d.DurationArg(expire), ns, id, term).Scan(&exp)
	if errors.Is(err, sql.ErrNoRows) {
		return Renewed{}, false, nil
	}
	if err != nil {
		return Renewed{}, false, err
	}
	_, err = conn.ExecContext(ctx,
		"INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at) VALUES (?, ?, "+
			sqliteNow+", "+sqliteNow+", "+d.nowPlus()+") "+d.upsertCandidate(),
		ns, id, d.DurationArg(expire))
	if err != nil {
		return Renewed{}, false, err
	}
	return Renewed{ExpiresAt: exp.Time}, true, nil
}

func (sqlite) Classify(err error) Class {
	if c, ok := classifyMattn(err); ok {
		return c
	}
	if c, ok := classifyModernc(err); ok {
		return c
	}
	if err != nil && strings.Contains(err.Error(), "no such table") {
		return MissingTable
	}
	return Other
}

// Denied returns "": SQLite has no users, and so no privileges.
func (sqlite) Denied(error) string { return "" }

func (sqlite) Check(ctx context.Context, db *gorm.DB) (*sql.TxOptions, error) {
	drv := sqliteDriverOf(db)
	if drv != "" {
		if err := sqliteDriverUsable(drv); err != nil {
			return nil, err
		}
	}
	var mode string
	if err := db.WithContext(ctx).Raw("PRAGMA journal_mode").Row().Scan(&mode); err != nil {
		return nil, err
	}
	switch strings.ToLower(mode) {
	case "wal", "memory":
	default:
		return nil, fmt.Errorf("%w: sqlite journal_mode is %s, where readers and writers of several connections fail with \"database is locked\"; %s, or open it with session.Open",
			ErrUnsafeSettings, mode, sqliteSettingsHint(drv, "_journal_mode=WAL&_txlock=immediate&_busy_timeout=5000",
				"_pragma=journal_mode(WAL)&_txlock=immediate&_pragma=busy_timeout(5000)"))
	}
	var busy int64
	if err := db.WithContext(ctx).Raw("PRAGMA busy_timeout").Row().Scan(&busy); err != nil {
		return nil, err
	}
	if busy <= 0 {
		return nil, fmt.Errorf("%w: sqlite busy_timeout is 0, so any concurrent writer fails at once; %s",
			ErrUnsafeSettings, sqliteSettingsHint(drv, "_busy_timeout=5000", "_pragma=busy_timeout(5000)"))
	}
	return nil, nil
}

// retryPing: a first connection runs the DSN's PRAGMAs, and switching a
// new file to WAL needs a lock that the busy timeout does not wait for.
func (d sqlite) retryPing(err error) bool { return d.Classify(err) == Transient }

// LockMigrations begins an IMMEDIATE transaction on conn: SQLite's write
// lock serializes migrations, and its DDL is transactional.
func (sqlite) LockMigrations(ctx context.Context, conn *sql.Conn) (func(bool) error, error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, fmt.Errorf("taking the migration lock: %w", err)
	}
	return endTransaction(conn), nil
}

func (sqlite) Gorm(pool *sql.DB) gorm.Dialector {
	return &gormsqlite.Dialector{Conn: pool}
}

func (sqlite) CacheStatements() bool { return true }

// singleWriter marks SQLite as writing one transaction at a time
// (ConcurrentWriters).
func (sqlite) singleWriter() {}
