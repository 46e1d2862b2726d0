package election_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
)

// slowWork is leader work that, in the namespaces it is told, does not
// return when its context is cancelled but only once released; elsewhere
// it returns on cancellation. It records leases and releases in rec.
type slowWork struct {
	name     string
	rec      *electiontest.Recorder
	stubborn map[string]bool

	release chan struct{} // closed to let the stubborn work return
	once    sync.Once
	mu      sync.Mutex
	running map[string]int  // works running, by namespace
	started map[string]bool // namespaces whose work began
}

func newSlowWork(name string, rec *electiontest.Recorder, stubborn ...string) *slowWork {
	w := &slowWork{name: name, rec: rec, stubborn: map[string]bool{}, release: make(chan struct{}),
		running: map[string]int{}, started: map[string]bool{}}
	for _, ns := range stubborn {
		w.stubborn[ns] = true
	}
	return w
}

func (w *slowWork) run(ctx context.Context, l election.Lease) {
	w.rec.Observe(w.name, l)
	w.mu.Lock()
	w.running[l.Namespace]++
	w.started[l.Namespace] = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running[l.Namespace]--
		w.mu.Unlock()
	}()
	<-ctx.Done()
	if w.stubborn[l.Namespace] {
		<-w.release
	}
	w.rec.Released(l)
}

func (w *slowWork) runs(ns string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running[ns]
}

func (w *slowWork) free() { w.once.Do(func() { close(w.release) }) }

