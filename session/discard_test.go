package session_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/faultproxy"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestReadOnlyConnectionDiscarded: a pooled connection whose server answered
// "read-only" (here its session was made read-only, as a standby's or a
// read-only server's are) is not handed out again: the next statement runs
// on a new connection, which can write. With database/sql's default the same
// session would come back and refuse every write for as long as it lived.
func TestReadOnlyConnectionDiscarded(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			if tg.Name == "postgres" && testdb.TransactionPooler() {
				// A session setting stays on the pooler's server connection
				// when the client connection is discarded, and every later
				// client would get a read-only session.
				t.Skip("a session-level setting is not per client behind a transaction pooler")
			}
			ctx := testCtx(t)
			db := open(t, tg.DSN)
			sqlDB, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			sqlDB.SetMaxOpenConns(1) // one connection: the next statement gets it back unless it was discarded
			table := scratch(t, db)
			idQuery, readOnly := "SELECT pg_backend_pid()", "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
			if tg.Name == "mysql" {
				idQuery, readOnly = "SELECT CONNECTION_ID()", "SET SESSION TRANSACTION READ ONLY"
			}
			conn, err := sqlDB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var before int64
			if err := conn.QueryRowContext(ctx, idQuery).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, readOnly); err != nil {
				t.Fatal(err)
			}
			_, err = conn.ExecContext(ctx, "INSERT INTO "+table+" (id) VALUES (1)")
			if err == nil {
				t.Fatal("a write in a read-only session succeeded")
			}
			t.Logf("write refused: %v", err)
			conn.Close()

			var after int64
			if err := sqlDB.QueryRowContext(ctx, idQuery).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after == before {
				t.Fatalf("the read-only session %d was handed out again", before)
			}
			if err := db.WithContext(ctx).Exec("INSERT INTO " + table + " (id) VALUES (2)").Error; err != nil {
				t.Fatalf("a write on the next connection: %v", err)
			}
		})
	}
}

// TestReadOnlyElectionError: a call that must write on a read-only session
// returns election.ErrReadOnly, for alerting, not a bare driver error.
func TestReadOnlyElectionError(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.Open(t, tg)
			e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)))
			if err != nil {
				t.Fatal(err)
			}
			tx := db.WithContext(ctx).Begin(&sql.TxOptions{ReadOnly: true})
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			defer tx.Rollback()
			_, err = e.Elect(ctx, uuid.New(), election.WithTx(tx))
			if !errors.Is(err, election.ErrReadOnly) {
				t.Fatalf("Elect in a read-only transaction: %v, want ErrReadOnly", err)
			}
			t.Logf("Elect: %v", err)
		})
	}
}

// TestElectionBoundsEachHost: a connection opened for an election call gives
// a first host that accepts and never answers a tenth of the expiry window
// (at least 1 s), not the 5 s default, before it tries the next host.
func TestElectionBoundsEachHost(t *testing.T) {
	u, err := url.Parse(serverDSN(t, testdb.PostgresEnv))
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "5432")
	}
	u.Host = silentServer(t) + "," + u.Host
	db := open(t, u.String()) // 5 s past the silent host
	works(t, db, "postgres")
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxIdleConns(0) // every call opens a connection
	e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)), election.WithExpire(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		start := time.Now()
		if err := e.Heartbeat(ctx, uuid.New()); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("Heartbeat past a hung first host took %v", took)
		if took < 900*time.Millisecond || took > 3*time.Second {
			t.Errorf("Heartbeat took %v, want about 1 s (a tenth of the 3 s window, at least 1 s)", took)
		}
	}
}

// TestSilentHostClosesWaitingCalls: once a call on a pooled connection runs
// out of time and a new connection to the same host gets no answer either,
// a call without a deadline waiting on another connection to that host
// fails instead of waiting for ever, and the pool opens new connections.
func TestSilentHostClosesWaitingCalls(t *testing.T) {
	dsn := serverDSN(t, testdb.PostgresEnv)
	p, proxied, err := faultproxy.ForDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	db := open(t, proxied)
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	waiting, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	timed, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer timed.Close()

	p.SetDelay(time.Hour) // the host accepts connections and never answers
	t.Cleanup(func() { p.SetDelay(0) })
	done := make(chan error, 1)
	go func() {
		_, err := waiting.ExecContext(context.Background(), "SELECT 1") // no deadline
		done <- err
	}()
	start := time.Now()
	tctx, cancel := context.WithTimeout(dialect.WithConnectTimeout(ctx, time.Second), 300*time.Millisecond)
	defer cancel()
	if _, err := timed.ExecContext(tctx, "SELECT 1"); err == nil || tctx.Err() == nil {
		t.Fatalf("the call with a deadline: %v, want it to run out of time", err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the call on the silent host succeeded")
		}
		t.Logf("the call without a deadline failed %v after the other timed out: %v", time.Since(start), err)
	case <-time.After(10 * time.Second):
		p.Close() // lets the call and the test end
		<-done
		t.Fatal("the call without a deadline still waited 10 s after the host was found silent")
	}
}

// TestConnectTimeoutKeepsIdleConnections: a DSN's connect_timeout, 0 (wait
// for ever) or a number of seconds, also bounds the check pgx makes of a
// pooled connection handed out after more than a second unused, and the
// connection passes it: the same server session comes back. With 0 the
// check once ran under a context that had already ended, and every
// connection idle for a second was dropped and opened again.
func TestConnectTimeoutKeepsIdleConnections(t *testing.T) {
	dsn := serverDSN(t, testdb.PostgresEnv)
	if testdb.TransactionPooler() {
		t.Skip("behind a transaction pooler a client's server session changes between transactions")
	}
	for _, timeout := range []string{"0", "7"} {
		t.Run("connect_timeout="+timeout, func(t *testing.T) {
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("connect_timeout", timeout)
			u.RawQuery = q.Encode()
			db := open(t, u.String())
			sqlDB, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			sqlDB.SetMaxOpenConns(1)
			ctx := testCtx(t)
			pid := func() (p int64) {
				t.Helper()
				if err := sqlDB.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
					t.Fatal(err)
				}
				return p
			}
			before := pid()
			// pgx checks a connection unused for over a second; nothing
			// signals that the second has passed but the clock.
			time.Sleep(1100 * time.Millisecond)
			if after := pid(); after != before {
				t.Fatalf("server session %d after a second idle, want %d again: the idle connection was dropped", after, before)
			}
		})
	}
}

// TestConnectTimeoutBoundsIdleCheck: on a pooled connection whose host
// went silent, a call without a deadline fails within the DSN's
// connect_timeout (1 s: the check of the idle connection, then a new
// connection attempt), not the 5 s default each.
func TestConnectTimeoutBoundsIdleCheck(t *testing.T) {
	dsn := serverDSN(t, testdb.PostgresEnv)
	p, proxied, err := faultproxy.ForDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u, err := url.Parse(proxied)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	db := open(t, u.String())
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1)
	if _, err := sqlDB.ExecContext(testCtx(t), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // idle long enough to be checked
	p.SetDelay(time.Hour)
	t.Cleanup(func() { p.SetDelay(0) })
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := sqlDB.ExecContext(context.Background(), "SELECT 1")
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		if err == nil {
			t.Fatal("a call on the silent host succeeded")
		}
		t.Logf("the call failed after %v: %v", took, err)
		if took > 4*time.Second {
			t.Errorf("the call failed after %v, want about 2 s (1 s check, 1 s connection attempt), under the 5 s default", took)
		}
	case <-time.After(20 * time.Second):
		p.Close()
		<-done
		t.Fatal("the call on the silent host still waited after 20 s")
	}
}
