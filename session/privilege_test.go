package session_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// The tests here run as a database user of their own, created for the
// test with a random name and dropped at its end, whose rights they revoke
// and grant: the configured user's (root's, postgres's) are never changed.

// dbUser is a user made for one test.
type dbUser struct {
	name string
	dsn  string // reaches the configured database as the user
	// grant gives INSERT, UPDATE and DELETE: on MySQL and MariaDB on the
	// whole database (`db`.*), privileges an open session takes in at its
	// next USE only; on PostgreSQL on the tables given to newUser.
	grant func()
}

// newUser creates a user that may read, but not write, the configured
// database of tg (on PostgreSQL, the tables named), and drops it when the
// test ends. It skips on PostgreSQL behind a transaction pooler, which
// knows only the configured user.
func newUser(t *testing.T, tg testdb.Target, tables ...string) *dbUser {
	t.Helper()
	if tg.Name == "postgres" && testdb.TransactionPooler() {
		t.Skip("the transaction pooler's user list has only the configured user")
	}
	admin := testdb.OpenDSN(t, tg.DSN)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "sqlelect_priv_" + hex.EncodeToString(b[:])
	_, _ = rand.Read(b[:])
	password := hex.EncodeToString(b[:])
	exec := func(stmt string) {
		t.Helper()
		if err := admin.Exec(stmt).Error; err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	u := &dbUser{name: name}
	switch tg.Name {
	case "mysql":
		var dbName string
		if err := admin.Raw("SELECT DATABASE()").Row().Scan(&dbName); err != nil {
			t.Fatal(err)
		}
		account := "'" + name + "'@'%'"
		on := "`" + dbName + "`.*"
		exec("CREATE USER " + account + " IDENTIFIED BY '" + password + "'")
		t.Cleanup(func() {
			if err := admin.Exec("DROP USER IF EXISTS " + account).Error; err != nil {
				t.Errorf("dropping the test's user %s: %v", account, err)
			}
		})
		exec("GRANT SELECT ON " + on + " TO " + account)
		u.grant = func() { exec("GRANT INSERT, UPDATE, DELETE ON " + on + " TO " + account) }
		u.dsn = "mysql://" + name + ":" + password + "@tcp(" + hostOf(t, tg.DSN) + ")/" + dbName
	case "postgres":
		exec("CREATE ROLE " + name + " LOGIN PASSWORD '" + password + "'")
		t.Cleanup(func() {
			// The privileges granted to it first (in this database, the
			// only one it was given any in).
			for _, stmt := range []string{"DROP OWNED BY " + name, "DROP ROLE " + name} {
				if err := admin.Exec(stmt).Error; err != nil {
					t.Errorf("%s: %v", stmt, err)
				}
			}
		})
		on := strings.Join(tables, ", ")
		exec("GRANT SELECT ON " + on + " TO " + name)
		u.grant = func() { exec("GRANT INSERT, UPDATE, DELETE ON " + on + " TO " + name) }
		pu, err := url.Parse(tg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		pu.User = url.UserPassword(name, password)
		u.dsn = pu.String()
	default:
		t.Fatalf("no users on %s", tg.Name)
	}
	return u
}

// sessionsKeepGrants reports whether tg's server applies a GRANT to open
// sessions only later (MySQL and MariaDB, for privileges on a database),
// so that the pool must discard a connection that was refused.
func sessionsKeepGrants(tg testdb.Target) bool { return tg.Name == "mysql" }

// TestPermissionDeniedConnection: on MySQL and MariaDB a pooled connection
// whose write was refused for a missing privilege is not handed out again,
// and the write succeeds on the next connection once the user is granted
// the privilege on the database; the negative control (no discarding)
// shows the refused session coming back and refusing again after the
// GRANT, as it would until it ended. On PostgreSQL, which checks
// privileges at every statement, the connection stays and sees the GRANT.
func TestPermissionDeniedConnection(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			admin := testdb.OpenDSN(t, tg.DSN)
			if tg.Name == "mysql" && testdb.TiDB(t, admin) {
				t.Skip("TiDB: not checked yet whether its open sessions see a GRANT on a database")
			}
			keeps := sessionsKeepGrants(tg)
			table := scratch(t, admin)
			idQuery := "SELECT pg_backend_pid()"
			if tg.Name == "mysql" {
				idQuery = "SELECT CONNECTION_ID()"
			}
			cases := []struct {
				name    string
				discard bool
			}{{"grant", true}}
			if keeps {
				cases = append(cases, struct {
					name    string
					discard bool
				}{"negative control: no discard", false})
			}
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if !c.discard {
						t.Cleanup(dialect.DisableDiscard())
					}
					ctx := testCtx(t)
					u := newUser(t, tg, table)
					sqlDB := testdb.Raw(t, open(t, u.dsn))
					sqlDB.SetMaxOpenConns(1) // the next statement gets the connection back unless it was discarded
					id := func() (n int64) {
						t.Helper()
						if err := sqlDB.QueryRowContext(ctx, idQuery).Scan(&n); err != nil {
							t.Fatal(err)
						}
						return n
					}
					insert := func(v int) error {
						_, err := sqlDB.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (id) VALUES (%d)", table, 10*i+v))
						return err
					}
					before := id()
					err := insert(1)
					if err == nil {
						t.Fatal("a write without the INSERT privilege succeeded")
					}
					d, derr := dialect.ForPool(ctx, sqlDB)
					if derr != nil {
						t.Fatal(derr)
					}
					if got := d.Classify(err); got != dialect.Permission {
						t.Fatalf("Classify(%v) = %v, want Permission", err, got)
					}
					denied := d.Denied(err)
					t.Logf("write refused: %v (%s)", err, denied)
					if want := "INSERT on table "; tg.Name == "mysql" && (!strings.HasPrefix(denied, want) || !strings.Contains(denied, table)) {
						t.Errorf("Denied: %q, want %q and the table %s", denied, want+"...", table)
					}
					if want := "a privilege on table " + table; tg.Name == "postgres" && denied != want {
						t.Errorf("Denied: %q, want %q", denied, want)
					}
					u.grant()
					after := id()
					discarded := after != before
					t.Logf("session %d before the GRANT, %d after", before, after)
					err = insert(2)
					switch {
					case keeps && c.discard:
						if !discarded {
							t.Fatalf("the refused session %d was handed out again", before)
						}
						if err != nil {
							t.Fatalf("a write on a new connection after the GRANT: %v", err)
						}
					case keeps:
						if discarded {
							t.Fatal("without the discarding, the refused session was not handed out again: the test proves nothing about the discarding")
						}
						if err == nil {
							t.Fatal("without the discarding, the refused session took in the GRANT: the test proves nothing about the discarding")
						}
						t.Logf("without the discarding, the same session refuses after the GRANT: %v", err)
					default:
						if discarded {
							t.Fatalf("the session %d that was refused was discarded, where the server applies a GRANT at once", before)
						}
						if err != nil {
							t.Fatalf("a write on the same session after the GRANT: %v", err)
						}
					}
				})
			}
		})
	}
}

