package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupWritesRowsAgainAfterALapse: a Group whose rounds all fail for
// longer than two expiry windows (a process paused, a database out of
// reach) while a prune deletes its member row and its candidate rows
// writes those rows again once its rounds succeed, on every database:
// it is a live candidate again in every namespace it joined, including
// those it does not lead (no attempt writes a row there for it).
func TestGroupWritesRowsAgainAfterALapse(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		const expire = time.Second
		lg := newLapsingGroup(t, db, 2, expire)
		nss, id, rows, members, waitFor, warned := lg.nss, lg.id, lg.rows, lg.members, lg.waitFor, &lg.warned
		runUntilCleanup(t, ctx, lg.g)
		waitFor("the candidate rows written", func() bool { return rows() == int64(len(nss)) })

		if n := warned.n.Load(); n != 0 {
			t.Fatalf("%d lapse warnings before the stall, want none", n)
		}
		lg.stalled.Store(true)
		// The member row expires an expiry window after the last round
		// that refreshed it began, at most one interval before the stall,
		// and is pruned a window later.
		time.Sleep(2*expire + 200*time.Millisecond)
		pruner := newTestElection(t, db, nss[0], expire)
		for _, ns := range nss {
			p := newTestElection(t, db, ns, expire)
			if _, err := p.Prune(ctx); err != nil {
				t.Fatalf("Prune: %v", err)
			}
		}
		if n, m := rows(), members(); n != 0 || m != 0 {
			t.Fatalf("after the prune: %d candidate rows and %d member rows of the stalled Group, want none", n, m)
		}

		lg.stalled.Store(false)
		waitFor("the candidate rows written again", func() bool { return rows() == int64(len(nss)) && members() == 1 })
		if n := warned.n.Load(); n != 1 {
			t.Errorf("%d lapse warnings after the stall, want 1", n)
		}
		cs, err := pruner.Candidates(ctx)
		if err != nil {
			t.Fatalf("Candidates: %v", err)
		}
		live := false
		for _, c := range cs {
			live = live || c.ID == id
		}
		if !live {
			t.Fatalf("Candidates of %s after the rounds came back: %+v, without the Group", nss[0], cs)
		}
	})
}

// TestGroupLapseWritesOnlyMissingRows: after a lapse of its member row
// that no prune followed, a Group writes again only the candidate rows
// that are missing (here one, deleted by hand as a prune of its
// namespace would), not every row it has: the warning counts them.
func TestGroupLapseWritesOnlyMissingRows(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		const expire = time.Second
		lg := newLapsingGroup(t, db, 3, expire)
		runUntilCleanup(t, ctx, lg.g)
		lg.waitFor("the candidate rows written", func() bool { return lg.rows() == 3 })
		lg.stalled.Store(true)
		// Longer than an expiry window, and no prune.
		time.Sleep(expire + 300*time.Millisecond)
		if err := db.WithContext(ctx).Exec("DELETE FROM election_candidates WHERE candidate_id = ? AND namespace = ?", lg.id.String(), lg.nss[1]).Error; err != nil {
			t.Fatalf("deleting one candidate row: %v", err)
		}
		lg.stalled.Store(false)
		lg.waitFor("the lapse told", func() bool { return lg.warned.n.Load() > 0 })
		lg.waitFor("the deleted row written again", func() bool { return lg.rows() == 3 })
		if n := lg.warned.n.Load(); n != 1 {
			t.Errorf("%d lapse warnings, want 1", n)
		}
		if line := lg.warned.last(); !strings.Contains(line, "missing=1 ") || !strings.Contains(line, "joined=3") {
			t.Errorf("the lapse warning %q; want missing=1 of joined=3", line)
		}
	})
}

// lapsingGroup is a Group of n namespaces, each led for a minute by a
// candidate of its own (so that the Group only follows there), whose
// database calls all fail while stalled is set, and whose lapse warnings
// are counted.
type lapsingGroup struct {
	t       *testing.T
	ctx     context.Context
	db      *gorm.DB
	nss     []string
	id      uuid.UUID
	g       *Group
	stalled atomic.Bool
	warned  lapseWarnings
}

func newLapsingGroup(t *testing.T, db *gorm.DB, n int, expire time.Duration) *lapsingGroup {
	t.Helper()
	ctx := electorCtx(t)
	lg := &lapsingGroup{t: t, ctx: ctx, db: db, id: uuid.New()}
	for range n {
		ns := testdb.Namespace(t)
		if _, err := newTestElection(t, db, ns, time.Minute).Elect(ctx, uuid.New()); err != nil {
			t.Fatalf("Elect: %v", err)
		}
		lg.nss = append(lg.nss, ns)
	}
	g, err := NewGroup(ctx, db, lg.id, GroupConfig{Namespaces: lg.nss}, WithExpire(expire),
		WithLogger(slog.New(slog.NewTextHandler(&lg.warned, nil))))
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	stallWhile(g, &lg.stalled)
	lg.g = g
	return lg
}

