package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"gorm.io/gorm"
)

// tableRows is what the server counted for one table so far: rows
// inserted, updated or deleted, and rows read.
type tableRows struct {
	written, read int64
}

// rowCounts is a snapshot of the server's counts for the election tables,
// by table name.
type rowCounts map[string]tableRows

// sub returns c - earlier, table by table.
func (c rowCounts) sub(earlier rowCounts) rowCounts {
	out := rowCounts{}
	for t, r := range c {
		e := earlier[t]
		out[t] = tableRows{written: r.written - e.written, read: r.read - e.read}
	}
	return out
}

// total adds up every table.
func (c rowCounts) total() tableRows {
	var t tableRows
	for _, r := range c {
		t.written += r.written
		t.read += r.read
	}
	return t
}

// tables returns the table names, those with the most rows first.
func (c rowCounts) tables() []string {
	names := slices.Collect(maps.Keys(c))
	slices.SortFunc(names, func(a, b string) int {
		ra, rb := c[a], c[b]
		return cmp.Or(cmp.Compare(rb.written+rb.read, ra.written+ra.read), strings.Compare(a, b))
	})
	return names
}

// rowStats reads the server's own counts of rows written and read in the
// election tables (every table whose name begins with "election_",
// election_members included once the schema has it).
type rowStats struct {
	// how says where the counts come from, or why there are none.
	how string
	// query returns the counts; nil when the server keeps none.
	query func(ctx context.Context) (rowCounts, error)
	// restore undoes what setting the statistics up changed on the server.
	restore func()
}

// The statistics each database keeps, by -db.
var rowStatsFor = map[string]func(ctx context.Context, db *gorm.DB, enableUserstat bool) rowStats{
	"postgres": postgresRowStats,
	"mysql":    mysqlRowStats,
	"sqlite": func(context.Context, *gorm.DB, bool) rowStats {
		return rowStats{how: "n/a: SQLite keeps no statistics of rows read and written"}
	},
}

// postgresRowStats reads pg_stat_user_tables: n_tup_ins + n_tup_upd +
// n_tup_del as written, seq_tup_read + idx_tup_fetch as read. Each query
// runs in a transaction of its own, so its snapshot of the statistics is
// fresh (stats_fetch_consistency caches it for a transaction only).
// Server processes report their counts at most once a second (PostgreSQL
// 15 and later), so the counts lag by up to a second.
func postgresRowStats(_ context.Context, db *gorm.DB, _ bool) rowStats {
	return rowStats{
		how: "pg_stat_user_tables (n_tup_ins + n_tup_upd + n_tup_del written, seq_tup_read + idx_tup_fetch read); server processes report at most once a second",
		query: func(ctx context.Context) (rowCounts, error) {
			var rows []struct {
				Name    string
				Written int64
				Read    int64
			}
			err := db.WithContext(ctx).Raw(`SELECT relname AS name,
				n_tup_ins + n_tup_upd + n_tup_del AS written,
				COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) AS read
				FROM pg_stat_user_tables
				WHERE schemaname = current_schema() AND relname LIKE 'election\_%'`).Scan(&rows).Error
			out := rowCounts{}
			for _, r := range rows {
				out[r.Name] = tableRows{written: r.Written, read: r.Read}
			}
			return out, err
		},
	}
}

