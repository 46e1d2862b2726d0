package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqlelect/sqlelect/internal/faultproxy"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echoServer answers every line with the same line, until Close.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *echoServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// dialAndTrip connects and makes one round trip; a connection the proxy
// resets may fail in the dial already.
func dialAndTrip(addr, line string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = roundTrip(c, bufio.NewReader(c), line)
	return err
}

func TestForwards(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	for _, line := range []string{"hello", "second line", string(make([]byte, 100000))} {
		got, err := roundTrip(c, r, line)
		if err != nil {
			t.Fatal(err)
		}
		if got != line {
			t.Fatalf("echo returned %d bytes, want %d", len(got), len(line))
		}
	}
	if n := p.Live(); n != 1 {
		t.Fatalf("Live() = %d, want 1", n)
	}
}

func TestCutAndResume(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut() = false after Cut")
	}
	// The live connection is gone.
	if _, err := roundTrip(c, r, "after cut"); err == nil {
		t.Fatal("a connection cut by the proxy still answered")
	}
	// New connections are refused.
	if err := dialAndTrip(p.Addr(), "while cut"); err == nil {
		t.Fatal("a connection made while cut answered")
	}

	p.Resume()
	c3, r3 := dial(t, p.Addr())
	got, err := roundTrip(c3, r3, "resumed")
	if err != nil || got != "resumed" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
	fwd, refused := p.Stats()
	if fwd != 2 || refused != 1 {
		t.Fatalf("Stats() = %d forwarded, %d refused; want 2 and 1", fwd, refused)
	}
}

func TestDelay(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	const d = 50 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if _, err := roundTrip(c, r, "slow"); err != nil {
		t.Fatal(err)
	}
	// The request and the reply are each held back d: a lower bound, which
	// holds however slow the machine is.
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip with delay %v took %v, want at least %v", d, took, 2*d)
	}
	p.SetDelay(0)
	if got, err := roundTrip(c, r, "fast"); err != nil || got != "fast" {
		t.Fatalf("after SetDelay(0): %q, %v", got, err)
	}
}

// SetLatency holds every chunk back by the latency without holding back
// the chunks behind it: a request and its answer of 256 KiB each (at least
// eight chunks each way) take about two latencies, where chunks waiting for
// each other would take sixteen or more; the data arrives whole and in
// order; a latency of zero forwards at once again.
func TestLatency(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	const lat = 500 * time.Millisecond
	p.SetLatency(lat)
	start := time.Now()
	if _, err := roundTrip(c, r, "first"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*lat {
		t.Fatalf("round trip with latency %v took %v, want at least %v", lat, took, 2*lat)
	}
	var big strings.Builder
	for i := 0; big.Len() < 256<<10; i++ {
		big.WriteString(strconv.Itoa(i))
		big.WriteByte(' ')
	}
	line := big.String()
	start = time.Now()
	got, err := roundTrip(c, r, line)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if got != line {
		t.Fatalf("the answer of %d bytes came back as %d bytes, or out of order", len(line), len(got))
	}
	// About 2 × lat; the bound leaves four times that for a slow machine.
	if took >= 8*lat {
		t.Fatalf("a round trip of %d KiB each way took %v at a latency of %v: the chunks waited for each other", len(line)>>10, took, lat)
	}
	p.SetLatency(0)
	if got, err := roundTrip(c, r, "fast"); err != nil || got != "fast" {
		t.Fatalf("after SetLatency(0): %q, %v", got, err)
	}
}

// Freeze holds data back on live and new connections without closing them,
// and Thaw lets it through, in order.
func TestFreezeAndThaw(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	p.Freeze() // twice is once
	if !p.IsFrozen() {
		t.Fatal("IsFrozen() = false after Freeze")
	}
	for _, line := range []string{"held 1\n", "held 2\n"} {
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
	}
	// A new connection is accepted, and its data held too.
	c2, r2 := dial(t, p.Addr())
	if _, err := io.WriteString(c2, "new\n"); err != nil {
		t.Fatal(err)
	}
	for _, cr := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c, r}, {c2, r2}} {
		_ = cr.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		got, err := cr.r.ReadString('\n')
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read while frozen: %q, %v; want a timeout (held, not closed)", got, err)
		}
	}
	if fwd, refused := p.Stats(); fwd != 2 || refused != 0 {
		t.Fatalf("Stats() = %d forwarded, %d refused while frozen; want 2 and 0", fwd, refused)
	}
	p.Thaw()
	p.Thaw() // twice is once
	if p.IsFrozen() {
		t.Fatal("IsFrozen() = true after Thaw")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []string{"held 1\n", "held 2\n"} {
		if got, err := r.ReadString('\n'); err != nil || got != want {
			t.Fatalf("after Thaw: %q, %v; want %q", got, err, want)
		}
	}
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after Thaw: %q, %v", got, err)
	}
	if got, err := roundTrip(c, r, "after"); err != nil || got != "after" {
		t.Fatalf("round trip after Thaw: %q, %v", got, err)
	}
}