// TestGroupLeaveSlowWork: Leave of a namespace whose leader work does not
// stop at once never holds up the others: while it waits, the Group's
// rounds go on renewing the other namespaces, and it does not vacate the
// seat until the work has returned. Once it has, Leave vacates the seat
// and deletes the candidate row.
func TestGroupLeaveSlowWork(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 3)
		rec := electiontest.NewRecorder()
		work := newSlowWork("a", rec, nss[0])
		defer work.free()
		obs := newGroupEvents("a", rec)
		a := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 150 * time.Millisecond, OnStartedLeading: work.run},
			election.WithExpire(time.Second), election.WithObserver(obs))
		waitUntil(t, 20*time.Second, "a leads every namespace", func() bool { return len(a.g.Leading()) == len(nss) })
		waitUntil(t, 10*time.Second, "the stubborn work runs", func() bool { return work.runs(nss[0]) == 1 })

		left := make(chan error, 1)
		from := obs.mark()
		go func() { left <- a.g.Leave(ctx, nss[0]) }()
		// Five rounds renew the other namespaces while Leave waits: more
		// than the trust window (0.8 s) lasts.
		next := from
		for range 5 {
			_, next = obs.wait(t, 5*time.Second, "a renewal of the other namespaces while Leave waits", next, func(e groupEvent) bool {
				return e.kind == "attempt" && e.ns == nss[1] && e.a.Outcome == election.OutcomeRenewed
			})
		}
		select {
		case err := <-left:
			t.Fatalf("Leave returned before the work did: %v", err)
		default:
		}
		if slices.Contains(a.g.Namespaces(), nss[0]) || a.g.IsLeader(nss[0]) {
			t.Errorf("while being left: namespaces %v, leading %v", a.g.Namespaces(), a.g.Leading())
		}
		// The seat is not vacated while the work runs.
		if row, ok := leaderRow(t, db, nss[0]); !ok || row.LeaderID == nil || *row.LeaderID != a.g.ID() {
			t.Errorf("the seat while the work runs: %+v, want it still naming a", row)
		}
		work.free()
		must(t, "Leave", <-left)
		if l, err := mustElection(t, db, nss[0]).Leader(ctx); err != nil || !l.Vacant() {
			t.Errorf("the seat after Leave: %+v, %v; want vacant", l, err)
		}
		if rows := candidateRows(t, db, nss[0]); len(rows) != 0 {
			t.Errorf("candidate rows after Leave: %v", rows)
		}
		for _, ns := range nss[1:] {
			if s := stopsOf(obs.since(from), ns); len(s) > 0 || !a.g.IsLeader(ns) {
				t.Errorf("%s: stops %v, leading %v", ns, s, a.g.IsLeader(ns))
			}
		}
		must(t, "a's Run", a.stop())
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupShutdownStuckWork: when Run's context ends and the work of two
// namespaces ignores the cancellation, Run still returns within
// ShutdownTimeout (it hung for ever when the one timer it waited on had
// fired already). It leaves those seats and candidate rows to expire, and
// vacates the seat of the namespace whose work returned.
func TestGroupShutdownStuckWork(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 3)
		rec := electiontest.NewRecorder()
		work := newSlowWork("a", rec, nss[0], nss[1])
		defer work.free()
		const shutdown = 300 * time.Millisecond
		a := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 150 * time.Millisecond, ShutdownTimeout: shutdown,
			OnStartedLeading: work.run}, election.WithExpire(time.Second))
		waitUntil(t, 20*time.Second, "a leads every namespace", func() bool { return len(a.g.Leading()) == len(nss) })
		waitUntil(t, 10*time.Second, "the work of every namespace runs", func() bool {
			return work.runs(nss[0]) == 1 && work.runs(nss[1]) == 1 && work.runs(nss[2]) == 1
		})
		a.cancel()
		select {
		case <-a.done:
		case <-time.After(shutdown + 20*time.Second):
			t.Fatalf("Run did not return %v after its context ended (ShutdownTimeout %v)", shutdown+20*time.Second, shutdown)
		}
		must(t, "Run", a.err)
		for _, ns := range nss[:2] {
			if row, ok := leaderRow(t, db, ns); !ok || row.LeaderID == nil || *row.LeaderID != a.g.ID() {
				t.Errorf("%s, whose work is still running: the seat is %+v, want it left to expire", ns, row)
			}
			if _, ok := candidateRows(t, db, ns)[a.g.ID()]; !ok {
				t.Errorf("%s, whose work is still running: the candidate row was deleted", ns)
			}
		}
		if l, err := mustElection(t, db, nss[2]).Leader(ctx); err != nil || !l.Vacant() {
			t.Errorf("%s, whose work returned: the seat is %+v, %v; want vacant", nss[2], l, err)
		}
		if rows := candidateRows(t, db, nss[2]); len(rows) != 0 {
			t.Errorf("%s, whose work returned: candidate rows %v", nss[2], rows)
		}
		work.free()
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupJoinWhileRunning: Join of a namespace already joined is refused
// while the Group runs, and so is Join of a namespace still being left
// (Namespaces does not list it), with a message that says so; once Leave
// has returned, Join takes it again.
func TestGroupJoinWhileRunning(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		nss := groupNamespaces(t, 2)
		rec := electiontest.NewRecorder()
		work := newSlowWork("a", rec, nss[0])
		defer work.free()
		a := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 150 * time.Millisecond, OnStartedLeading: work.run},
			election.WithExpire(time.Second))
		waitUntil(t, 20*time.Second, "a leads every namespace", func() bool { return len(a.g.Leading()) == len(nss) })
		for _, ns := range nss {
			if err := a.g.Join(ns); !errors.Is(err, election.ErrInvalidNamespace) || !strings.Contains(err.Error(), "already joined") {
				t.Errorf("Join(%s) while running: %v, want ErrInvalidNamespace, already joined", ns, err)
			}
		}
		waitUntil(t, 10*time.Second, "the stubborn work runs", func() bool { return work.runs(nss[0]) == 1 })
		left := make(chan error, 1)
		go func() { left <- a.g.Leave(ctx, nss[0]) }()
		waitUntil(t, 10*time.Second, "the namespace is being left", func() bool { return !slices.Contains(a.g.Namespaces(), nss[0]) })
		err := a.g.Join(nss[0])
		if !errors.Is(err, election.ErrInvalidNamespace) || !strings.Contains(err.Error(), "being left") {
			t.Errorf("Join of a namespace being left: %v, want ErrInvalidNamespace saying it is being left", err)
		}
		if err := a.g.Leave(ctx, nss[0]); !errors.Is(err, election.ErrUnknownNamespace) {
			t.Errorf("a second Leave: %v, want ErrUnknownNamespace", err)
		}
		work.free()
		must(t, "Leave", <-left)
		must(t, "Join after Leave", a.g.Join(nss[0]))
		waitUntil(t, 10*time.Second, "a leads the namespace joined again", func() bool { return a.g.IsLeader(nss[0]) })
		must(t, "a's Run", a.stop())
		if err := rec.Check().Err(); err != nil {
			t.Error(err)
		}
	})
}

