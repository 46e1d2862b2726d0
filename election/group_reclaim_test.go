package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupReclaimsAfterALateRenewal: a Group whose round is held up past
// its trust window steps down; the held round's renewal then lands, while
// the lease is still live, and extends a lease no process trusts. The
// Group's next round renews it as one of its own leases (no attempt, which
// a Group whose rounds were slow sheds) and leads again in the same term,
// on every database: the seat is not left led by nobody for a lease. Before
// the reclaim, no round read the seat until its lease neared its end.
func TestGroupReclaimsAfterALateRenewal(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		ns := testdb.Namespace(t)
		started := make(chan Lease, 8)
		stopped := make(chan Lease, 8)
		// Expire 3 s, trust 2 s: the held round gets through with a second
		// of the lease left.
		g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{
			Namespaces:       []string{ns},
			Interval:         time.Second,
			SafetyMargin:     time.Second,
			OnStartedLeading: func(_ context.Context, l Lease) { started <- l },
			OnStoppedLeading: func(l Lease) { stopped <- l },
		}, WithLogger(silent), WithExpire(3*time.Second))
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		var (
			hold  atomic.Bool  // hold the next call until the Group stepped down
			phase atomic.Int32 // 1: the held round ran; 2: the round after it reported
		)
		after := make(chan bool, 1) // whether the Group led after the round that followed the held one
		g.hooks.call = func(ctx context.Context) error {
			if !hold.CompareAndSwap(true, false) {
				return nil
			}
			select {
			case <-stopped:
				phase.Store(1)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		g.hooks.round = func(r roundReport) {
			switch phase.Load() {
			case 1:
				phase.Store(2) // the held round
			case 2:
				if r.err != nil {
					return
				}
				phase.Store(3)
				g.box.lock()
				leading := g.members[ns].m.cur != nil
				g.box.unlock()
				after <- leading
			}
		}
		runUntilCleanup(t, ctx, g)
		var first Lease
		select {
		case first = <-started:
		case <-time.After(waitLimit):
			t.Fatal("the Group never led")
		}
		hold.Store(true)
		select {
		case leading := <-after:
			if !leading {
				t.Fatal("the round after the late renewal did not lead again: the seat stays held by the Group, led by nobody, until its lease ends")
			}
		case <-time.After(waitLimit):
			t.Fatalf("no round after the held one (phase %d)", phase.Load())
		}
		select {
		case l := <-started:
			if l.Term != first.Term {
				t.Fatalf("led again in term %d, want the term it stepped down from, %d", l.Term, first.Term)
			}
		case <-time.After(waitLimit):
			t.Fatal("OnStartedLeading was not called again")
		}
	})
}