// A frozen connection is still torn down by Cut, and Close does not wait
// for a Thaw (goleak checks that no goroutine is left).
func TestFreezeThenCutAndClose(t *testing.T) {
	echo := newEcho(t)
	p, err := faultproxy.New(echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "x"); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	errc := make(chan error, 1)
	go func() {
		_, err := roundTrip(c, r, "held")
		errc <- err
	}()
	p.Cut()
	if err := <-errc; err == nil {
		t.Fatal("a round trip through a frozen, cut proxy succeeded")
	}
	p.Resume()
	c2, _ := dial(t, p.Addr())
	_, _ = io.WriteString(c2, "held\n")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// A delay far longer than the test is interrupted by Cut and by Close.
func TestCutInterruptsDelayedData(t *testing.T) {
	echo := newEcho(t)
	p := newProxy(t, echo.ln.Addr().String())
	c, r := dial(t, p.Addr())
	p.SetDelay(time.Hour)
	errc := make(chan error, 1)
	go func() {
		_, err := roundTrip(c, r, "never")
		errc <- err
	}()
	// Wait until the proxy has the connection, then cut it.
	for p.Live() == 0 {
		time.Sleep(time.Millisecond)
	}
	p.Cut()
	if err := <-errc; err == nil {
		t.Fatal("a delayed round trip succeeded through a cut")
	}
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := newProxy(t, addr)
	if err := dialAndTrip(p.Addr(), "hello"); err == nil {
		t.Fatal("round trip to a dead target succeeded")
	}
}

func TestCloseIdempotentAndStops(t *testing.T) {
	echo := newEcho(t)
	p, err := faultproxy.New(echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "x"); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(time.Hour)
	_, _ = io.WriteString(c, "stuck\n")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		// The port may in rare cases be reused by another listener; a
		// refused dial is what normally happens.
		t.Log("dial after Close succeeded (port reused?)")
	}
}

func TestOnlyLoopback(t *testing.T) {
	for _, target := range []string{"10.0.0.1:5432", "example.com:5432", "0.0.0.0:5432", "[2001:db8::1]:3306"} {
		if _, err := faultproxy.New(target); !errors.Is(err, faultproxy.ErrNotLoopback) {
			t.Errorf("New(%q) = %v, want ErrNotLoopback", target, err)
		}
	}
	for _, target := range []string{"no-port", "127.0.0.1:"} {
		if p, err := faultproxy.New(target); err == nil {
			p.Close()
			t.Errorf("New(%q) succeeded", target)
		}
	}
	for _, target := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1", "127.1.2.3:1"} {
		p, err := faultproxy.New(target)
		if err != nil {
			t.Errorf("New(%q): %v", target, err)
			continue
		}
		p.Close()
	}
}

func TestReplaceAddr(t *testing.T) {
	cases := []struct{ dsn, target, want string }{
		{"postgres://u:pw@127.0.0.1:5432/test?sslmode=disable", "127.0.0.1:5432", "postgres://u:pw@127.0.0.1:9/test?sslmode=disable"},
		{"postgresql://u@localhost/test", "localhost:5432", "postgresql://u@127.0.0.1:9/test"},
		{"mysql://root@tcp(127.0.0.1:3306)/test", "127.0.0.1:3306", "mysql://root@tcp(127.0.0.1:9)/test"},
		{"root:pw@tcp(localhost)/test?parseTime=true", "localhost:3306", "root:pw@tcp(127.0.0.1:9)/test?parseTime=true"},
	}
	for _, c := range cases {
		target, err := faultproxy.TargetOf(c.dsn)
		if err != nil || target != c.target {
			t.Errorf("TargetOf(%q) = %q, %v; want %q", c.dsn, target, err, c.target)
		}
		got, err := faultproxy.ReplaceAddr(c.dsn, "127.0.0.1:9")
		if err != nil || got != c.want {
			t.Errorf("ReplaceAddr(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
	}
	for _, dsn := range []string{"sqlite:x.db", "root@unix(/tmp/sock)/db", "root@tcp(127.0.0.1:3306/db"} {
		if _, err := faultproxy.ReplaceAddr(dsn, "127.0.0.1:9"); err == nil {
			t.Errorf("ReplaceAddr(%q) succeeded", dsn)
		}
	}
}

// The proxy in front of the real servers: a pool through it works, fails
// while cut, and works again after Resume.
func TestServers(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		if tg.Name == "sqlite" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			p, dsn, err := faultproxy.ForDSN(tg.DSN)
			if errors.Is(err, faultproxy.ErrNotLoopback) {
				t.Skipf("%s is not on the loopback interface", tg.Name)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			db := testdb.OpenDSN(t, dsn)
			sqlDB := testdb.Raw(t, db)
			ping := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var one int
				return sqlDB.QueryRowContext(ctx, "SELECT 1").Scan(&one)
			}
			if err := ping(); err != nil {
				t.Fatal(err)
			}
			p.Cut()
			if err := ping(); err == nil {
				t.Fatal("query through a cut proxy succeeded")
			}
			p.Resume()
			// The pool may hand out a connection that died in the cut once;
			// database/sql retries bad connections itself.
			if err := ping(); err != nil {
				if err = ping(); err != nil {
					t.Fatalf("after Resume: %v", err)
				}
			}
		})
	}
}
