package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	drv "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/faultproxy"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// secret is the password of every DSN here: long and odd, so that finding
// it (or its escaped forms) anywhere means it leaked.
const secret = "Pw-7fQ@x:9/Lm%Zr#2"

// secretForms are the ways secret can be written in a DSN.
var secretForms = []string{secret, url.QueryEscape(secret), url.PathEscape(secret), url.UserPassword("u", secret).String()[2:]}

// assertNoSecret fails t when s shows the password.
func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, form := range secretForms {
		if strings.Contains(s, form) {
			t.Errorf("%s shows the password (as %q):\n%s", what, form, s)
		}
	}
}

// assertErrorClean checks every error in err's chain, printed every usual
// way.
func assertErrorClean(t *testing.T, what string, err error) {
	t.Helper()
	seen := 0
	var walk func(e error)
	walk = func(e error) {
		if e == nil || seen > 50 {
			return
		}
		seen++
		for _, verb := range []string{"%v", "%+v", "%s", "%q", "%#v"} {
			assertNoSecret(t, fmt.Sprintf("%s (%s of %T)", what, verb, e), fmt.Sprintf(verb, e))
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentServer accepts connections and never answers, until the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

func pgDSN(user, addr, db, params string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, secret), Host: addr, Path: "/" + db, RawQuery: params}
	return u.String()
}

func myDSN(user, addr, db, params string) string {
	dsn := "mysql://" + user + ":" + secret + "@tcp(" + addr + ")/" + db
	if params != "" {
		dsn += "?" + params
	}
	return dsn
}

// hostOf returns the host:port of a configured server DSN.
func hostOf(t *testing.T, dsn string) string {
	t.Helper()
	addr, err := faultproxy.TargetOf(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestOpenErrorsHideThePassword opens DSNs with a password that cannot
// work, in every way that fails: a bad form, a closed port, a server that
// never answers, and real servers that reject the user or database. No
// error, in any of its wrapped parts, shows the password.
func TestOpenErrorsHideThePassword(t *testing.T) {
	// Capture what the mysql driver logs on its own.
	var driverLog lockedBuffer
	_ = drv.SetLogger(&driverLog)
	t.Cleanup(func() { _ = drv.SetLogger(drv.Logger(nil)) })

	closed, silent := closedPort(t), silentServer(t)
	type tcase struct {
		name string
		dsn  string
		want error // a sentinel the error must match, or nil for any
	}
	cases := []tcase{
		{"postgres closed port", pgDSN("postgres", closed, "test", "sslmode=disable"), session.ErrUnreachable},
		{"postgres silent server", pgDSN("postgres", silent, "test", "sslmode=disable&connect_timeout=1"), session.ErrUnreachable},
		{"postgres password parameter", "postgres://u@" + closed + "/db?sslmode=disable&password=" + url.QueryEscape(secret), session.ErrUnreachable},
		{"postgres bad sslmode", pgDSN("u", closed, "db", "sslmode=bogus"), session.ErrDSN},
		{"postgres bad sslmode, password parameter", "postgres://u@h/db?sslmode=bogus&password=" + url.QueryEscape(secret), session.ErrDSN},
		{"postgres bad port", pgDSN("u", "127.0.0.1:99999", "db", ""), session.ErrDSN},
		{"postgres unescaped password", "postgres://u:" + secret + "@127.0.0.1:1/db", session.ErrDSN},
		{"postgres broken escape", "postgres://u:" + url.PathEscape(secret) + "@127.0.0.1:1/db%zz", session.ErrDSN},
		{"postgres mixed-case scheme", "PostgreSQL://u:" + url.QueryEscape(secret) + "@" + closed + "/db?sslmode=disable", session.ErrUnreachable},
		{"mysql closed port", myDSN("root", closed, "test", ""), session.ErrUnreachable},
		{"mysql silent server", myDSN("root", silent, "test", "timeout=1s&readTimeout=1s"), session.ErrUnreachable},
		{"mysql driver form", "root:" + secret + "@tcp(" + closed + ")/test", session.ErrUnreachable},
		{"mysql bad parameter", myDSN("root", closed, "test", "parseTime=maybe"), session.ErrDSN},
		{"mysql unterminated address", "mysql://root:" + secret + "@tcp(" + closed + "/test", session.ErrDSN},
		{"mysql bad escape", myDSN("root", closed, "test", "x=%zz"), session.ErrDSN},
	}
	for _, tg := range testdb.Targets(t) {
		switch tg.Name {
		case "postgres":
			addr := hostOf(t, tg.DSN)
			cases = append(cases,
				tcase{"postgres server, unknown role", pgDSN("no_such_role_sqlelect", addr, "test", "sslmode=disable"), session.ErrUnreachable},
				tcase{"postgres server, unknown database", pgDSN("postgres", addr, "no_such_db_sqlelect", "sslmode=disable"), session.ErrUnreachable})
		case "mysql":
			addr := hostOf(t, tg.DSN)
			cases = append(cases,
				tcase{"mysql server, wrong password", myDSN("root", addr, "test", ""), session.ErrUnreachable},
				tcase{"mysql server, unknown user", myDSN("no_such_user_sqlelect", addr, "test", ""), session.ErrUnreachable})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db, err := session.Open(c.dsn)
			if err == nil {
				testdb.Close(db)
				t.Fatal("Open succeeded")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
			assertErrorClean(t, "Open's error", err)
			t.Log(err)
		})
	}
	assertNoSecret(t, "the mysql driver's log", driverLog.String())
}

// lockedBuffer is a bytes.Buffer for concurrent writers, usable as a slog
// or mysql driver log destination.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Print implements the mysql driver's Logger.
func (b *lockedBuffer) Print(v ...any) {
	_, _ = fmt.Fprintln(b, v...)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// passwordDSN returns a DSN for tg's server, through proxy address addr,
// that carries the secret password and works: PostgreSQL here trusts
// loopback connections and ignores the password; MySQL gets a user of its
// own with that password.
func passwordDSN(t *testing.T, tg testdb.Target, addr string) string {
	t.Helper()
	switch tg.Name {
	case "postgres":
		u, err := url.Parse(tg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), secret)
		u.Host = addr
		return u.String()
	case "mysql":
		admin := testdb.OpenDSN(t, tg.DSN)
		const user = "sqlelect_pwtest"
		var dbName string
		if err := admin.Raw("SELECT DATABASE()").Row().Scan(&dbName); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{
			"CREATE USER IF NOT EXISTS '" + user + "'@'127.0.0.1' IDENTIFIED BY '" + secret + "'",
			"ALTER USER '" + user + "'@'127.0.0.1' IDENTIFIED BY '" + secret + "'",
			"GRANT ALL ON `" + dbName + "`.* TO '" + user + "'@'127.0.0.1'",
		} {
			if err := admin.Exec(stmt).Error; err != nil {
				t.Skipf("cannot make a MySQL user with a password: %v", err)
			}
		}
		return myDSN(user, addr, dbName, "")
	}
	return ""
}

// TestLogsHideThePassword runs an Elector with a password in its DSN
// against a database that goes away and comes back, and captures every
// log line (the Election's slog output at debug level, and the mysql
// driver's own log): none shows the password.
func TestLogsHideThePassword(t *testing.T) {
	var driverLog lockedBuffer
	_ = drv.SetLogger(&driverLog)
	t.Cleanup(func() { _ = drv.SetLogger(drv.Logger(nil)) })
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "sqlite" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Open(t, tg) // migrated
			p, err := faultproxy.New(hostOf(t, tg.DSN))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			dsn := passwordDSN(t, tg, p.Addr())
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			db, err := session.Open(dsn)
			if err != nil {
				t.Fatalf("opening through the proxy: %v", err)
			}
			t.Cleanup(func() { testdb.Close(db) })
			assertNoSecret(t, "the gorm handle", fmt.Sprintf("%+v", db.Config.Dialector))
			runElectorThroughOutage(t, db, p, logger, &logs)
			assertNoSecret(t, "the election log", logs.String())
			if !strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("the outage was not logged:\n%s", logs.String())
			}
		})
	}
	assertNoSecret(t, "the mysql driver's log", driverLog.String())
}

// runElectorThroughOutage leads with an Elector, cuts the proxy until a
// failed round is logged, resumes, and waits to lead again.
func runElectorThroughOutage(t *testing.T, db *gorm.DB, p *faultproxy.Proxy, logger *slog.Logger, logs *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)), election.WithExpire(600*time.Millisecond), election.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	leading := make(chan election.Lease, 16)
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		OnStartedLeading: func(ctx context.Context, l election.Lease) { leading <- l },
		ShutdownTimeout:  2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, ctx, "leading", leading)
	p.Cut()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "level=WARN") {
		if time.Now().After(deadline) {
			t.Fatal("no warning logged while the database was away")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Past the trust window the Elector has stepped down.
	for el.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("still leading while the database was away")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A direct call fails too, and its error is clean.
	callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = e.Leader(callCtx)
	callCancel()
	if err == nil {
		t.Error("Leader succeeded through a cut proxy")
	}
	assertErrorClean(t, "Leader's error during the outage", err)
	p.Resume()
	waitFor(t, ctx, "leading again", leading)
}

func waitFor(t *testing.T, ctx context.Context, what string, ch <-chan election.Lease) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
	}
}
