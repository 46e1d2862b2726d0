// Package faultproxy is a TCP proxy on the loopback interface for fault
// tests: it forwards connections to a database server and can cut them,
// refuse new ones, slow every chunk of data down, or hold all of it back for
// a while.
//
// A test points its DSN at Addr instead of the server (see ReplaceAddr),
// then calls Cut to make the database "go away" (every live connection is
// reset, new ones are reset as soon as they are accepted), Resume to bring it
// back, SetDelay or SetLatency to add latency, and Freeze and Thaw to stall
// every connection without closing it (a server or network that stops
// answering for a while, then carries on). Close stops the proxy and every
// goroutine it started.
//
// Only loopback targets are accepted, and the proxy listens on 127.0.0.1.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLoopback is returned by New and ReplaceAddr for a target that is not
// a loopback address.
var ErrNotLoopback = errors.New("faultproxy: target is not a loopback address")

// dialTimeout bounds the proxy's own connection to the target.
const dialTimeout = 5 * time.Second

// chunkSize is the largest piece of data forwarded at once.
const chunkSize = 32 << 10

// queueLen is how many chunks of one direction may wait out their latency
// (or a freeze) at once; the next read waits for room, as a full network
// buffer makes the sender wait.
const queueLen = 256

// Proxy forwards TCP connections from Addr to a target. Its methods are safe
// for concurrent use.
type Proxy struct {
	target  string
	ln      net.Listener
	delay   atomic.Int64 // nanoseconds
	latency atomic.Int64 // nanoseconds
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	cut      bool
	closed   bool
	conns    map[*link]struct{}
	accepted int
	refused  int
	frozen   chan struct{} // non-nil while frozen; Thaw closes it
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link is torn down
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		reset(l.client)
		reset(l.server)
	})
}

// reset closes c so that the peer sees a connection reset at once rather
// than an orderly end of stream.
func reset(c net.Conn) {
	if c == nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// New starts a proxy to target (host:port, a loopback address or
// "localhost") listening on 127.0.0.1 at a port of the system's choosing.
func New(target string) (*Proxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, stop: stop, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func checkLoopback(target string) error {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if port == "" {
		return fmt.Errorf("faultproxy: target %q has no port", target)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: %q", ErrNotLoopback, target)
	}
	return nil
}

// Addr returns the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut resets every live connection and resets new ones as soon as they are
// accepted, until Resume.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Resume lets new connections through again after Cut. Connections cut
// before stay closed.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// IsCut reports whether the proxy is refusing connections.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// SetDelay makes every chunk of data, in both directions, wait d after the
// proxy read it before it is forwarded. Zero (the default) forwards at once.
// Chunks of one direction are forwarded one at a time, in order.
func (p *Proxy) SetDelay(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.delay.Store(int64(d))
}

// SetLatency makes every chunk of data, in both directions, arrive d after
// the proxy read it, while the chunks behind it are read and wait their own
// d meanwhile: a link with latency d each way and no limit on throughput,
// so a request and its answer take 2d more, however many chunks the answer
// spans. Zero (the default) forwards at once. Chunks are forwarded in
// order; a chunk read before a change keeps the latency in force when it
// was read. SetDelay's wait, when both are set, comes first.
func (p *Proxy) SetLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.latency.Store(int64(d))
}

// Freeze holds back every chunk of data, in both directions, on every
// connection, live or accepted while frozen, without closing any: to the
// client the server stops answering, to the server the client goes quiet,
// as when a server or the network between them stalls. Data read while
// frozen is forwarded, in order, once Thaw is called. Freezing a frozen
// proxy does nothing.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

// Thaw ends Freeze: held data is forwarded at once (each chunk still waits
// out its latency, if any). Thawing a proxy that is not frozen does
// nothing.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// IsFrozen reports whether the proxy is holding data back (Freeze).
func (p *Proxy) IsFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen != nil
}

