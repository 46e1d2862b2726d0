// Package migrate creates and upgrades the election schema.
//
// The schema is shipped as versioned plain SQL, one folder per database, in
// the form golang-migrate reads (NNNN_name.up.sql and NNNN_name.down.sql):
//
//	migrate/sql/postgres/
//	migrate/sql/mysql/
//	migrate/sql/sqlite/
//
// Teams that run goose, golang-migrate or atlas copy those files into their
// own migrations (or read them from Files). Everyone else calls Up once at
// start-up: it applies the same files, records each version in
// election_schema_migrations, and is safe when several processes start at
// once (a PostgreSQL advisory lock held by the transaction that runs the
// DDL, so that it also holds behind a pooler in transaction mode; a MySQL
// named lock; SQLite's write lock).
//
// On PostgreSQL the tables can live in a schema of their own (WithSchema,
// with election.WithSchema for the calls). The shipped files name the
// tables unqualified, so that they land in the first schema of the search
// path: to apply them with another tool into a schema, create the schema
// (the files do not) and run them with the search path set to it (for
// example options=-csearch_path=app in the migration tool's DSN, or SET
// search_path TO app at the top of the file). Versions applied that way are
// not recorded: Status reports them pending, and Up with the same schema
// finds the tables in place and records them.
package migrate

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/gormx"
)

//go:embed sql
var files embed.FS

// VersionsTable records which schema versions Up has applied.
const VersionsTable = dialect.VersionsTable

// ErrNoDatabase is returned when Up or Down is given a nil database or a
// handle bound to a transaction.
var ErrNoDatabase = errors.New("migrate: need a *gorm.DB connected to a database, not nil and not a transaction")

// Migration is one versioned schema change.
type Migration struct {
	// Version orders the migrations; it is the file name's numeric prefix.
	Version int64
	// Name is the rest of the file name, without .up.sql.
	Name string
	// Up and Down are the SQL statements, in order.
	Up, Down []string
}

// Files returns the embedded SQL files of a database: "postgres", "mysql" or
// "sqlite". The names follow golang-migrate's NNNN_name.up.sql convention.
func Files(database string) (fs.FS, error) {
	d, err := dialect.ByName(database)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return fs.Sub(files, path.Join("sql", d.Name()))
}

// Migrations returns the migrations of a database in version order.
func Migrations(database string) ([]Migration, error) {
	fsys, err := Files(database)
	if err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	byVersion := map[int64]*Migration{}
	for _, e := range entries {
		name := e.Name()
		var up bool
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			up = true
		case strings.HasSuffix(name, ".down.sql"):
		default:
			continue
		}
		prefix, rest, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migrate: file %s has no version prefix", name)
		}
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migrate: file %s: %w", name, err)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v}
			byVersion[v] = m
		}
		if up {
			m.Name = strings.TrimSuffix(rest, ".up.sql")
			m.Up = statements(string(body))
		} else {
			m.Down = statements(string(body))
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// statements splits a file at semicolons that end a line. The shipped files
// keep to that form: no semicolons inside statements.
func statements(body string) []string {
	var out []string
	for _, s := range strings.Split(body, ";\n") {
		if s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), ";")); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// An Option configures Up and Down.
type Option interface {
	apply(*options) error
}

type options struct {
	schema string
}

type optionFunc func(*options) error

func (f optionFunc) apply(o *options) error { return f(o) }

// WithSchema makes Up create the election tables, and the record of applied
// versions, in the PostgreSQL schema name (creating the schema when it does
// not exist), and Down drop them there; the schema itself is never dropped.
// Use the same name with election.WithSchema. The name is quoted as given:
// 1 to 63 bytes of UTF-8 without NUL bytes. On MySQL and SQLite, Up and Down
// return an error and change nothing: name another database in the DSN.
func WithSchema(name string) Option {
	return optionFunc(func(o *options) error {
		if err := dialect.ValidSchema(name); err != nil {
			return fmt.Errorf("migrate: WithSchema: %w", err)
		}
		o.schema = name
		return nil
	})
}

