package dialect_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestListenNeedsPgx: on a pool whose driver is not pgx, Listen reports
// ErrCannotListen (an errors.ErrUnsupported) and gives the connection back
// to the pool untouched.
func TestListenNeedsPgx(t *testing.T) {
	d, err := dialect.ByName("postgres")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := d.(dialect.Notifier)
	if !ok {
		t.Fatal("the postgres dialect is not a Notifier")
	}
	db, err := dialect.OpenSQLiteRaw("sqlite:" + filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = n.Listen(ctx, db, "channel", func() { t.Error("ready called") }, func(string) { t.Error("notified") })
	if !errors.Is(err, dialect.ErrCannotListen) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Listen on a SQLite pool: %v, want ErrCannotListen", err)
	}
	if s := db.Stats(); s.InUse != 0 || s.Idle != 1 {
		t.Errorf("pool after Listen: %d in use, %d idle; want the connection back", s.InUse, s.Idle)
	}
}

// TestListenNotify: a notification sent in a transaction reaches the
// listener at commit, and not at all on rollback; cancelling Listen
// discards its connection.
func TestListenNotify(t *testing.T) {
	dsn := os.Getenv(testdb.PostgresEnv)
	if dsn == "" {
		t.Skip(testdb.PostgresEnv + " not set")
	}
	gdb := testdb.OpenDSN(t, dsn)
	db := testdb.Raw(t, gdb)
	d, _ := dialect.For(gdb)
	n := d.(dialect.Notifier)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lctx, stop := context.WithCancel(ctx)
	ready, got, done := make(chan struct{}), make(chan string, 4), make(chan error, 1)
	channel := fmt.Sprintf("sqlelect_test_%d", time.Now().UnixNano())
	go func() {
		done <- n.Listen(lctx, db, channel, func() { close(ready) }, func(p string) { got <- p })
	}()
	select {
	case <-ready:
	case err := <-done:
		if testdb.TransactionPooler() && errors.Is(err, dialect.ErrCannotListen) {
			t.Skipf("through a transaction pooler: %v", err)
		}
		t.Fatalf("Listen: %v", err)
	}
	send := func(payload string, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Notify(ctx, tx, channel, payload); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			t.Errorf("%q delivered before the transaction ended", p)
		default:
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	send("rolled back", false)
	send("committed", true)
	if p := <-got; p != "committed" {
		t.Errorf("received %q, want %q", p, "committed")
	}
	stop()
	if err := <-done; err == nil {
		t.Error("Listen returned nil")
	}
	if s := db.Stats(); s.InUse != 0 {
		t.Errorf("%d connections in use after Listen returned", s.InUse)
	}
	var listening int
	for i := db.Stats().Idle; i > 0; i-- {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var k int
		if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_listening_channels()").Scan(&k); err != nil {
			t.Fatal(err)
		}
		listening += k
	}
	if listening != 0 {
		t.Errorf("a pooled connection still listens")
	}
}

// TestListenProbe: Listen confirms its subscription with a probe
// notification of its own before calling ready; the probe never reaches fn,
// and neither do other listeners' probes. Through a pooler in transaction
// mode (SQLELECT_POSTGRES_POOLER=transaction), where notifications are not
// delivered, Listen returns ErrCannotListen within the probe's bound,
// without calling ready, and leaves no pooled connection listening.
func TestListenProbe(t *testing.T) {
	dsn := os.Getenv(testdb.PostgresEnv)
	if dsn == "" {
		t.Skip(testdb.PostgresEnv + " not set")
	}
	gdb := testdb.OpenDSN(t, dsn)
	db := testdb.Raw(t, gdb)
	d, _ := dialect.For(gdb)
	n := d.(dialect.Notifier)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	channel := fmt.Sprintf("sqlelect_test_%d", time.Now().UnixNano())
	listen := func(lctx context.Context, ready chan struct{}, got chan string, done chan error) {
		done <- n.Listen(lctx, db, channel, func() { close(ready) }, func(p string) { got <- p })
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	ready1, got1, done1 := make(chan struct{}), make(chan string, 8), make(chan error, 1)
	start := time.Now()
	go listen(lctx, ready1, got1, done1)
	if testdb.TransactionPooler() {
		select {
		case <-ready1:
			t.Fatal("Listen reported ready through a transaction pooler")
		case err := <-done1:
			if !errors.Is(err, dialect.ErrCannotListen) || !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("Listen: %v, want ErrCannotListen", err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Listen took %v to give up", took)
			}
			t.Log(err)
		}
		if s := db.Stats(); s.InUse != 0 {
			t.Errorf("%d connections in use after Listen returned", s.InUse)
		}
		return
	}
	select {
	case <-ready1:
	case err := <-done1:
		t.Fatalf("Listen: %v", err)
	}
	// A second listener's probe reaches the first listener's connection,
	// which must not pass it on.
	ready2, got2, done2 := make(chan struct{}), make(chan string, 8), make(chan error, 1)
	go listen(lctx, ready2, got2, done2)
	select {
	case <-ready2:
	case err := <-done2:
		t.Fatalf("second Listen: %v", err)
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, "after"); err != nil {
		t.Fatal(err)
	}
	for i, got := range []chan string{got1, got2} {
		if p := <-got; p != "after" {
			t.Errorf("listener %d received %q first, want %q", i+1, p, "after")
		}
	}
	stop()
	for _, done := range []chan error{done1, done2} {
		if err := <-done; err == nil {
			t.Error("Listen returned nil")
		}
	}
}
