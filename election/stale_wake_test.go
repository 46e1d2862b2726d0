package election

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/handoff"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestStaleWakeKeepsTheSitOut: a handoff wake-up naming another candidate
// ends the sit-out after a candidate's own Resign only when that candidate
// has taken the seat since (a later term). A wake-up that comes late, or a
// second time (in the process and through the database), from a vacate
// before the Resign finds the seat still in the term the candidate gave up:
// the candidate does not take it back, and sits its time out.
func TestStaleWakeKeepsTheSitOut(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ns := testdb.Namespace(t)
			const interval = 3 * time.Second
			a := newRecordedElector(t, newTestElection(t, db, ns, 10*time.Second), &seq{}, ElectorConfig{Interval: interval})
			startRun(t, a.el)
			st, _ := a.waitLeading(0)
			if err := a.el.Resign(electorCtx(t)); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			// The sit-out began before Resign returned.
			resigned := time.Now()
			from := a.rounds.len()
			a.el.signal(signal{kind: sigWake, src: handoff.Local, vacated: uuid.New()})
			next, _ := a.waitRound("the round after the stale wake-up", from, func(roundReport) bool { return true })
			if next.cause != causeWakeLocal || !next.lease.Vacant() {
				t.Fatalf("after a stale wake-up: a %s round, lease %+v; want the wake-up's round, finding the seat vacant", next.cause, next.lease)
			}
			// Once the sit-out has ended, by its tick, or by a wake-up that
			// names no namespace (on the MySQL family, any vacate in the
			// database, such as those of other tests run beside this one).
			var wonAt time.Time
			won, _ := a.waitRound("A's next term", from, func(rr roundReport) bool {
				if rr.lease.HeldBy(a.el.ID()) {
					wonAt = time.Now()
					return true
				}
				return false
			})
			if d := wonAt.Sub(resigned); won.cause == causeWakeLocal || d < interval/2 || won.lease.Term != st.lease.Term+1 {
				t.Fatalf("A took the seat back %v after its Resign, in a %s round, term %d; want no sooner than its sit-out of %v ends, term %d",
					d, won.cause, won.lease.Term, interval, st.lease.Term+1)
			}

			// A genuine wake-up still ends the sit-out: another candidate
			// takes the seat after A's Resign and vacates it.
			handBackByAnother(t, a, db, ns)
		})
	}
}

// TestGroupStaleWakeKeepsTheSitOut is TestStaleWakeKeepsTheSitOut for a
// Group: after its Resign of a namespace, a stale wake-up there does not
// make it take the seat back before its sit-out ends.
func TestGroupStaleWakeKeepsTheSitOut(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		ns := testdb.Namespace(t)
		const interval = 3 * time.Second
		started := make(chan time.Time, 4)
		g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{
			Namespaces:       []string{ns},
			Interval:         interval,
			OnStartedLeading: func(context.Context, Lease) { started <- time.Now() },
		}, WithLogger(silent), WithExpire(10*time.Second))
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		runUntilCleanup(t, ctx, g)
		select {
		case <-started:
		case <-time.After(waitLimit):
			t.Fatal("the Group never led")
		}
		if err := g.Resign(ctx, ns); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		// The sit-out began before Resign returned.
		resigned := time.Now()
		g.box.lock()
		mem := g.members[ns]
		g.box.unlock()
		g.wake(mem, signal{kind: sigWake, src: handoff.Local, vacated: uuid.New()})
		select {
		case at := <-started:
			if d := at.Sub(resigned); d < interval/2 {
				t.Fatalf("the Group led again %v after its Resign, after a stale wake-up; want no sooner than its sit-out of %v ends", d, interval)
			}
		case <-time.After(waitLimit):
			t.Fatal("the Group never led again")
		}
	})
}