// Up creates or upgrades the election tables. It is idempotent, and safe to
// call from several processes at once: they wait for each other, and each
// version is applied once.
func Up(ctx context.Context, db *gorm.DB, opts ...Option) error {
	return run(ctx, db, opts, func(ctx context.Context, d dialect.Dialect, exec *sql.Conn, applied map[int64]bool, ms []Migration) error {
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			err := apply(ctx, d, exec, m)
			if err != nil && dialect.MigrationRace(d, err) {
				err = awaitRecorded(ctx, d, exec, m, err)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// apply runs m's statements and records its version.
func apply(ctx context.Context, d dialect.Dialect, exec *sql.Conn, m Migration) error {
	for _, stmt := range m.Up {
		if _, err := exec.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: version %d (%s): %w", m.Version, m.Name, err)
		}
	}
	if _, err := exec.ExecContext(ctx, dialect.Migrations(d).Record, m.Version, m.Name); err != nil {
		return fmt.Errorf("migrate: recording version %d: %w", m.Version, err)
	}
	return nil
}

// raceWait bounds how long Up waits for another node to record a version
// it is applying, and raceEvery how often it looks.
const (
	raceWait  = 60 * time.Second
	raceEvery = 100 * time.Millisecond
)

// awaitRecorded is Up's answer to a step that failed the way a step applied
// at the same time through another Galera node fails (its lock is the
// node's own): it waits, reading with wsrep_sync_wait so that the read sees
// every commit of the cluster, until that node records the version, and
// then goes on. If the version is not recorded within raceWait, the step's
// own error stands.
func awaitRecorded(ctx context.Context, d dialect.Dialect, exec *sql.Conn, m Migration, stepErr error) error {
	deadline := time.Now().Add(raceWait)
	recorded := dialect.Migrations(d).Recorded
	for {
		var n int
		err := exec.QueryRowContext(ctx, recorded, m.Version).Scan(&n)
		switch {
		case err != nil:
			return errors.Join(stepErr, err)
		case n > 0:
			return nil
		case time.Now().After(deadline):
			return stepErr
		}
		select {
		case <-ctx.Done():
			return errors.Join(stepErr, ctx.Err())
		case <-time.After(raceEvery):
		}
	}
}

// Down drops the election tables and the record of applied versions. Every
// election in the database is lost; it is meant for tests and uninstalls.
// It undoes the versions recorded as applied, newest first, and then always
// the first version, whose statements drop every election table if it
// exists: a schema created by another tool, or only partly, goes too.
func Down(ctx context.Context, db *gorm.DB, opts ...Option) error {
	return run(ctx, db, opts, func(ctx context.Context, d dialect.Dialect, exec *sql.Conn, applied map[int64]bool, ms []Migration) error {
		for i := len(ms) - 1; i >= 0; i-- {
			if i > 0 && !applied[ms[i].Version] {
				continue
			}
			for _, stmt := range ms[i].Down {
				if _, err := exec.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migrate: undoing version %d (%s): %w", ms[i].Version, ms[i].Name, err)
				}
			}
		}
		_, err := exec.ExecContext(ctx, dialect.Migrations(d).DropVersions)
		return err
	})
}

// target checks opts and db, and returns the options and db's dialect.
func target(db *gorm.DB, opts []Option) (options, dialect.Dialect, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			return o, nil, errors.New("migrate: nil Option")
		}
		if err := opt.apply(&o); err != nil {
			return o, nil, err
		}
	}
	if db == nil || db.Statement == nil {
		return o, nil, ErrNoDatabase
	}
	if gormx.InTransaction(db) {
		return o, nil, ErrNoDatabase
	}
	d, err := dialect.For(db)
	if err != nil {
		return o, nil, fmt.Errorf("migrate: %w", err)
	}
	if o.schema != "" {
		if _, err := dialect.InSchema(d, o.schema); err != nil {
			return o, nil, fmt.Errorf("migrate: WithSchema: %w", err)
		}
	}
	return o, d, nil
}

