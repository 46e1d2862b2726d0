package dialect_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// notifyHelperEnv, when set, makes TestMySQLNotifyHelper act as another
// process: it names the channel to notify on. With notifyListenEnv set too,
// that process listens on the channel before it notifies.
const (
	notifyHelperEnv = "SQLELECT_MYSQL_NOTIFY_HELPER"
	notifyListenEnv = "SQLELECT_MYSQL_NOTIFY_LISTEN"
	notifyDeferEnv  = "SQLELECT_MYSQL_NOTIFY_DEFER"
)

// helperMode is how TestMySQLNotifyHelper sends: whether it listens first,
// and whether it leaves the wait for its KILLs until after the commit
// (DeferNotifyWaits).
type helperMode struct{ listening, deferred bool }

// mysqlTarget returns the configured MySQL-family target, or skips.
func mysqlTarget(t *testing.T) testdb.Target {
	t.Helper()
	return testdb.Only(t, "mysql")
}

// mysqlNotifier opens a pool on dsn and returns it with the dialect Detect
// finds on it (MySQL, MariaDB or TiDB) as a Notifier.
func mysqlNotifier(t *testing.T, dsn string) (*gorm.DB, *sql.DB, dialect.Dialect, dialect.Notifier) {
	t.Helper()
	gdb := testdb.OpenDSN(t, dsn)
	d, err := dialect.For(gdb)
	if err != nil {
		t.Fatal(err)
	}
	if d, err = dialect.Detect(context.Background(), gdb, d); err != nil {
		t.Fatal(err)
	}
	n, ok := d.(dialect.Notifier)
	if !ok {
		t.Fatal("the mysql dialect is not a Notifier")
	}
	if !n.HoldsListenConn() {
		t.Error("a MySQL listener says it holds no connection")
	}
	return gdb, testdb.Raw(t, gdb), d, n
}

// testChannel is a channel no other test listens on.
func testChannel() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sqlelect_test_" + hex.EncodeToString(b[:])
}

// listening is a Listen running in the background.
type listening struct {
	got   chan string
	ready chan struct{}
	done  chan error
	stop  context.CancelFunc
}

func listen(t *testing.T, n dialect.Notifier, db *sql.DB, channel string) *listening {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	l := &listening{got: make(chan string, 16), ready: make(chan struct{}), done: make(chan error, 1), stop: stop}
	go func() {
		l.done <- n.Listen(ctx, db, channel, func() { close(l.ready) }, func(p string) { l.got <- p })
	}()
	t.Cleanup(func() { l.end(t) })
	return l
}

