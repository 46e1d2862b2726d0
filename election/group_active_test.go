package election

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupRoundsLeaveRestingSeatsOff: a Group that follows in every
// namespace (another Group leads them all) soon takes none of them into
// its rounds' walk: each is at rest, its seat last read as the leader's
// live lease. At rest, a namespace is still counted (the share, the
// round's count), can be left, and its seat is taken once the leader
// stops renewing: the round's range read, or the lease's edge, finds the
// lapse. The leader then walks every namespace it took.
func TestGroupRoundsLeaveRestingSeatsOff(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		const n, expire = 12, 2 * time.Second
		nss := make([]string, n)
		for i := range nss {
			nss[i] = testdb.Namespace(t)
		}
		failed := &failedRounds{seen: map[string]bool{}}
		newGroup := func() *Group {
			g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss}, WithExpire(expire), WithLogger(silent),
				WithObserver(failed))
			if err != nil {
				t.Fatalf("NewGroup: %v", err)
			}
			return g
		}
		leader, follower := newGroup(), newGroup()
		var stalled, followerStalled atomic.Bool
		stallWhile(leader, &stalled)
		stallWhile(follower, &followerStalled)
		walked := func(g *Group) (listed []string, resting int) {
			g.box.lock()
			defer g.box.unlock()
			for _, mem := range g.active.list {
				listed = append(listed, mem.ns)
			}
			return listed, g.active.resting
		}
		waitFor := func(what string, within time.Duration, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(within); !ok(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					l, r := walked(follower)
					t.Fatalf("after %v: not %s (leader leads %d, follower %d; the follower walks %v, %d at rest)",
						within, what, len(leader.Leading()), len(follower.Leading()), l, r)
				}
			}
		}
		runUntilCleanup(t, ctx, leader)
		waitFor("the leader leads every namespace", 10*time.Second, func() bool { return len(leader.Leading()) == n })

		var rounds atomic.Int32
		follower.hooks.round = func(r roundReport) {
			if r.err == nil {
				rounds.Add(1)
			}
		}
		runUntilCleanup(t, ctx, follower)
		waitFor("every namespace at rest in the follower", 10*time.Second, func() bool {
			l, r := walked(follower)
			return len(l) == 0 && r == n
		})
		from := rounds.Load()
		waitFor("two more rounds of the follower", 10*time.Second, func() bool { return rounds.Load() >= from+2 })
		if l, r := walked(follower); len(l) != 0 || r != n {
			t.Fatalf("after two more rounds the follower walks %v, %d at rest; want none, %d", l, r, n)
		}
		if got := len(follower.Leading()); got != 0 {
			t.Fatalf("the follower leads %d namespaces while the leader renews them all", got)
		}

		// A failed round is reported in every namespace, at rest too.
		failed.from(follower.ID())
		followerStalled.Store(true)
		waitFor("a failed round reported in every namespace", 10*time.Second, func() bool { return failed.count() == n })
		followerStalled.Store(false)

		// A namespace at rest can be left, and is no longer counted.
		if err := follower.Leave(ctx, nss[0]); err != nil {
			t.Fatalf("Leave of a namespace at rest: %v", err)
		}
		if _, r := walked(follower); r != n-1 {
			t.Fatalf("%d at rest after a Leave, want %d", r, n-1)
		}
		var rows int64
		if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE candidate_id = ? AND namespace = ?",
			follower.ID().String(), nss[0]).Scan(&rows).Error; err != nil || rows != 0 {
			t.Fatalf("the follower's candidate row of the namespace it left: %d rows, %v", rows, err)
		}

		// The leader stops renewing: the follower takes every seat it
		// still joins within the lease and two intervals.
		stalled.Store(true)
		waitFor("the follower leads every namespace it joined", expire+2*follower.t.interval+5*time.Second, func() bool {
			return len(follower.Leading()) == n-1
		})
		l, r := walked(follower)
		slices.Sort(l)
		if want := slices.Sorted(slices.Values(nss[1:])); r != 0 || !slices.Equal(l, want) {
			t.Errorf("leading all, the follower walks %v with %d at rest; want every namespace it joined, none at rest", l, r)
		}
	})
}

// failedRounds records the namespaces in which one candidate's rounds
// were reported as failed, from the call of from on.
type failedRounds struct {
	NopObserver
	mu   sync.Mutex
	id   uuid.UUID
	seen map[string]bool
}

func (o *failedRounds) from(id uuid.UUID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.id, o.seen = id, map[string]bool{}
}

func (o *failedRounds) Attempt(a Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if a.Outcome == OutcomeError && a.Candidate == o.id && o.id != uuid.Nil {
		o.seen[a.Namespace] = true
	}
}

func (o *failedRounds) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.seen)
}
