package session_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

// TestWrapRefusesLibPQ: a pool the application opened with lib/pq, the
// real driver on the configured PostgreSQL, is refused by Wrap (directly,
// and behind instrumentation that hides the driver but exposes the
// connections) and by WrapDialect, with an error wrapping
// ErrUnsupportedDriver that names pgx's driver as the replacement; the pool
// is left as it was and still answers.
func TestWrapRefusesLibPQ(t *testing.T) {
	dsn := serverDSN(t, testdb.PostgresEnv)
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		t.Skipf("%s is not a postgres:// URL, which lib/pq reads", testdb.PostgresEnv)
	}
	ctx := testCtx(t)
	direct, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	if _, ok := direct.Driver().(*pq.Driver); !ok {
		t.Fatalf("the pool's driver is %T, want lib/pq's", direct.Driver())
	}
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	exposed := sql.OpenDB(instrumented{inner: connector})
	t.Cleanup(func() { exposed.Close() })

	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, session.ErrUnsupportedDriver) {
			t.Errorf("%s: %v, want ErrUnsupportedDriver", what, err)
			return
		}
		for _, want := range []string{"lib/pq", "pgx"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %s", what, err, want)
			}
		}
		t.Logf("%s: %v", what, err)
	}
	_, err = session.Wrap(direct)
	check("Wrap", err)
	_, err = session.Wrap(exposed)
	check("Wrap behind instrumentation", err)
	_, err = session.WrapDialect(direct, "postgres")
	check("WrapDialect", err)

	for name, pool := range map[string]*sql.DB{"the lib/pq pool": direct, "the instrumented pool": exposed} {
		var one int
		if err := pool.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Errorf("%s after the refusal: %d, %v", name, one, err)
		}
	}
}
