package session

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
	"time"
)

// Connection attempts that outlive their caller.
//
// A pool opens a connection under the context of the call that needs it. An
// election round's context is short (it ends with the round's trust window),
// and a connection can take longer than that to open: on PostgreSQL every
// connection is a new server process, and many processes starting at once on
// a small machine each took several hundred milliseconds. The driver then
// abandons the half-open connection, the next round starts another, and
// rounds fail for as long as the storm lasts, which is for ever when each
// attempt is slower than a round. patientConnector lets an attempt finish
// (bounded by its own timeout) after its caller gave up, and hands the
// connection to the next caller instead.

// connectTimeout bounds one connection attempt that its caller no longer
// waits for.
const connectTimeout = 30 * time.Second

// spareMaxAge is how long a connection opened for a caller that gave up is
// kept for the next one; an older one is closed unused.
const spareMaxAge = 10 * time.Second

type spare struct {
	conn driver.Conn
	at   time.Time
}

// patientConnector wraps a connector; see the comment above.
type patientConnector struct {
	inner driver.Connector

	// closing ends every attempt still under way when the pool closes.
	closing context.Context
	close   context.CancelFunc

	mu     sync.Mutex
	spares []spare
	closed bool
	wg     sync.WaitGroup // attempts still running after their caller left
}

func newPatientConnector(inner driver.Connector) *patientConnector {
	c := &patientConnector{inner: inner}
	c.closing, c.close = context.WithCancel(context.Background())
	return c
}

func (c *patientConnector) Driver() driver.Driver { return c.inner.Driver() }

// Connect returns a connection opened earlier for a caller that gave up,
// if one is fresh, and otherwise opens one, returning early with ctx's error
// when ctx ends first while the attempt goes on.
func (c *patientConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if conn := c.takeSpare(); conn != nil {
		return conn, nil
	}
	if ctx.Done() == nil {
		return c.inner.Connect(ctx)
	}
	type result struct {
		conn driver.Conn
		err  error
	}
	done := make(chan result, 1)
	var delivered, abandoned bool // guarded by c.mu
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("session: the pool is closed")
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), connectTimeout)
		defer cancel()
		defer context.AfterFunc(c.closing, cancel)()
		conn, err := c.inner.Connect(actx)
		c.mu.Lock()
		if abandoned {
			if err == nil && c.closed {
				c.mu.Unlock()
				conn.Close()
				return
			}
			if err == nil {
				c.spares = append(c.spares, spare{conn: conn, at: time.Now()})
				// Closed then if no caller took it.
				time.AfterFunc(spareMaxAge+time.Second, c.dropStale)
			}
			c.mu.Unlock()
			return
		}
		delivered = true
		c.mu.Unlock()
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		c.mu.Lock()
		if delivered {
			// It finished as the caller gave up: hand it over all the same.
			c.mu.Unlock()
			r := <-done
			return r.conn, r.err
		}
		abandoned = true
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// takeSpare returns the newest spare connection that is fresh and valid,
// and closes those that are not.
func (c *patientConnector) takeSpare() driver.Conn {
	c.dropStale()
	c.mu.Lock()
	var got driver.Conn
	var invalid []driver.Conn
	for got == nil && len(c.spares) > 0 {
		s := c.spares[len(c.spares)-1]
		c.spares = c.spares[:len(c.spares)-1]
		if valid(s.conn) {
			got = s.conn
		} else {
			invalid = append(invalid, s.conn)
		}
	}
	c.mu.Unlock()
	for _, conn := range invalid {
		conn.Close()
	}
	return got
}

// dropStale closes the spare connections that are too old to hand out.
func (c *patientConnector) dropStale() {
	c.mu.Lock()
	var drop []driver.Conn
	kept := make([]spare, 0, len(c.spares))
	for _, s := range c.spares {
		if time.Since(s.at) > spareMaxAge {
			drop = append(drop, s.conn)
		} else {
			kept = append(kept, s)
		}
	}
	c.spares = kept
	c.mu.Unlock()
	for _, d := range drop {
		d.Close()
	}
}

func valid(conn driver.Conn) bool {
	if v, ok := conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// Close closes the spare connections, ends the attempts still under way
// and, as sql.DB.Close would have done, closes the inner connector if it
// can be closed.
func (c *patientConnector) Close() error {
	c.close()
	c.mu.Lock()
	c.closed = true
	spares := c.spares
	c.spares = nil
	c.mu.Unlock()
	for _, s := range spares {
		s.conn.Close()
	}
	c.wg.Wait()
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}
