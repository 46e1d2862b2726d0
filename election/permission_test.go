package election

import (
	"context"
	"errors"
	"fmt"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// TestPermissionDeniedWrapped: a driver's privilege error comes out of a
// call as ErrPermissionDenied, class "permission", with the server's own
// message kept, and missingPrivilege says what the user lacks (for the
// Elector's log line). Other errors have nothing missing.
func TestPermissionDeniedWrapped(t *testing.T) {
	pg, err := dialect.ByName("postgres")
	if err != nil {
		t.Fatal(err)
	}
	my, err := dialect.ByName("mysql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		d       dialect.Dialect
		err     error
		missing string
	}{
		{my, &mysqldriver.MySQLError{Number: 1142,
			Message: "INSERT, UPDATE command denied to user 'app'@'10.0.0.5' for table `app`.`election_candidates`"},
			"INSERT, UPDATE on table `app`.`election_candidates`"},
		{pg, &pgconn.PgError{Code: "42501", Message: "permission denied for table election_leaders"},
			"a privilege on table election_leaders"},
	} {
		e := &Election{d: c.d}
		got := e.wrap(ctx, "Elect", c.err, false)
		if !errors.Is(got, ErrPermissionDenied) {
			t.Errorf("%v: %v, want ErrPermissionDenied", c.err, got)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%v: the driver's error is not kept in %v", c.err, got)
		}
		if class := ErrorClass(got); class != ClassPermission {
			t.Errorf("%v: class %q, want %q", got, class, ClassPermission)
		}
		wrapped := fmt.Errorf("election: round: %w", got)
		if m := missingPrivilege(wrapped); m != c.missing {
			t.Errorf("missingPrivilege(%v) = %q, want %q", wrapped, m, c.missing)
		}
		t.Logf("%v (missing: %s)", got, missingPrivilege(got))
	}
	for _, err := range []error{
		nil,
		ErrPermissionDenied, // no server message with it
		fmt.Errorf("election: Elect: %w", ErrReadOnly),
		(&Election{d: my}).wrap(ctx, "Elect", &mysqldriver.MySQLError{Number: 1290, Message: "read-only"}, false),
	} {
		if m := missingPrivilege(err); m != "" {
			t.Errorf("missingPrivilege(%v) = %q, want \"\"", err, m)
		}
	}
	if class := ErrorClass(fmt.Errorf("election: Elect: %w", ErrPermissionDenied)); class != ClassPermission {
		t.Errorf("ErrorClass of a wrapped ErrPermissionDenied: %q", class)
	}
}
