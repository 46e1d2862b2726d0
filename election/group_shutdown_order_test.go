package election_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/electiontest"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupShutdownVacatesBeforeItsOtherRows: a Group whose Run returns
// ends its candidacies with its member row, vacates its seats, and only
// then deletes its candidate rows in the namespaces it does not lead. That
// deletion covers every namespace the Group follows (thousands in a large
// fleet: 0.5 to 0.75 s at 10,000 x 16 on two cores) and, sent before the
// vacates, held up every handoff by as long. When Run has returned every
// row of the Group is gone.
func TestGroupShutdownVacatesBeforeItsOtherRows(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			var (
				on   atomic.Bool
				mu   sync.Mutex
				sent []string
			)
			db, dsn := openCountedWith(t, tg, &rtcount.Counter{Observe: func(k rtcount.Kind, q string) {
				if on.Load() && (k == rtcount.Exec || k == rtcount.Query || k == rtcount.StmtExec || k == rtcount.StmtQuery) {
					mu.Lock()
					sent = append(sent, q)
					mu.Unlock()
				}
			}})
			other := testdb.OpenDSN(t, dsn) // the same database, SQLite's file too
			nss := groupNamespaces(t, 2)
			led, followed := nss[0], nss[1]
			rec := electiontest.NewRecorder()
			holder := startGroup(t, other, "holder", rec, election.GroupConfig{Namespaces: []string{followed}})
			waitUntil(t, 20*time.Second, "the holder leads", func() bool { return holder.g.IsLeader(followed) })
			r := startGroup(t, db, "stopping", rec, election.GroupConfig{Namespaces: nss})
			waitUntil(t, 20*time.Second, "the Group leads its namespace", func() bool { return r.g.IsLeader(led) })
			on.Store(true)
			if err := r.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			on.Store(false)

			mu.Lock()
			defer mu.Unlock()
			unregister, vacate := -1, -1
			for i, q := range sent {
				switch {
				case strings.HasPrefix(q, "DELETE FROM election_candidates WHERE candidate_id = "):
					unregister = i
				case strings.Contains(q, "election_history"): // a vacate ends the term there
					vacate = max(vacate, i)
				}
			}
			if unregister < 0 || vacate < 0 {
				t.Fatalf("no unregistering (%d) or no vacate (%d) among the statements of the shutdown:\n%s", unregister, vacate, strings.Join(sent, "\n"))
			}
			if unregister < vacate {
				t.Errorf("the candidate rows of the namespaces not led were deleted (statement %d) before the vacate (statement %d)", unregister, vacate)
			}
			var left int64
			must(t, "counting rows", db.Raw("SELECT COUNT(*) FROM election_candidates WHERE candidate_id = ?", r.g.ID()).Scan(&left).Error)
			if left != 0 {
				t.Errorf("%d candidate rows of the Group left after Run returned", left)
			}
		})
	}
}