// rows counts the Group's candidate rows.
func (lg *lapsingGroup) rows() (n int64) {
	if err := lg.db.WithContext(lg.ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE candidate_id = ? AND namespace IN ?",
		lg.id.String(), lg.nss).Scan(&n).Error; err != nil {
		lg.t.Fatalf("counting the candidate rows: %v", err)
	}
	return n
}

// members counts the Group's member rows.
func (lg *lapsingGroup) members() (n int64) {
	if err := lg.db.WithContext(lg.ctx).Raw("SELECT COUNT(*) FROM election_members WHERE member_id = ?", lg.id.String()).Scan(&n).Error; err != nil {
		lg.t.Fatalf("counting the member row: %v", err)
	}
	return n
}

// waitFor waits up to 10 s for ok.
func (lg *lapsingGroup) waitFor(what string, ok func() bool) {
	lg.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			lg.t.Fatalf("after 10 s: not %s (%d candidate rows, %d member rows)", what, lg.rows(), lg.members())
		}
	}
}

// lapseWarnings counts the log lines that tell a lapse of a Group's member
// row, and keeps the last.
type lapseWarnings struct {
	n    atomic.Int32
	line atomic.Value // string
}

func (w *lapseWarnings) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "member row may have lapsed") {
		w.line.Store(string(p))
		w.n.Add(1)
	}
	return len(p), nil
}

// last is the last lapse warning, or "".
func (w *lapseWarnings) last() string {
	s, _ := w.line.Load().(string)
	return s
}

// TestGroupPruneNeverHoldsUpARound: a Group's prune that does not end (on a
// database busy with thousands of namespaces, a prune of them took up to
// 1.6 s) is cut when the next round may be due, and the Group keeps every
// seat. Before, the prune ran whole after a round, bounded by the trust
// window only, and the next round, with every renewal in it, began too late:
// the Group stepped down everywhere. A piece cut waits for the next prune
// due, not for the next round: tried after every round, the cut pieces of a
// busy database took more of its time than the rounds. Once the pieces end
// in time, the prune goes on where it stopped: the row of a candidate gone
// is pruned.
func TestGroupPruneNeverHoldsUpARound(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := electorCtx(t)
		// A trust window of 1.6 s and rounds every 0.53 to 0.67 s: a
		// round of MariaDB's held up half a second on a busy machine
		// (fsync, CI's other suites) still renews in time, as one of a
		// one-second lease, with a trust window of 0.8 s, did not.
		const expire = 2 * time.Second
		var nss []string
		for range 4 {
			nss = append(nss, testdb.Namespace(t))
		}
		gone := uuid.New()
		if err := newTestElection(t, db, nss[0], expire).RegisterCandidate(ctx, gone); err != nil {
			t.Fatalf("RegisterCandidate: %v", err)
		}
		goneRows := func() int64 {
			var n int64
			if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE namespace = ? AND candidate_id = ?",
				nss[0], gone.String()).Scan(&n).Error; err != nil {
				t.Fatalf("counting rows: %v", err)
			}
			return n
		}

		obs := &stopCounter{}
		g, err := NewGroup(ctx, db, uuid.New(), GroupConfig{Namespaces: nss}, WithExpire(expire), WithLogger(silent), WithObserver(obs))
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		var stuck atomic.Bool
		var tried, cut atomic.Int64 // pieces begun, and cut at their deadline
		stuck.Store(true)
		g.hooks.prune = func(ctx context.Context) error {
			tried.Add(1)
			if !stuck.Load() {
				return nil
			}
			<-ctx.Done()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				cut.Add(1)
			}
			return ctx.Err()
		}
		runUntilCleanup(t, ctx, g)
		led := func() int { return len(g.Leading()) }
		state := func() string {
			return fmt.Sprintf("leading %d of %d, %d pieces cut, stepped down %d", led(), len(nss), cut.Load(), obs.count(StopSteppedDown))
		}
		waitUntil(t, 15*time.Second, "every namespace led", func() bool { return led() == len(nss) }, state)
		// The first prune is due 10 to 15 s (five to seven and a half
		// expiry windows) after the first round; its first piece is cut
		// at its deadline.
		waitUntil(t, 25*time.Second, "a piece of the prune cut", func() bool { return cut.Load() >= 1 }, state)
		if n := obs.count(StopSteppedDown); n > 0 || led() != len(nss) {
			t.Fatalf("a prune that did not end held up the renewals: %s", state())
		}
		// The next prune is due 10 to 12 s later: the six rounds or so of
		// the next 4 s try no piece.
		began := tried.Load()
		time.Sleep(2 * expire)
		if n := tried.Load() - began; n > 0 || cut.Load() != 1 {
			t.Fatalf("%d pieces tried within %v of a piece cut (%s)", n, 2*expire, state())
		}

		stuck.Store(false)
		waitUntil(t, 20*time.Second, "the row of the candidate gone pruned", func() bool { return goneRows() == 0 }, state)
		if n := obs.count(StopSteppedDown); n > 0 {
			t.Errorf("%d step-downs (%s)", n, state())
		}
	})
}