// mysqlRowStats reads performance_schema.table_io_waits_summary_by_table
// when performance_schema is on (COUNT_INSERT + COUNT_UPDATE +
// COUNT_DELETE written, COUNT_FETCH read), else MariaDB's
// information_schema.TABLE_STATISTICS when userstat is on (ROWS_CHANGED
// written, ROWS_READ read). With enableUserstat it turns userstat on for
// the run when both are off, and restore turns it off again.
func mysqlRowStats(ctx context.Context, db *gorm.DB, enableUserstat bool) rowStats {
	variable := func(name string) string {
		var row struct {
			VariableName string `gorm:"column:Variable_name"`
			Value        string `gorm:"column:Value"`
		}
		if err := db.WithContext(ctx).Raw("SHOW GLOBAL VARIABLES LIKE ?", name).Scan(&row).Error; err != nil {
			return ""
		}
		return strings.ToUpper(row.Value)
	}
	type counts struct {
		Name    string
		Written int64
		Read    int64
	}
	query := func(text string) func(ctx context.Context) (rowCounts, error) {
		return func(ctx context.Context) (rowCounts, error) {
			var rows []counts
			err := db.WithContext(ctx).Raw(text).Scan(&rows).Error
			out := rowCounts{}
			for _, r := range rows {
				out[r.Name] = tableRows{written: r.Written, read: r.Read}
			}
			return out, err
		}
	}
	if variable("performance_schema") == "ON" {
		return rowStats{
			how: "performance_schema.table_io_waits_summary_by_table (COUNT_INSERT + COUNT_UPDATE + COUNT_DELETE written, COUNT_FETCH read)",
			query: query(`SELECT OBJECT_NAME AS name, COUNT_INSERT + COUNT_UPDATE + COUNT_DELETE AS written, COUNT_FETCH AS ` + "`read`" + `
				FROM performance_schema.table_io_waits_summary_by_table
				WHERE OBJECT_SCHEMA = DATABASE() AND OBJECT_NAME LIKE 'election\_%'`),
		}
	}
	stats := `SELECT TABLE_NAME AS name, ROWS_CHANGED AS written, ROWS_READ AS ` + "`read`" + `
		FROM information_schema.TABLE_STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'election\_%'`
	how := "information_schema.TABLE_STATISTICS (ROWS_CHANGED written, ROWS_READ read)"
	switch variable("userstat") {
	case "ON", "1":
		return rowStats{how: how, query: query(stats)}
	case "":
		return rowStats{how: "n/a: the server has neither performance_schema nor userstat (MariaDB's TABLE_STATISTICS)"}
	}
	if !enableUserstat {
		return rowStats{how: "n/a: performance_schema and userstat are off on this server (-mysql-userstat turns userstat on for the run)"}
	}
	if err := db.WithContext(ctx).Exec("SET GLOBAL userstat = 1").Error; err != nil {
		return rowStats{how: fmt.Sprintf("n/a: performance_schema and userstat are off, and turning userstat on failed: %v", err)}
	}
	return rowStats{
		how:   how + "; userstat turned on for the run",
		query: query(stats),
		restore: func() {
			if err := db.Exec("SET GLOBAL userstat = 0").Error; err != nil {
				fmt.Printf("turning userstat off again failed: %v: run SET GLOBAL userstat = 0\n", err)
			}
		},
	}
}

// ownDatabase makes sure the server has a database called name, creating
// it if missing, and returns dsn pointing at it and whether it was created.
// Measuring in a database of its own keeps the server's row counts of the
// election tables to the harness's processes.
func ownDatabase(ctx context.Context, db *gorm.DB, dbName, dsn, name string) (string, bool, error) {
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return "", false, fmt.Errorf("-database %q: use lower-case letters, digits and _", name)
		}
	}
	exists, create := databaseSQL[dbName].exists, databaseSQL[dbName].create
	if exists == "" {
		return "", false, fmt.Errorf("-database: not for %s", dbName)
	}
	var n int64
	if err := db.WithContext(ctx).Raw(exists, name).Scan(&n).Error; err != nil {
		return "", false, err
	}
	created := false
	if n == 0 {
		if err := db.WithContext(ctx).Exec(create + name).Error; err != nil {
			return "", false, fmt.Errorf("creating database %s: %w", name, err)
		}
		created = true
	}
	out, err := withDatabase(dsn, name)
	return out, created, err
}

// databaseSQL is how to find and create a database, by -db.
var databaseSQL = map[string]struct{ exists, create, drop string }{
	"postgres": {"SELECT COUNT(*) FROM pg_database WHERE datname = ?", "CREATE DATABASE ", "DROP DATABASE IF EXISTS %s WITH (FORCE)"},
	"mysql":    {"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", "CREATE DATABASE ", "DROP DATABASE IF EXISTS %s"},
}

// withDatabase returns dsn naming database name instead: a postgres:// URL,
// or a MySQL DSN in the mysql:// or the driver's user@tcp(host)/db form.
func withDatabase(dsn, name string) (string, error) {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("cannot parse the postgres DSN")
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	at := strings.Index(dsn, ")/")
	if strings.Contains(dsn, "@tcp(") && at >= 0 {
		rest := dsn[at+2:]
		if q := strings.IndexByte(rest, '?'); q >= 0 {
			return dsn[:at+2] + name + rest[q:], nil
		}
		return dsn[:at+2] + name, nil
	}
	return "", errors.New("-database needs a postgres:// URL or a MySQL DSN with @tcp(host:port)/db; -database '' measures in the DSN's database")
}
