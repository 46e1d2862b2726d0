package dialect_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// sqliteNotifier returns the SQLite dialect's Notifier, skipping where SQLite
// or file-change notifications are not available.
func sqliteNotifier(t *testing.T) dialect.Notifier {
	t.Helper()
	d, err := dialect.ByName("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := d.(dialect.Notifier)
	if !ok {
		t.Fatal("the sqlite dialect is not a Notifier")
	}
	if n.HoldsListenConn() {
		t.Error("a SQLite listener says it holds a connection")
	}
	return n
}

// TestSQLiteListenNotify: a line appended in a transaction through one pool
// reaches the listener of another pool on the same file, with its payload,
// only on its own channel and never the probe; an emptied file is reported
// with an empty payload; the listener holds no connection; cancelling
// Listen ends it.
func TestSQLiteListenNotify(t *testing.T) {
	n := sqliteNotifier(t)
	if runtime.GOOS != "linux" {
		t.Skip("file-change notifications are used on Linux only")
	}
	path := filepath.Join(t.TempDir(), "e.db")
	open := func() *sql.DB {
		db, err := dialect.OpenSQLiteRaw("sqlite:" + path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(), open()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lctx, stop := context.WithCancel(ctx)
	ready, got, done := make(chan struct{}), make(chan string, 16), make(chan error, 1)
	go func() {
		done <- n.Listen(lctx, b, "ch", func() { close(ready) }, func(p string) { got <- p })
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Listen: %v", err)
	case <-ctx.Done():
		t.Fatal("Listen never became ready")
	}
	if s := b.Stats(); s.InUse != 0 {
		t.Errorf("%d connections in use while listening, want 0", s.InUse)
	}
	next := func(what string) string {
		t.Helper()
		select {
		case p := <-got:
			return p
		case err := <-done:
			t.Fatalf("%s: Listen returned %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing delivered", what)
		}
		return ""
	}
	tx, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(ctx, tx, "other", "not for us"); err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(ctx, tx, "ch", "id:ns one"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if p := next("a line on the channel"); p != "id:ns one" {
		t.Errorf("delivered %q, want %q", p, "id:ns one")
	}
	if err := n.Notify(ctx, a, "ch", "a space\tand tab"); err != nil {
		t.Fatal(err)
	}
	if p := next("a second line"); p != "a space\tand tab" {
		t.Errorf("delivered %q, want %q", p, "a space\tand tab")
	}
	if err := n.Notify(ctx, a, "ch", "two\nlines \"quoted\""); err != nil {
		t.Fatal(err)
	}
	if p := next("a payload with a newline"); p != "two\nlines \"quoted\"" {
		t.Errorf("delivered %q, want %q", p, "two\nlines \"quoted\"")
	}
	if err := n.Notify(ctx, a, "c h", "x"); err == nil {
		t.Error("Notify accepted a channel with a space")
	}
	// Someone empties the file: the listener cannot know what it missed.
	if err := os.Truncate(path+"-sqlelect-handoff", 0); err != nil {
		t.Fatal(err)
	}
	if p := next("after the file was emptied"); p != "" {
		t.Errorf("delivered %q after the file was emptied, want \"\"", p)
	}
	if err := n.Notify(ctx, a, "ch", "after"); err != nil {
		t.Fatal(err)
	}
	if p := next("a line after the file was emptied"); p != "after" {
		t.Errorf("delivered %q, want %q", p, "after")
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Listen after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after cancel")
	}
	select {
	case p := <-got:
		t.Errorf("also delivered %q", p)
	default:
	}
}

// TestSQLiteListenInMemory: an in-memory database has no file to watch
// and no other process to hear from: Listen says so, and Notify does
// nothing.
func TestSQLiteListenInMemory(t *testing.T) {
	n := sqliteNotifier(t)
	db, err := dialect.OpenSQLiteRaw("sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = n.Listen(ctx, db, "ch", func() { t.Error("ready called") }, func(string) { t.Error("notified") })
	if !errors.Is(err, dialect.ErrCannotListen) {
		t.Errorf("Listen on an in-memory database: %v, want ErrCannotListen", err)
	}
	if runtime.GOOS == "linux" && !strings.Contains(err.Error(), "in-memory") {
		t.Errorf("Listen's error does not say why: %v", err)
	}
	if err := n.Notify(ctx, db, "ch", "x"); err != nil {
		t.Errorf("Notify on an in-memory database: %v", err)
	}
}

// TestSQLiteNotifyFileUnwritable: a notification file that cannot be
// written (here a directory is in its place) never fails the vacating
// transaction, and Listen reports ErrCannotListen, so that candidates poll.
func TestSQLiteNotifyFileUnwritable(t *testing.T) {
	n := sqliteNotifier(t)
	if runtime.GOOS != "linux" {
		t.Skip("file-change notifications are used on Linux only")
	}
	path := filepath.Join(t.TempDir(), "e.db")
	if err := os.Mkdir(path+"-sqlelect-handoff", 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := dialect.OpenSQLiteRaw("sqlite:" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Notify(ctx, db, "ch", "x"); err != nil {
		t.Errorf("Notify with an unwritable file: %v, want nil", err)
	}
	err = n.Listen(ctx, db, "ch", func() { t.Error("ready called") }, func(string) { t.Error("notified") })
	if !errors.Is(err, dialect.ErrCannotListen) {
		t.Errorf("Listen with an unwritable file: %v, want ErrCannotListen", err)
	}
}

// TestSQLiteNotifyDeferred: under DeferNotifyWaits, Notify leaves its line
// for the caller to write once its transaction has ended, so that those it
// wakes find the write lock free; without it the line is written at once.
func TestSQLiteNotifyDeferred(t *testing.T) {
	n := sqliteNotifier(t)
	if runtime.GOOS != "linux" {
		t.Skip("file-change notifications are used on Linux only")
	}
	path := filepath.Join(t.TempDir(), "e.db")
	db, err := dialect.OpenSQLiteRaw("sqlite:" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	size := func() int {
		b, err := os.ReadFile(path + "-sqlelect-handoff")
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	if err := n.Notify(ctx, db, "ch", "at once"); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != 1 {
		t.Fatalf("%d lines after a plain Notify, want 1", got)
	}
	dctx, write := dialect.DeferNotifyWaits(ctx)
	if err := n.Notify(dctx, db, "ch", "later"); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != 1 {
		t.Fatalf("%d lines after a deferred Notify, before the caller's wait; want 1", got)
	}
	write()
	if got := size(); got != 2 {
		t.Fatalf("%d lines after the caller's wait, want 2", got)
	}
}
