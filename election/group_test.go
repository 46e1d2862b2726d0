package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/models"
)

// groupNamespaces returns n namespaces no other test uses.
func groupNamespaces(t testing.TB, n int) []string {
	base := testdb.Namespace(t)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%03d", base, i)
	}
	return out
}

// groupRun is a running Group.
type groupRun struct {
	g      *election.Group
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // Run's, once done is closed
}

// stop ends the Group's Run and returns its error.
func (r *groupRun) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// startGroup makes and runs a Group on db. An electiontest.Observer
// records its leases and the terms it gives up in rec; its leader work
// records its lease and, before returning, the release (the Group vacates
// only after the work returned).
func startGroup(t *testing.T, db *gorm.DB, name string, rec *electiontest.Recorder, cfg election.GroupConfig, opts ...election.Option) *groupRun {
	t.Helper()
	id := uuid.New()
	cfg.OnStartedLeading = func(ctx context.Context, l election.Lease) {
		rec.Observe(name, l)
		<-ctx.Done()
		rec.Released(l)
	}
	opts = append([]election.Option{election.WithLogger(quiet), election.WithObserver(electiontest.NewObserver(rec, name))}, opts...)
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

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGroupMisuse: bad input to NewGroup, Join, Leave and Run returns the
// documented error and writes nothing.
func TestGroupMisuse(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 3)
		id := uuid.New()
		for _, c := range []struct {
			name string
			want error
			id   uuid.UUID
			cfg  election.GroupConfig
			opts []election.Option
		}{
			{"nil id", election.ErrInvalidCandidate, uuid.Nil, election.GroupConfig{Namespaces: nss}, nil},
			{"no namespace", election.ErrInvalidNamespace, id, election.GroupConfig{}, nil},
			{"empty namespace", election.ErrInvalidNamespace, id, election.GroupConfig{Namespaces: []string{nss[0], ""}}, nil},
			{"NUL in a namespace", election.ErrInvalidNamespace, id, election.GroupConfig{Namespaces: []string{"a\x00b"}}, nil},
			{"namespace too long", election.ErrInvalidNamespace, id, election.GroupConfig{Namespaces: []string{strings.Repeat("n", election.MaxNamespaceLen+1)}}, nil},
			{"duplicate", election.ErrInvalidNamespace, id, election.GroupConfig{Namespaces: []string{nss[0], nss[1], nss[0]}}, nil},
			{"WithNamespace", election.ErrInvalidOption, id, election.GroupConfig{Namespaces: nss}, []election.Option{election.WithNamespace("x")}},
			{"Interval above half the window", election.ErrInvalidOption, id, election.GroupConfig{Namespaces: nss, Interval: time.Hour}, nil},
			{"negative ShutdownTimeout", election.ErrInvalidOption, id, election.GroupConfig{Namespaces: nss, ShutdownTimeout: -1}, nil},
			{"nil Option", election.ErrInvalidOption, id, election.GroupConfig{Namespaces: nss}, []election.Option{nil}},
		} {
			if _, err := election.NewGroup(ctx, db, c.id, c.cfg, c.opts...); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		//lint:ignore SA1012 a nil context is the input under test
		if _, err := election.NewGroup(nil, db, id, election.GroupConfig{Namespaces: nss}); !errors.Is(err, election.ErrInvalidOption) { //nolint:staticcheck
			t.Errorf("nil context: %v, want ErrInvalidOption", err)
		}
		var n int64
		must(t, "count", db.Model(&models.Candidate{}).Where("namespace IN ?", nss).Count(&n).Error)
		if n != 0 {
			t.Errorf("refused calls wrote %d candidate rows", n)
		}

		g, err := election.NewGroup(ctx, db, id, election.GroupConfig{Namespaces: nss[:2]}, election.WithLogger(quiet))
		must(t, "NewGroup", err)
		if err := g.Join(nss[0]); !errors.Is(err, election.ErrInvalidNamespace) {
			t.Errorf("Join of a joined namespace: %v, want ErrInvalidNamespace", err)
		}
		if err := g.Join(""); !errors.Is(err, election.ErrInvalidNamespace) {
			t.Errorf("Join(\"\"): %v, want ErrInvalidNamespace", err)
		}
		if err := g.Leave(ctx, nss[2]); !errors.Is(err, election.ErrUnknownNamespace) {
			t.Errorf("Leave of a namespace not joined: %v, want ErrUnknownNamespace", err)
		}
		if got := g.Namespaces(); !slices.Equal(got, nss[:2]) {
			t.Errorf("Namespaces after refused calls: %v, want %v", got, nss[:2])
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- g.Run(rctx) }()
		waitUntil(t, 20*time.Second, "the Group leads its namespaces", func() bool { return len(g.Leading()) == 2 })
		if err := g.Run(rctx); !errors.Is(err, election.ErrGroupStarted) {
			t.Errorf("second Run: %v, want ErrGroupStarted", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestGroupFailover: one Group leads every namespace; a second, in the same
// namespaces, leads none while the first runs, and all of them once the
// first shuts down (it vacates its terms and deletes its rows on the way
// out). The checker finds no overlapping terms.
func TestGroupFailover(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		nss := groupNamespaces(t, 12)
		rec := electiontest.NewRecorder()
		cfg := election.GroupConfig{Namespaces: nss, Interval: 100 * time.Millisecond}
		a := startGroup(t, db, "a", rec, cfg, election.WithExpire(time.Second))
		waitUntil(t, 20*time.Second, "a leads every namespace", func() bool { return len(a.g.Leading()) == len(nss) })
		b := startGroup(t, db, "b", rec, cfg, election.WithExpire(time.Second))
		time.Sleep(500 * time.Millisecond)
		if got := b.g.Leading(); len(got) != 0 {
			t.Errorf("b leads %v while a holds every seat", got)
		}
		if got := a.g.Leading(); len(got) != len(nss) {
			t.Errorf("a leads %d of %d namespaces beside a follower", len(got), len(nss))
		}
		start := time.Now()
		if err := a.stop(); err != nil {
			t.Fatalf("a's Run: %v", err)
		}
		waitUntil(t, 10*time.Second, "b leads every namespace after a's shutdown", func() bool { return len(b.g.Leading()) == len(nss) })
		t.Logf("b led all %d namespaces %v after a's Run was cancelled", len(nss), time.Since(start).Round(time.Millisecond))
		var n int64
		must(t, "count", db.Model(&models.Candidate{}).Where("namespace IN ? AND candidate_id = ?", nss, a.g.ID()).Count(&n).Error)
		if n != 0 {
			t.Errorf("a left %d candidate rows behind", n)
		}
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupJoinLeave: a running Group takes part in a namespace joined at
// run time, and on Leave vacates it and deletes its row, while it goes on
// leading the others.
func TestGroupJoinLeave(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 3)
		rec := electiontest.NewRecorder()
		a := startGroup(t, db, "a", rec, election.GroupConfig{Namespaces: nss[:2], Interval: 100 * time.Millisecond}, election.WithExpire(time.Second))
		waitUntil(t, 20*time.Second, "a leads its two namespaces", func() bool { return len(a.g.Leading()) == 2 })
		must(t, "Join", a.g.Join(nss[2]))
		waitUntil(t, 5*time.Second, "a leads the namespace it joined", func() bool { return a.g.IsLeader(nss[2]) })
		must(t, "Leave", a.g.Leave(ctx, nss[0]))
		if a.g.IsLeader(nss[0]) || slices.Contains(a.g.Namespaces(), nss[0]) {
			t.Errorf("after Leave: leading %v, namespaces %v", a.g.Leading(), a.g.Namespaces())
		}
		e := mustElection(t, db, nss[0])
		if l, err := e.Leader(ctx); err != nil || !l.Vacant() {
			t.Errorf("the seat after Leave: %+v, %v; want vacant", l, err)
		}
		if ids := mustList(t, e); len(ids) != 0 {
			t.Errorf("candidates after Leave: %v", ids)
		}
		if err := a.g.Join(nss[0]); err != nil {
			t.Errorf("Join after Leave: %v", err)
		}
		waitUntil(t, 5*time.Second, "a leads the namespace it joined again", func() bool { return len(a.g.Leading()) == 3 })
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupBalance: with Balance, a Group that led every namespace hands
// over the surplus when two more join, until each leads its share
// (ceil(M/N)); without overlapping terms.
func TestGroupBalance(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		const m = 9
		nss := groupNamespaces(t, m)
		rec := electiontest.NewRecorder()
		cfg := election.GroupConfig{Namespaces: nss, Interval: 100 * time.Millisecond, Balance: true}
		a := startGroup(t, db, "a", rec, cfg, election.WithExpire(time.Second))
		waitUntil(t, 20*time.Second, "a alone leads every namespace", func() bool { return len(a.g.Leading()) == m })
		b := startGroup(t, db, "b", rec, cfg, election.WithExpire(time.Second))
		c := startGroup(t, db, "c", rec, cfg, election.WithExpire(time.Second))
		start := time.Now()
		runs := []*groupRun{a, b, c}
		share := (m + len(runs) - 1) / len(runs)
		waitUntil(t, 30*time.Second, "each Group leads its share", func() bool {
			total := 0
			for _, r := range runs {
				n := len(r.g.Leading())
				if n > share {
					return false
				}
				total += n
			}
			return total == m
		})
		t.Logf("balanced %d namespaces over %d Groups (share %d) %v after the two joined", m, len(runs), share, time.Since(start).Round(time.Millisecond))
		// Steady: nobody goes above its share again.
		for range 10 {
			time.Sleep(100 * time.Millisecond)
			for i, r := range runs {
				if n := len(r.g.Leading()); n > share+1 {
					t.Errorf("group %d leads %d namespaces, share %d", i, n, share)
				}
			}
		}
		var wg sync.WaitGroup
		for _, r := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.stop(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupRoundTrips: a Group leading every one of its namespaces makes
// the same number of round trips per round with 4 namespaces as with 64:
// one renewal of every lease, one reading of every seat, one heartbeat of
// every candidate row.
func TestGroupRoundTrips(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			// PostgreSQL and MariaDB run the round as one statement; the
			// others renew, read the seats and heartbeat in three.
			maxGroupRoundTrips := roundTripsOn(t, tg, 3)
			perRound := map[int]int64{}
			for _, n := range []int{4, 64} {
				// Rounds of a quarter of the interval shed the attempts
				// (a slow database): 200 ms leaves TiDB's rounds quick.
				most := groupRoundTrips(t, tg, n, election.GroupConfig{Interval: 200 * time.Millisecond}, false)
				if most > maxGroupRoundTrips {
					t.Errorf("%d namespaces: a round made %d round trips, want at most %d", n, most, maxGroupRoundTrips)
				}
				perRound[n] = most
			}
			if perRound[4] != perRound[64] {
				t.Errorf("round trips per round: %d with 4 namespaces, %d with 64", perRound[4], perRound[64])
			}
			t.Logf("round trips per round: %v", perRound)
		})
	}
}

// TestForNamespace: an Election derived for another namespace elects there,
// with the settings of the one it came from; an invalid namespace is
// refused.
func TestForNamespace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		nss := groupNamespaces(t, 2)
		e := mustElection(t, db, nss[0], election.WithExpire(3*time.Second))
		for _, bad := range []string{"", "a\x00b", strings.Repeat("n", election.MaxNamespaceLen+1)} {
			if _, err := e.ForNamespace(bad); !errors.Is(err, election.ErrInvalidNamespace) {
				t.Errorf("ForNamespace(%q): %v, want ErrInvalidNamespace", bad, err)
			}
		}
		f, err := e.ForNamespace(nss[1])
		must(t, "ForNamespace", err)
		if f.Namespace() != nss[1] || f.Expire() != 3*time.Second {
			t.Errorf("derived Election: namespace %q, expire %v", f.Namespace(), f.Expire())
		}
		id := uuid.New()
		l := mustElect(t, f, id)
		if !l.HeldBy(id) || l.Namespace != nss[1] {
			t.Errorf("Elect through the derived Election: %+v", l)
		}
		if l0, err := e.Leader(testCtx(t)); err != nil || !l0.Vacant() {
			t.Errorf("the first namespace: %+v, %v; want vacant", l0, err)
		}
	})
}