// waitReady waits for the listener to be ready and returns its connection
// id, as the process list shows it waiting beside the others listed.
func (l *listening) waitReady(t *testing.T, db *sql.DB, channel string, others ...int64) int64 {
	t.Helper()
	select {
	case <-l.ready:
	case err := <-l.done:
		l.done <- err
		t.Fatalf("Listen: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the listener is not ready after a minute")
	}
	// The wait is sent before ready is called, and reaches the server a
	// moment later.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids, err := dialect.MySQLWaiting(context.Background(), db, channel)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == len(others)+1 {
			for _, id := range ids {
				if !slices.Contains(others, id) {
					return id
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections %v wait on %s 10 s after the listener was ready, want %v and the listener's", ids, channel, others)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitWaiting waits until connection id runs a wait, after a wake-up: the
// wait that was interrupted has ended (its result was read), so a running
// one is the next.
func waitWaiting(t *testing.T, db *sql.DB, id int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND COMMAND = 'Query' AND (INFO LIKE 'SELECT SLEEP(%' OR INFO LIKE 'SELECT IF(w.n IS NULL, SLEEP(%')", id).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d does not wait again 10 s after a wake-up", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// next returns the next payload the listener passed on.
func (l *listening) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case p := <-l.got:
		return p
	case err := <-l.done:
		l.done <- err
		t.Fatalf("%s: Listen returned %v", what, err)
	case <-time.After(time.Minute):
		t.Fatalf("%s: no wake-up within a minute", what)
	}
	return ""
}

// end stops the listener and returns what Listen returned.
func (l *listening) end(t *testing.T) error {
	t.Helper()
	l.stop()
	select {
	case err := <-l.done:
		l.done <- err
		return err
	case <-time.After(time.Minute):
		t.Fatal("Listen did not return within a minute of its context ending")
	}
	return nil
}

// notifyFromProcess runs TestMySQLNotifyHelper in a new process of this
// test binary: it sends a notification on channel in a transaction it
// commits each time it reads a line from its input, and reports each as
// sent with a line; when listening, it listens on the channel first (and
// then sends its KILLs from another goroutine, not in the transaction), and
// when deferred too it waits for them after the commit. It returns a
// function that lets the next one go and waits for it to be sent.
func notifyFromProcess(t *testing.T, dsn, channel string, mode helperMode) func() {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMySQLNotifyHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), notifyHelperEnv+"="+channel, testdb.MySQLEnv+"="+dsn, testdb.OnlyEnv+"=mysql")
	if mode.listening {
		cmd.Env = append(cmd.Env, notifyListenEnv+"=1")
	}
	if mode.deferred {
		cmd.Env = append(cmd.Env, notifyDeferEnv+"=1")
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	return func() {
		t.Helper()
		if _, err := io.WriteString(in, "go\n"); err != nil {
			t.Fatalf("the notifying process: %v", err)
		}
		for lines.Scan() {
			if lines.Text() == "sent" {
				return
			}
		}
		t.Fatalf("the notifying process ended without notifying: %v", lines.Err())
	}
}

// TestMySQLNotifyHelper is the other process of TestMySQLNotifyAcrossProcesses;
// it does nothing in a test run of its own.
func TestMySQLNotifyHelper(t *testing.T) {
	channel := os.Getenv(notifyHelperEnv)
	if channel == "" {
		t.Skip("runs only as the notifying process of TestMySQLNotifyAcrossProcesses")
	}
	tg := mysqlTarget(t)
	_, db, _, n := mysqlNotifier(t, tg.DSN)
	ctx := context.Background()
	if os.Getenv(notifyListenEnv) != "" {
		l := listen(t, n, db, channel)
		select {
		case <-l.ready:
		case err := <-l.done:
			t.Fatalf("Listen: %v", err)
		}
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		nctx, wait := ctx, func() {}
		if os.Getenv(notifyDeferEnv) != "" {
			nctx, wait = dialect.DeferNotifyWaits(ctx)
		}
		if err := n.Notify(nctx, tx, channel, "from another process"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		wait()
		fmt.Println("sent")
	}
}

// TestMySQLNotifyAcrossProcesses: a notification sent by another process
// interrupts the listener's wait, which passes an empty payload ("any
// namespace": the interruption carries none) and waits again, on the same
// connection; a notification sent in this process, through another pool,
// is handed over with its payload. Stopping the listener ends its session.
func TestMySQLNotifyAcrossProcesses(t *testing.T) {
	tg := mysqlTarget(t)
	_, db, _, n := mysqlNotifier(t, tg.DSN)
	_, other, _, _ := mysqlNotifier(t, tg.DSN)
	channel := testChannel()
	l := listen(t, n, db, channel)
	id := l.waitReady(t, db, channel)

	for _, mode := range []helperMode{{}, {listening: true}, {listening: true, deferred: true}} {
		send := notifyFromProcess(t, tg.DSN, channel, mode)
		for i := range 3 {
			// A KILL that comes before the next wait has started is lost
			// (a window of a round trip after each wake-up, documented):
			// send once it runs.
			waitWaiting(t, db, id)
			send()
			what := fmt.Sprintf("notification %d from another process (%+v)", i, mode)
			if p := l.next(t, what); p != "" {
				t.Errorf("%s: payload %q, want \"\"", what, p)
			}
		}
	}

	ctx := context.Background()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(ctx, tx, channel, "same process"); err != nil {
		t.Fatal(err)
	}
	if p := l.next(t, "a notification from this process"); p != "same process" {
		t.Errorf("a notification from this process: payload %q, want %q", p, "same process")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// Still waiting, on the same connection.
	ids, err := dialect.MySQLWaiting(ctx, db, channel)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ids, id) {
		t.Errorf("waiting after the notifications: %v, want %d among them", ids, id)
	}
	if err := l.end(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Listen after its context ended: %v, want context.Canceled", err)
	}
	// The server ends the listener's session as its connection closes; on
	// TiDB the process list shows that a moment later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ids, err := dialect.MySQLWaiting(ctx, db, channel)
		if err == nil && !slices.Contains(ids, id) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("waiting 5 s after Listen returned: %v, %v; want %d gone", ids, err, id)
			break
		}
	}
	if s := db.Stats(); s.InUse != 0 {
		t.Errorf("%d connections in use after Listen returned", s.InUse)
	}
}

