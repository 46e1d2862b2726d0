package election_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// reentrantObserver calls its Group from every callback, as a metrics
// exporter that reads the Group's state might.
type reentrantObserver struct {
	election.NopObserver
	g     atomic.Pointer[election.Group]
	calls atomic.Int64
}

func (o *reentrantObserver) visit(ns string) {
	if g := o.g.Load(); g != nil {
		g.IsLeader(ns)
		g.Leading()
		o.calls.Add(1)
	}
}

func (o *reentrantObserver) Attempt(a election.Attempt)               { o.visit(a.Namespace) }
func (o *reentrantObserver) LeadershipStarted(ld election.Leadership) { o.visit(ld.Namespace) }
func (o *reentrantObserver) LeadershipStopped(ld election.Leadership) { o.visit(ld.Namespace) }

// TestGroupObserverCallsGroup: an Observer may call the Group's methods:
// the Group calls it without holding its lock (it deadlocked when the
// observer was called under it).
func TestGroupObserverCallsGroup(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		nss := groupNamespaces(t, 3)
		obs := &reentrantObserver{}
		g, err := election.NewGroup(testCtx(t), db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 100 * time.Millisecond},
			election.WithLogger(quiet), election.WithExpire(time.Second), election.WithObserver(obs))
		must(t, "NewGroup", err)
		obs.g.Store(g)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		// Starts, then renewals: twenty callbacks that each called the
		// Group. A deadlock shows as no progress, whatever the Group's own
		// methods would say.
		deadline := time.Now().Add(20 * time.Second)
		for obs.calls.Load() < 20 {
			if time.Now().After(deadline) {
				t.Fatalf("the observer made %d calls in 20 s: it is stuck calling the Group", obs.calls.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			must(t, "Run", err)
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return")
		}
	})
}

// TestGroupHandoffWakeObserved: a Group following a namespace is woken
// when its leader vacates the seat, takes it, and reports the wake to its
// Observer as an Elector does.
func TestGroupHandoffWakeObserved(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 1)
		e := mustElection(t, db, nss[0], election.WithExpire(10*time.Second))
		leader := uuid.New()
		if l, err := e.Elect(ctx, leader); err != nil || !l.HeldBy(leader) {
			t.Fatalf("Elect: %+v, %v", l, err)
		}
		obs := newGroupEvents("b", nil)
		// Long rounds: only the wake can make it take the seat within
		// the test's wait.
		b := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 5 * time.Second},
			election.WithExpire(10*time.Second), election.WithObserver(obs))
		_, from := obs.wait(t, 10*time.Second, "b's first round", 0, func(e groupEvent) bool {
			return e.kind == "attempt" && e.a.Outcome == election.OutcomeFollower
		})
		must(t, "Resign", e.Resign(ctx, leader))
		wake, _ := obs.wait(t, 4*time.Second, "b is woken", from, func(e groupEvent) bool { return e.kind == "wake" })
		// On PostgreSQL the vacating statement notifies, and the wake-up
		// in process follows its commit: the pool's listener may deliver
		// the notification first.
		local := wake.w.Source == "local" || (db.Dialector.Name() == "postgres" && wake.w.Source == "notify")
		if wake.w.Namespace != nss[0] || wake.w.Candidate != b.g.ID() || !local {
			t.Errorf("HandoffWake %+v, want namespace %s, candidate %s, source local", wake.w, nss[0], b.g.ID())
		}
		waitUntil(t, 4*time.Second, "b leads after the wake", func() bool { return b.g.IsLeader(nss[0]) })
		must(t, "b's Run", b.stop())
	})
}
