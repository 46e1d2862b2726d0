package election

import (
	"slices"
	"sync"
	"time"
)

// fakeClock is the engine's clock moved by the test alone: its timers
// fire when Advance passes their time, on Advance's goroutine (AfterFunc)
// or on their channel (NewTimer).
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	lastD  time.Duration // the duration of the last AfterFunc
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

type fakeTimer struct {
	c  *fakeClock
	at time.Time
	on bool
	f  func()
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), on: true, f: f}
	c.timers = append(c.timers, t)
	c.lastD = d
	return t
}

func (c *fakeClock) NewTimer(d time.Duration) chanTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), on: true, ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	return t
}

// Stop and Reset drop a value the timer's channel holds and nobody
// received, as time.Timer's do since Go 1.23.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.on
	t.on = false
	t.drain()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.on
	t.at, t.on = t.c.now.Add(d), true
	t.drain()
	return was
}

func (t *fakeTimer) drain() {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// set moves the clock to at, forwards or back, firing nothing.
func (c *fakeClock) set(at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
}

// last returns the duration the last AfterFunc was given.
func (c *fakeClock) last() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastD
}

// Advance moves the clock forward by d and fires, in time order, the
// timers whose time has come.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if t.on && !t.at.After(c.now) {
			t.on = false
			due = append(due, t)
		}
	}
	now := c.now
	c.mu.Unlock()
	slices.SortFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		if t.f != nil {
			t.f()
		} else {
			select {
			case t.ch <- now:
			default:
			}
		}
	}
}

// useClock makes el run on c; before Run.
func (el *Elector) useClock(c clock) {
	el.clk = c
	el.m.clk = c
}

// useClock makes g run on c; before Run.
func (g *Group) useClock(c clock) {
	g.box.lock()
	defer g.box.unlock()
	g.clk = c
	for _, mem := range g.members {
		mem.m.clk = c
	}
}