// connect takes a connection from db's pool and refines d by asking the
// server (dialect.Detect), then places d's tables in the schema o names.
func connect(ctx context.Context, db *gorm.DB, d dialect.Dialect, o options) (*sql.Conn, dialect.Dialect, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("migrate: connecting: %w", err)
	}
	if d, err = dialect.Detect(ctx, db, d); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	if o.schema != "" {
		if d, err = dialect.InSchema(d, o.schema); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("migrate: WithSchema: %w", err)
		}
	}
	return conn, d, nil
}

// applied reads the versions recorded as applied.
func applied(ctx context.Context, d dialect.Dialect, conn *sql.Conn) (map[int64]bool, error) {
	rows, err := conn.QueryContext(ctx, dialect.Migrations(d).Versions)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, rows.Err()
}

func run(ctx context.Context, db *gorm.DB, opts []Option, fn func(context.Context, dialect.Dialect, *sql.Conn, map[int64]bool, []Migration) error) (err error) {
	o, d, err := target(db, opts)
	if err != nil {
		return err
	}
	ms, err := Migrations(d.Name())
	if err != nil {
		return err
	}
	conn, d, err := connect(ctx, db, d, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	release, err := d.LockMigrations(ctx, conn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Read what other processes committed before reading the versions
	// applied (a Galera node's lock is its own).
	restore, err := dialect.SyncMigrationReads(ctx, d, conn)
	if err != nil {
		release(false)
		return fmt.Errorf("migrate: %w", err)
	}
	defer restore()
	defer func() {
		if rerr := release(err == nil); rerr != nil && err == nil {
			err = fmt.Errorf("migrate: releasing the migration lock: %w", rerr)
		}
	}()
	if o.schema != "" {
		// Inside the transaction that holds the migration lock (PostgreSQL
		// only, checked above): the shipped files name the tables
		// unqualified.
		if err := dialect.UseSchema(ctx, conn, o.schema); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, dialect.Migrations(d).CreateVersions); err != nil {
		return fmt.Errorf("migrate: creating %s: %w", VersionsTable, err)
	}
	done, err := applied(ctx, d, conn)
	if err != nil {
		return fmt.Errorf("migrate: reading %s: %w", VersionsTable, err)
	}
	return fn(ctx, d, conn, done, ms)
}

// State is a migration and whether it is recorded as applied.
type State struct {
	Migration
	// Applied is true when the version is recorded in VersionsTable.
	Applied bool
}

// Status returns the migrations of db's database in version order, each
// with whether Up recorded it as applied (in the schema WithSchema names).
// A database where Up never ran (no VersionsTable, or no such schema) has
// every migration pending; any other error reading the record is returned,
// never taken for "pending". Status changes nothing and takes no lock. It
// returns ErrNoDatabase for a nil handle or one bound to a transaction.
func Status(ctx context.Context, db *gorm.DB, opts ...Option) ([]State, error) {
	o, d, err := target(db, opts)
	if err != nil {
		return nil, err
	}
	ms, err := Migrations(d.Name())
	if err != nil {
		return nil, err
	}
	conn, d, err := connect(ctx, db, d, o)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	restore, err := dialect.SyncMigrationReads(ctx, d, conn)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer restore()
	done, err := applied(ctx, d, conn)
	if err != nil && d.Classify(err) != dialect.MissingTable {
		return nil, fmt.Errorf("migrate: reading %s: %w", VersionsTable, err)
	}
	out := make([]State, len(ms))
	for i, m := range ms {
		out[i] = State{Migration: m, Applied: done[m.Version]}
	}
	return out, nil
}
