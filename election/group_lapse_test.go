package election

import (
	"context"
	"errors"
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
		nss := []string{testdb.Namespace(t), testdb.Namespace(t)}
		// Each namespace is led for a minute by a candidate of its own,
		// so that the Group only follows there.
		for _, ns := range nss {
			if _, err := newTestElection(t, db, ns, time.Minute).Elect(ctx, uuid.New()); err != nil {
				t.Fatalf("Elect: %v", err)
			}
		}
		id := uuid.New()
		var warned lapseWarnings
		g, err := NewGroup(ctx, db, id, GroupConfig{Namespaces: nss}, WithExpire(expire),
			WithLogger(slog.New(slog.NewTextHandler(&warned, nil))))
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		var stalled atomic.Bool
		g.hooks.call = func(context.Context) error {
			if stalled.Load() {
				return errors.New("stalled by the test")
			}
			return nil
		}
		rows := func() (n int64) {
			if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE candidate_id = ? AND namespace IN ?",
				id.String(), nss).Scan(&n).Error; err != nil {
				t.Fatalf("counting the candidate rows: %v", err)
			}
			return n
		}
		members := func() (n int64) {
			if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM election_members WHERE member_id = ?", id.String()).Scan(&n).Error; err != nil {
				t.Fatalf("counting the member row: %v", err)
			}
			return n
		}
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("after 10 s: not %s (%d candidate rows, %d member rows)", what, rows(), members())
				}
			}
		}
		runUntilCleanup(t, ctx, g)
		waitFor("the candidate rows written", func() bool { return rows() == int64(len(nss)) })

		if n := warned.n.Load(); n != 0 {
			t.Fatalf("%d lapse warnings before the stall, want none", n)
		}
		stalled.Store(true)
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

		stalled.Store(false)
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
		nss := []string{testdb.Namespace(t), testdb.Namespace(t), testdb.Namespace(t)}
		for _, ns := range nss {
			if _, err := newTestElection(t, db, ns, time.Minute).Elect(ctx, uuid.New()); err != nil {
				t.Fatalf("Elect: %v", err)
			}
		}
		id := uuid.New()
		var warned lapseWarnings
		g, err := NewGroup(ctx, db, id, GroupConfig{Namespaces: nss}, WithExpire(expire),
			WithLogger(slog.New(slog.NewTextHandler(&warned, nil))))
		if err != nil {
			t.Fatalf("NewGroup: %v", err)
		}
		var stalled atomic.Bool
		g.hooks.call = func(context.Context) error {
			if stalled.Load() {
				return errors.New("stalled by the test")
			}
			return nil
		}
		rows := func() (n int64) {
			if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM election_candidates WHERE candidate_id = ? AND namespace IN ?",
				id.String(), nss).Scan(&n).Error; err != nil {
				t.Fatalf("counting the candidate rows: %v", err)
			}
			return n
		}
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("after 10 s: not %s (%d candidate rows)", what, rows())
				}
			}
		}
		runUntilCleanup(t, ctx, g)
		waitFor("the candidate rows written", func() bool { return rows() == int64(len(nss)) })
		stalled.Store(true)
		// Longer than an expiry window, and no prune.
		time.Sleep(expire + 300*time.Millisecond)
		if err := db.WithContext(ctx).Exec("DELETE FROM election_candidates WHERE candidate_id = ? AND namespace = ?", id.String(), nss[1]).Error; err != nil {
			t.Fatalf("deleting one candidate row: %v", err)
		}
		stalled.Store(false)
		waitFor("the lapse told", func() bool { return warned.n.Load() > 0 })
		waitFor("the deleted row written again", func() bool { return rows() == int64(len(nss)) })
		if n := warned.n.Load(); n != 1 {
			t.Errorf("%d lapse warnings, want 1", n)
		}
		if line := warned.last(); !strings.Contains(line, "missing=1 ") || !strings.Contains(line, "joined=3") {
			t.Errorf("the lapse warning %q; want missing=1 of joined=3", line)
		}
	})
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