// TestGrantReachesElector: an Elector started while its user may read the
// election tables but not write them fails every round with
// ErrPermissionDenied (class "permission"); once INSERT, UPDATE and DELETE
// are granted, it leads within the rounds it takes to meet each connection
// the pool opened before the GRANT once, and unregisters at shutdown.
//
// On MySQL and MariaDB, which apply a GRANT on the database to an open
// session only at its next USE, that relies on the pool discarding refused
// connections: the negative control (dialect.DisableDiscard) shows no
// leader 2 s past that bound, every round still refused, until the
// discarding is turned back on. PostgreSQL applies the GRANT to open
// sessions at once and discards nothing.
func TestGrantReachesElector(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			admin := testdb.Open(t, tg)
			if tg.Name == "mysql" && testdb.TiDB(t, admin) {
				t.Skip("TiDB: not checked yet whether its open sessions see a GRANT on a database")
			}
			t.Run("grant", func(t *testing.T) { grantAndLead(t, tg, admin, true) })
			if sessionsKeepGrants(tg) {
				t.Run("negative control: no discard", func(t *testing.T) { grantAndLead(t, tg, admin, false) })
			}
		})
	}
}

// rounds records an Elector's rounds.
type rounds struct {
	election.NopObserver
	mu       sync.Mutex
	failures []failure
	led      chan time.Time
}

type failure struct {
	at    time.Time
	err   error
	class string
}

