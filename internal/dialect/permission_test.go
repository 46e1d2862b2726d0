package dialect_test

import (
	"errors"
	"fmt"
	"testing"

	drv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// TestPermissionErrors: a missing privilege (MySQL, MariaDB and TiDB 1142,
// 1143, 1044; PostgreSQL 42501) is class Permission, and Denied reads what
// was refused from the server's message. The connection that answered is
// discarded on MySQL and MariaDB, which apply a GRANT of privileges on a
// database to an open session only at its next USE, and kept on
// PostgreSQL, which checks privileges at every statement; DisableDiscard
// keeps it everywhere.
func TestPermissionErrors(t *testing.T) {
	pg, err := dialect.ByName("postgres")
	if err != nil {
		t.Fatal(err)
	}
	my, tidb := dialect.MySQLForTest(false), dialect.MySQLForTest(true)
	for _, c := range []struct {
		name    string
		d       dialect.Dialect
		err     error
		denied  string
		discard bool
	}{
		{"MariaDB 1142", my, &drv.MySQLError{Number: 1142, SQLState: [5]byte{'4', '2', '0', '0', '0'},
			Message: "INSERT, UPDATE command denied to user 'app'@'10.0.0.5' for table `app`.`election_leaders`"},
			"INSERT, UPDATE on table `app`.`election_leaders`", true},
		{"MySQL 1142", my, &drv.MySQLError{Number: 1142,
			Message: "DELETE command denied to user 'app'@'localhost' for table 'election_candidates'"},
			"DELETE on table 'election_candidates'", true},
		{"1143", my, &drv.MySQLError{Number: 1143,
			Message: "UPDATE command denied to user 'app'@'%' for column 'term' in table 'election_leaders'"},
			"UPDATE on column 'term' in table 'election_leaders'", true},
		{"1044", my, &drv.MySQLError{Number: 1044,
			Message: "Access denied for user 'app'@'%' to database 'app'"},
			"access to database 'app'", true},
		{"TiDB 1142, wrapped", tidb, fmt.Errorf("election: Elect: %w", &drv.MySQLError{Number: 1142,
			Message: "INSERT command denied to user 'app'@'%' for table 'election_leaders'"}),
			"INSERT on table 'election_leaders'", true},
		{"PostgreSQL 42501", pg, &pgconn.PgError{Code: "42501",
			Message: "permission denied for table election_leaders"},
			"a privilege on table election_leaders", false},
		{"PostgreSQL 42501, another message", pg, &pgconn.PgError{Code: "42501",
			Message: "must be owner of table election_leaders"},
			"must be owner of table election_leaders", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.d.Classify(c.err); got != dialect.Permission {
				t.Errorf("Classify: %v, want Permission", got)
			}
			if got := c.d.Denied(c.err); got != c.denied {
				t.Errorf("Denied: %q, want %q", got, c.denied)
			}
			if got := dialect.Discard(c.d, c.err); got != c.discard {
				t.Errorf("Discard: %v, want %v", got, c.discard)
			}
			restore := dialect.DisableDiscard()
			defer restore()
			if dialect.Discard(c.d, c.err) {
				t.Error("Discard with DisableDiscard: true")
			}
		})
	}
	// Not a privilege error: another class, nothing denied.
	for _, c := range []struct {
		d   dialect.Dialect
		err error
	}{
		{my, &drv.MySQLError{Number: 1045, Message: "Access denied for user 'app'@'%' (using password: YES)"}},
		{my, &drv.MySQLError{Number: 1146, Message: "Table 'app.election_leaders' doesn't exist"}},
		{pg, &pgconn.PgError{Code: "42P01", Message: "relation \"election_leaders\" does not exist"}},
		{pg, errors.New("permission denied for table election_leaders")},
	} {
		if got := c.d.Classify(c.err); got == dialect.Permission {
			t.Errorf("Classify(%v): Permission", c.err)
		}
		if got := c.d.Denied(c.err); got != "" {
			t.Errorf("Denied(%v): %q, want \"\"", c.err, got)
		}
	}
}
