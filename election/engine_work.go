package election

import (
	"context"
	"fmt"
	"sync"
)

// box is the lock of a driver's machines (an Elector's one, a Group's
// many) and the observer calls queued under it, which run in the order
// they were queued, once the lock is released: observers are never called
// with a lock of the library's held.
type box struct {
	mu       sync.Mutex
	notes    []func()
	flushing bool   // a goroutine runs the notes
	leading  int    // the machines leading (a Group's balancing counts them)
	stops    uint64 // leaderships ended, ever (a Group's round then takes its mark off their seats: RoundIn.Release)
	downs    stepDowns
}

func (b *box) lock() { b.mu.Lock() }

// unlock releases the lock, then runs the notes queued under it. A
// goroutine that finds another one running them leaves its notes to it,
// which keeps them in order.
func (b *box) unlock() {
	if b.flushing || len(b.notes) == 0 {
		b.mu.Unlock()
		return
	}
	b.flushing = true
	for len(b.notes) > 0 {
		batch := b.notes
		b.notes = nil
		b.mu.Unlock()
		for _, f := range batch {
			f()
		}
		b.mu.Lock()
	}
	b.flushing = false
	b.mu.Unlock()
}

// note queues f to run once the lock is released; the lock is held.
func (b *box) note(f func()) { b.notes = append(b.notes, f) }

// dispatcher runs a driver's callbacks (OnNewLeader, OnStoppedLeading, and
// the start of OnStartedLeading) in order on one goroutine, so that a slow
// callback delays the callbacks after it, never the election.
type dispatcher struct {
	mu     sync.Mutex
	queue  []func()
	closed bool
	signal chan struct{} // cap 1
	done   chan struct{} // closed when run returns
}

func newDispatcher() *dispatcher {
	return &dispatcher{signal: make(chan struct{}, 1), done: make(chan struct{})}
}

func (d *dispatcher) push(f func()) {
	d.mu.Lock()
	d.queue = append(d.queue, f)
	d.mu.Unlock()
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

// close makes run return once the queue is empty.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			closed := d.closed
			d.mu.Unlock()
			if closed {
				return
			}
			<-d.signal
			continue
		}
		f := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		d.mu.Unlock()
		f()
	}
}

// wait waits until run has returned or timeout is closed, and reports
// whether it returned.
func (d *dispatcher) wait(timeout <-chan struct{}) bool {
	select {
	case <-d.done:
		return true
	case <-timeout:
		return false
	}
}

// counter counts things in flight (leader work queued or running, calls
// that may grant a seat), so that a vacate waits until none is.
type counter struct {
	mu    sync.Mutex
	n     int
	empty chan struct{} // closed while n == 0
}

// closedChan is the empty channel of every counter at zero that has never
// counted: a Group of many namespaces makes two counters a namespace, and
// one channel shared by all of them is one allocation, not one each. Only
// the channels add makes are closed by done.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func newCounter() *counter {
	return &counter{empty: closedChan}
}

func (c *counter) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.empty = make(chan struct{})
	}
	c.n++
}

func (c *counter) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.empty)
	}
}

// wait returns a channel closed once nothing is counted.
func (c *counter) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.empty
}

// afterWork returns once the leader's work has returned and the calls in
// flight that may grant the seat are done, or, when ctx ends first, an
// error wrapping errWorkRunning and ctx's error.
func (m *machine) afterWork(ctx context.Context, op string) error {
	if m.workReturned() { // ctx's end does not matter then
		return nil
	}
	for _, c := range []<-chan struct{}{m.inflight.wait(), m.work.wait()} {
		select {
		case <-c:
		case <-ctx.Done():
			return fmt.Errorf("election: %s: %w: %w", op, errWorkRunning, ctx.Err())
		}
	}
	return nil
}

// workReturned reports whether the leader's work has returned and the
// calls in flight that may grant the seat are done.
func (m *machine) workReturned() bool {
	for _, c := range []<-chan struct{}{m.inflight.wait(), m.work.wait()} {
		select {
		case <-c:
		default:
			return false
		}
	}
	return true
}
