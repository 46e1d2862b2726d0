package election_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
)

// groupEvent is one call of a Group's observer.
type groupEvent struct {
	kind string // "attempt", "started", "stopped", "wake"
	ns   string
	a    election.Attempt
	ld   election.Leadership
	w    election.Wake
	at   time.Time // local clock, when the observer was called
}

func (e groupEvent) String() string {
	switch e.kind {
	case "attempt":
		return fmt.Sprintf("attempt %s %s term %d (%v)", e.ns, e.a.Outcome, e.a.Lease.Term, e.a.Duration.Round(time.Microsecond))
	case "stopped":
		return fmt.Sprintf("stopped %s term %d (%s)", e.ns, e.ld.Lease.Term, e.ld.Reason)
	case "started":
		return fmt.Sprintf("started %s term %d", e.ns, e.ld.Lease.Term)
	}
	return e.kind + " " + e.ns
}

// groupEvents is an Observer that keeps every call, for tests to wait on,
// and feeds a checker's recorder (through an electiontest.Observer).
type groupEvents struct {
	rec *electiontest.Observer // nil: none

	mu     sync.Mutex
	events []groupEvent
	signal chan struct{} // cap 1: an event was added
}

func newGroupEvents(name string, rec *electiontest.Recorder) *groupEvents {
	o := &groupEvents{signal: make(chan struct{}, 1)}
	if rec != nil {
		o.rec = electiontest.NewObserver(rec, name)
	}
	return o
}

func (o *groupEvents) add(e groupEvent) {
	e.at = time.Now()
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

func (o *groupEvents) Attempt(a election.Attempt) {
	if o.rec != nil {
		o.rec.Attempt(a)
	}
	o.add(groupEvent{kind: "attempt", ns: a.Namespace, a: a})
}

func (o *groupEvents) LeadershipStarted(ld election.Leadership) {
	if o.rec != nil {
		o.rec.LeadershipStarted(ld)
	}
	o.add(groupEvent{kind: "started", ns: ld.Namespace, ld: ld})
}

func (o *groupEvents) LeadershipStopped(ld election.Leadership) {
	if o.rec != nil {
		o.rec.LeadershipStopped(ld)
	}
	o.add(groupEvent{kind: "stopped", ns: ld.Namespace, ld: ld})
}

func (o *groupEvents) SteppedDown(election.Leadership) {}

func (o *groupEvents) HandoffWake(w election.Wake) {
	o.add(groupEvent{kind: "wake", ns: w.Namespace, w: w})
}

// mark is the index of the next event.
func (o *groupEvents) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.events)
}

// since returns the events from index from on.
func (o *groupEvents) since(from int) []groupEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]groupEvent(nil), o.events[from:]...)
}

// wait returns the first event from index from on that pred accepts, and
// the index after it; it fails t after within.
func (o *groupEvents) wait(t testing.TB, within time.Duration, what string, from int, pred func(groupEvent) bool) (groupEvent, int) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		for i := from; i < len(o.events); i++ {
			if pred(o.events[i]) {
				e := o.events[i]
				o.mu.Unlock()
				return e, i + 1
			}
		}
		from = len(o.events)
		o.mu.Unlock()
		select {
		case <-o.signal:
		case <-deadline.C:
			t.Fatalf("after %v: no event: %s", within, what)
			return groupEvent{}, 0
		}
	}
}

// stopsOf returns the leadership ends in namespace ns among events.
func stopsOf(events []groupEvent, ns string) []groupEvent {
	var out []groupEvent
	for _, e := range events {
		if e.kind == "stopped" && e.ns == ns {
			out = append(out, e)
		}
	}
	return out
}

// runGroup makes and runs a Group for candidate id on db with cfg as given
// (its callbacks included).
func runGroup(t *testing.T, db *gorm.DB, id uuid.UUID, cfg election.GroupConfig, opts ...election.Option) *groupRun {
	t.Helper()
	opts = append([]election.Option{election.WithLogger(quiet)}, opts...)
	g, err := election.NewGroup(testCtx(t), db, id, cfg, opts...)
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupRun{g: g, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = g.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
		}
	})
	return r
}

// recordedWork is leader work that records its lease in rec and, once
// cancelled, its release.
func recordedWork(name string, rec *electiontest.Recorder) func(context.Context, election.Lease) {
	return func(ctx context.Context, l election.Lease) {
		rec.Observe(name, l)
		<-ctx.Done()
		rec.Released(l)
	}
}