// TestGroupLeaveRacingRun: Leave racing Run's start (which joins every
// namespace's hub) or Run's return (which leaves them) neither races (go
// test -race) nor panics, and the namespace is left.
func TestGroupLeaveRacingRun(t *testing.T) {
	db := testdb.Open(t, testdb.Target{Name: "sqlite"})
	ctx := testCtx(t)
	for i := range 20 {
		nss := groupNamespaces(t, 2)
		for j := range nss {
			nss[j] = fmt.Sprintf("%s.%d", nss[j], i)
		}
		g, err := election.NewGroup(ctx, db, uuid.New(), election.GroupConfig{Namespaces: nss}, election.WithLogger(quiet))
		must(t, "NewGroup", err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- g.Run(rctx) }()
		atStart := i%2 == 0
		if !atStart {
			waitUntil(t, 10*time.Second, "the Group leads", func() bool { return len(g.Leading()) == len(nss) })
			cancel()
		}
		if err := g.Leave(ctx, nss[0]); err != nil && !errors.Is(err, election.ErrUnknownNamespace) {
			t.Errorf("Leave (at Run's %s): %v", map[bool]string{true: "start", false: "return"}[atStart], err)
		}
		if got := g.Namespaces(); slices.Contains(got, nss[0]) {
			t.Errorf("namespaces after Leave: %v", got)
		}
		cancel()
		must(t, "Run", <-done)
	}
}

// TestGroupNamespaceLimit: a Group takes no more namespaces than the
// batch statements can carry on its database: NewGroup and Join refuse
// more with ErrInvalidOption naming the limit, and write nothing. On
// SQLite (6 parameters per namespace in the round that joins them, 32,766
// at most) the limit is 5,461.
func TestGroupNamespaceLimit(t *testing.T) {
	ctx := testCtx(t)
	db := testdb.OpenDSN(t, "sqlite:"+filepath.Join(t.TempDir(), "limit.db"))
	const limit = 5461
	nss := make([]string, limit+1)
	for i := range nss {
		nss[i] = fmt.Sprintf("n%04d", i)
	}
	_, err := election.NewGroup(ctx, db, uuid.New(), election.GroupConfig{Namespaces: nss}, election.WithLogger(quiet))
	if !errors.Is(err, election.ErrInvalidOption) || !strings.Contains(err.Error(), "5461") {
		t.Errorf("NewGroup with %d namespaces: %v, want ErrInvalidOption naming %d", len(nss), err, limit)
	}
	g, err := election.NewGroup(ctx, db, uuid.New(), election.GroupConfig{Namespaces: nss[:limit]}, election.WithLogger(quiet))
	must(t, "NewGroup at the limit", err)
	if err := g.Join(nss[limit]); !errors.Is(err, election.ErrInvalidOption) || !strings.Contains(err.Error(), "5461") {
		t.Errorf("Join beyond the limit: %v, want ErrInvalidOption naming %d", err, limit)
	}
	if n := len(g.Namespaces()); n != limit {
		t.Errorf("%d namespaces after the refused Join, want %d", n, limit)
	}
}