// gate returns the channel that Thaw closes while the proxy is frozen, and
// nil when it is not.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// Live returns the number of connections being forwarded.
func (p *Proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Stats returns how many connections were accepted and forwarded, and how
// many were refused (reset at once) while the proxy was cut or the target
// did not answer.
func (p *Proxy) Stats() (forwarded, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.refused
}

// Close stops listening, resets every connection and waits for all of the
// proxy's goroutines to end. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := p.takeLinks()
	p.mu.Unlock()
	p.stop()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

// takeLinks empties the set of live links; p.mu must be held.
func (p *Proxy) takeLinks() []*link {
	out := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		out = append(out, l)
	}
	clear(p.conns)
	return out
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (e.g. too many open files): back off
			// briefly rather than spin.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		if refuse {
			p.refused++
		}
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for client and forwards both ways.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.mu.Lock()
		p.refused++
		p.mu.Unlock()
		reset(client)
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.cut || p.closed {
		// Cut or Close came while dialing.
		p.refused++
		p.mu.Unlock()
		l.close()
		return
	}
	p.conns[l] = struct{}{}
	p.accepted++
	p.mu.Unlock()

	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(l, client, server) }()
	go func() { defer pipes.Done(); p.pipe(l, server, client) }()
	pipes.Wait()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies src to dst, holding each chunk back by the delay in force
// when it was read before it reads the next. Chunks of one direction go one
// at a time, in order, so a delay also caps throughput: fine for the
// request-and-answer traffic of a database protocol. Each chunk then waits,
// in a queue to a writer of its own, until its latency has passed since it
// was read and while the proxy is frozen. Any error on either side tears
// the whole link down, once the chunks read before it were forwarded.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	type chunk struct {
		data []byte
		due  time.Time // zero: at once
	}
	queue := make(chan chunk, queueLen)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		defer l.close()
		for c := range queue {
			if wait := time.Until(c.due); !c.due.IsZero() && wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-l.done:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if g := p.gate(); g != nil {
				select {
				case <-l.done:
					return
				case <-g:
				}
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer func() { <-wrote }()
	defer close(queue)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read := time.Now()
			if d := time.Duration(p.delay.Load()); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-l.done:
					t.Stop()
					return
				case <-t.C:
				}
			}
			c := chunk{data: slices.Clone(buf[:n])}
			if lat := time.Duration(p.latency.Load()); lat > 0 {
				c.due = read.Add(lat)
			}
			select {
			case <-l.done:
				return
			case queue <- c:
			}
		}
		if err != nil {
			return
		}
	}
}

// ReplaceAddr returns dsn with its host and port replaced by addr, for
// pointing a PostgreSQL or MySQL DSN at a proxy. It understands
// postgres:// and postgresql:// URLs, mysql://user:pass@tcp(host:port)/db and
// the mysql driver's user:pass@tcp(host:port)/db form.
func ReplaceAddr(dsn, addr string) (string, error) {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("faultproxy: cannot parse the postgres DSN")
		}
		u.Host = addr
		return u.String(), nil
	}
	open := strings.Index(dsn, "@tcp(")
	if open < 0 {
		return "", errors.New("faultproxy: DSN has neither a postgres URL nor a mysql @tcp(host:port) address")
	}
	start := open + len("@tcp(")
	end := strings.Index(dsn[start:], ")")
	if end < 0 {
		return "", errors.New("faultproxy: mysql DSN has an unterminated tcp( address")
	}
	return dsn[:start] + addr + dsn[start+end:], nil
}

// TargetOf returns the host:port a PostgreSQL or MySQL DSN connects to, with
// the database's default port when the DSN names none.
func TargetOf(dsn string) (string, error) {
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("faultproxy: cannot parse the postgres DSN")
		}
		host, port := u.Hostname(), u.Port()
		if host == "" {
			host = "localhost"
		}
		if port == "" {
			port = "5432"
		}
		return net.JoinHostPort(host, port), nil
	}
	open := strings.Index(dsn, "@tcp(")
	if open < 0 {
		return "", errors.New("faultproxy: DSN has neither a postgres URL nor a mysql @tcp(host:port) address")
	}
	start := open + len("@tcp(")
	end := strings.Index(dsn[start:], ")")
	if end < 0 {
		return "", errors.New("faultproxy: mysql DSN has an unterminated tcp( address")
	}
	addr := dsn[start : start+end]
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "3306")
	}
	return addr, nil
}

// ForDSN starts a proxy to the server dsn names and returns it with dsn
// rewritten to go through it. The server must be on the loopback interface.
func ForDSN(dsn string) (*Proxy, string, error) {
	target, err := TargetOf(dsn)
	if err != nil {
		return nil, "", err
	}
	p, err := New(target)
	if err != nil {
		return nil, "", err
	}
	proxied, err := ReplaceAddr(dsn, p.Addr())
	if err != nil {
		p.Close()
		return nil, "", err
	}
	return p, proxied, nil
}