func (r *rounds) Attempt(a election.Attempt) {
	if a.Err == nil {
		return
	}
	r.mu.Lock()
	r.failures = append(r.failures, failure{time.Now(), a.Err, a.ErrorClass})
	r.mu.Unlock()
}

func (r *rounds) LeadershipStarted(election.Leadership) {
	select {
	case r.led <- time.Now():
	default:
	}
}

// since returns the failed rounds that ended after t.
func (r *rounds) since(t time.Time) []failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []failure
	for _, f := range r.failures {
		if f.at.After(t) {
			out = append(out, f)
		}
	}
	return out
}

func grantAndLead(t *testing.T, tg testdb.Target, admin *gorm.DB, discard bool) {
	const (
		expire   = 3 * time.Second
		interval = 300 * time.Millisecond
	)
	restore := func() {}
	if !discard {
		restore = dialect.DisableDiscard()
		t.Cleanup(restore)
	}
	ctx := testCtx(t)
	u := newUser(t, tg, "election_leaders", "election_candidates", "election_history", "election_schema_migrations")
	db := open(t, u.dsn)
	ns := testdb.Namespace(t)
	obs := &rounds{led: make(chan time.Time, 1)}
	e, err := election.New(db, election.WithNamespace(ns), election.WithExpire(expire), election.WithObserver(obs),
		election.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("election.New as a user that may only read: %v", err)
	}
	id := uuid.New()
	el, err := e.NewElector(id, election.ElectorConfig{Interval: interval, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(runCtx) }()
	stopped := false
	defer func() {
		if !stopped {
			stop()
			<-done
		}
	}()

	start := time.Now()
	for len(obs.since(start)) < 3 {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("3 failed rounds not seen in 20 s (%d)", len(obs.since(start)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, f := range obs.since(start) {
		if !errors.Is(f.err, election.ErrPermissionDenied) || f.class != election.ClassPermission {
			t.Fatalf("a round without the privilege failed with %v (class %q), want ErrPermissionDenied (class %q)",
				f.err, f.class, election.ClassPermission)
		}
	}
	t.Logf("rounds refused: %v", obs.since(start)[0].err)

	u.grant()
	granted := time.Now()
	// Each connection opened before the GRANT answers at most one round
	// with a refusal before it is discarded.
	stale := testdb.Raw(t, db).Stats().OpenConnections
	bound := expire + 2*interval
	if discard {
		select {
		case at := <-obs.led:
			t.Logf("leads %v after the GRANT", at.Sub(granted))
		case <-time.After(bound):
			t.Fatalf("no leader %v after the GRANT; failed rounds since: %d", bound, len(obs.since(granted)))
		}
		refused := obs.since(granted)
		t.Logf("%d round(s) refused after the GRANT; %d connection(s) open at the GRANT", len(refused), stale)
		if len(refused) > stale {
			t.Errorf("%d rounds refused after the GRANT, more than the %d connections open then: a refused connection was reused", len(refused), stale)
		}
	} else {
		select {
		case at := <-obs.led:
			t.Fatalf("without the discarding, led %v after the GRANT: the pooled sessions took in the GRANT, and the test proves nothing about the discarding", at.Sub(granted))
		case <-time.After(bound + 2*time.Second):
		}
		refused := obs.since(granted)
		if len(refused) <= stale {
			t.Fatalf("without the discarding, only %d rounds refused after the GRANT (%d connections open then)", len(refused), stale)
		}
		t.Logf("without the discarding, no leader %v after the GRANT; %d rounds refused since, the last: %v",
			bound+2*time.Second, len(refused), refused[len(refused)-1].err)
		on := time.Now()
		restore() // the discarding on again, on the same pool
		select {
		case at := <-obs.led:
			t.Logf("discarding on again: leads %v later", at.Sub(on))
		case <-time.After(bound):
			t.Fatalf("discarding on again: no leader %v later", bound)
		}
	}
	if !el.IsLeader() {
		t.Fatal("led, and no longer leads")
	}

	// Run's unregistration at shutdown (refused too before the fix, on
	// the sessions from before the GRANT) vacates the seat.
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	stopped = true
	ae, err := election.New(admin, election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ae.Leader(ctx); err != nil || !l.Vacant() {
		t.Errorf("after Run returned: leader %+v, %v; want a vacant seat (the Elector's unregistration)", l, err)
	}
}