// TestMySQLListenerSlots: on MySQL and MariaDB each listening pool holds one
// of the channel's slots; when all are taken Listen returns ErrCannotListen
// (the caller polls) and gives its connection back; a listener that stops,
// or whose connection is killed, frees its slot.
func TestMySQLListenerSlots(t *testing.T) {
	tg := mysqlTarget(t)
	_, a, d, n := mysqlNotifier(t, tg.DSN)
	if dialect.TiDB(d) {
		t.Skip("TiDB listeners are found by their statement and hold no slot")
	}
	defer dialect.SetMySQLSlots(2)()
	_, b, _, _ := mysqlNotifier(t, tg.DSN)
	_, c, _, _ := mysqlNotifier(t, tg.DSN)
	ctx := context.Background()
	channel := testChannel()
	holder := func(slot int) int64 {
		t.Helper()
		name, err := dialect.MySQLSlotName(ctx, a, channel, slot)
		if err != nil {
			t.Fatal(err)
		}
		var id sql.NullInt64
		if err := a.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id.Int64
	}
	// freed waits for the server to release slot, which it does as the
	// session ends, just after closing the connection.
	freed := func(slot int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for h := holder(slot); h != 0; h = holder(slot) {
			if time.Now().After(deadline) {
				t.Fatalf("slot %d is still held by %d 10 s after %s", slot, h, what)
			}
			time.Sleep(time.Millisecond)
		}
	}

	la := listen(t, n, a, channel)
	idA := la.waitReady(t, a, channel)
	lb := listen(t, n, b, channel)
	idB := lb.waitReady(t, b, channel, idA)
	if h0, h1 := holder(0), holder(1); h0 != idA || h1 != idB {
		t.Fatalf("slot holders %d and %d, want the listeners' connections %d and %d", h0, h1, idA, idB)
	}

	err := n.Listen(ctx, c, channel, func() { t.Error("a third listener is ready with two slots") }, func(string) {})
	if !errors.Is(err, dialect.ErrCannotListen) || !strings.Contains(err.Error(), "all 2 wake-up slots") {
		t.Errorf("a third listener: %v, want ErrCannotListen saying the slots are taken", err)
	}
	if s := c.Stats(); s.InUse != 0 {
		t.Errorf("%d connections in use after the third Listen returned", s.InUse)
	}

	// Stopping frees the slot.
	la.end(t)
	freed(0, "its listener stopped")
	lc := listen(t, n, c, channel)
	idC := lc.waitReady(t, c, channel, idB)
	if h := holder(0); h != idC {
		t.Errorf("slot 0 is held by %d, want the new listener's connection %d", h, idC)
	}

	// A listener whose connection is killed returns an error (its caller
	// listens again) and the server has freed its slot.
	if _, err := a.ExecContext(ctx, fmt.Sprintf("KILL %d", idC)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lc.done:
		lc.done <- err
		if err == nil || errors.Is(err, dialect.ErrCannotListen) {
			t.Errorf("Listen after its connection was killed: %v, want an error to retry", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Listen did not return after its connection was killed")
	}
	freed(0, "its listener's connection was killed")
}

// TestMySQLNotifyNeverFails: Notify leaves the transaction usable and
// returns nil when it cannot wake anyone: a slot held by a connection that
// is not waiting (its KILL QUERY finds nothing to interrupt), and, on
// MySQL and MariaDB, the TiDB way of finding listeners, which fails there
// (no CLUSTER_PROCESSLIST); Listen then reports ErrCannotListen. On TiDB
// the MySQL way fails Listen's probe: IS_USED_LOCK does not name the holder.
func TestMySQLNotifyNeverFails(t *testing.T) {
	tg := mysqlTarget(t)
	_, db, d, n := mysqlNotifier(t, tg.DSN)
	ctx := context.Background()
	channel := testChannel()
	tidb := dialect.TiDB(d)

	if !tidb {
		// An idle connection holding slot 0.
		idle, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name, err := dialect.MySQLSlotName(ctx, db, channel, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got int
		if err := idle.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil || got != 1 {
			t.Fatalf("GET_LOCK: %d, %v", got, err)
		}
		notifyInTx(t, db, n, channel)
		if err := idle.PingContext(ctx); err != nil {
			t.Errorf("the idle connection after Notify: %v", err)
		}
		// Discarded: the server ends the session and its lock.
		_ = idle.Raw(func(any) error { return driver.ErrBadConn })
		idle.Close()
	}

	// The other way of finding listeners, which this engine lacks.
	wrong := dialect.MySQLForTest(!tidb).(dialect.Notifier)
	notifyInTx(t, db, wrong, channel)
	start := time.Now()
	err := wrong.Listen(ctx, db, channel, func() { t.Error("ready") }, func(string) { t.Error("notified") })
	if !errors.Is(err, dialect.ErrCannotListen) {
		t.Errorf("Listen the other engine's way: %v, want ErrCannotListen", err)
	}
	t.Logf("Listen the other engine's way: %v, after %v", err, time.Since(start))
	if s := db.Stats(); s.InUse != 0 {
		t.Errorf("%d connections in use after Listen returned", s.InUse)
	}
}

// notifyInTx runs Notify in a transaction, then a statement in the same
// transaction, and commits.
func notifyInTx(t *testing.T, db *sql.DB, n dialect.Notifier, channel string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if err := n.Notify(ctx, tx, channel, "payload"); err != nil {
		t.Errorf("Notify: %v", err)
	}
	var one int
	if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("the transaction after Notify: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Errorf("commit after Notify: %v", err)
	}
}

// TestMySQLListenersWaitOnLowerSlots: on MySQL and MariaDB only the lowest
// listener sleeps; each other one waits for the user lock of the nearest
// slot below it, so that the server's KILLs meet no SLEEP but one. A
// notification from another process wakes them all; when the lowest
// listener leaves, the one above it is granted its slot's lock, gives it
// back without a wake-up and waits again, now as the lowest, and a new
// listener can take the freed slot.
func TestMySQLListenersWaitOnLowerSlots(t *testing.T) {
	tg := mysqlTarget(t)
	_, a, d, n := mysqlNotifier(t, tg.DSN)
	if dialect.TiDB(d) {
		t.Skip("TiDB listeners sleep and hold no slot")
	}
	_, b, _, _ := mysqlNotifier(t, tg.DSN)
	_, c, _, _ := mysqlNotifier(t, tg.DSN)
	_, e, _, _ := mysqlNotifier(t, tg.DSN)
	ctx := context.Background()
	channel := testChannel()

	la := listen(t, n, a, channel)
	idA := la.waitReady(t, a, channel)
	lb := listen(t, n, b, channel)
	idB := lb.waitReady(t, b, channel, idA)
	lc := listen(t, n, c, channel)
	idC := lc.waitReady(t, c, channel, idA, idB)

	// waits returns the state of each connection's running statement
	// ("User sleep" or "User lock"), once each is one of those.
	states := func(ids ...int64) []string {
		t.Helper()
		out := make([]string, len(ids))
		deadline := time.Now().Add(10 * time.Second)
		for i, id := range ids {
			for {
				err := e.QueryRowContext(ctx, "SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&out[i])
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					t.Fatal(err)
				}
				if out[i] == "User sleep" || out[i] == "User lock" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("connection %d: state %q 10 s on, want a wait", id, out[i])
				}
				time.Sleep(time.Millisecond)
			}
		}
		return out
	}
	if got, want := states(idA, idB, idC), []string{"User sleep", "User lock", "User lock"}; !slices.Equal(got, want) {
		t.Errorf("listeners of slots 0, 1 and 2 wait in %q, want %q", got, want)
	}

	send := notifyFromProcess(t, tg.DSN, channel, helperMode{})
	send()
	for _, l := range []*listening{la, lb, lc} {
		if p := l.next(t, "a notification from another process"); p != "" {
			t.Errorf("payload %q, want \"\"", p)
		}
	}

	// The lowest leaves: the next waits again, now asleep, and is not
	// woken for it.
	la.end(t)
	// Until B has taken slot 0 it still waits for it ("User lock"): poll
	// for the move, which must come.
	want := []string{"User sleep", "User lock"}
	got := states(idB, idC)
	for deadline := time.Now().Add(10 * time.Second); !slices.Equal(got, want) && time.Now().Before(deadline); got = states(idB, idC) {
		time.Sleep(5 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("after the lowest left, listeners of slots 1 and 2 wait in %q 10 s on, want %q", got, want)
	}
	select {
	case p := <-lb.got:
		t.Errorf("the listener above the one that left was woken (payload %q)", p)
	case <-time.After(50 * time.Millisecond):
	}
	ld := listen(t, n, e, channel)
	idD := ld.waitReady(t, e, channel, idB, idC)
	name, err := dialect.MySQLSlotName(ctx, e, channel, 0)
	if err != nil {
		t.Fatal(err)
	}
	var holder sql.NullInt64
	if err := e.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if holder.Int64 != idD {
		t.Errorf("slot 0 is held by %d, want the new listener's connection %d", holder.Int64, idD)
	}

	waitWaiting(t, b, idB)
	waitWaiting(t, c, idC)
	send()
	for _, l := range []*listening{lb, lc, ld} {
		if p := l.next(t, "a notification after the lowest listener left"); p != "" {
			t.Errorf("payload %q, want \"\"", p)
		}
	}
}

// TestTiDBWaitPattern: the pattern TiDB's Notify finds listeners by
// matches the wait of a listener with the tag it looks for, in this
// release's form and in the two-column form of earlier ones, and not the
// probe's wait, another prefix's, or a chained wait.
func TestTiDBWaitPattern(t *testing.T) {
	raw := testdb.Raw(t, testdb.Open(t, mysqlTarget(t)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const p = "sqlelect:ns:1234:"
	for _, c := range []struct {
		q    string
		want bool
	}{
		{dialect.MySQLWaitSQL(p, -1), true},
		{"SELECT SLEEP(60), '" + p + "'", true},
		{dialect.MySQLWaitSQL(p+"probe", -1), false},
		{dialect.MySQLWaitSQL("sqlelect:other:1234:", -1), false},
		{dialect.MySQLWaitSQL("x"+p, -1), false},
		{dialect.MySQLWaitSQL(p, 2), false},
	} {
		got, err := dialect.TiDBWaitMatches(ctx, raw, c.q, p)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%q matches tag %q: %v, want %v", c.q, p, got, c.want)
		}
	}
}
