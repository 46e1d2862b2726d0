package dialect_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestBatchPruneJudgesEachRow: BatchPrune deletes, in one statement, the
// candidate rows of the namespaces given that expired longer ago than the
// window, judging a Group's row by its member row too, and nothing else.
// On PostgreSQL a row refreshed while the statement waited for its lock
// is judged again as refreshed, and kept. MySQL, MariaDB and TiDB have no
// BatchPrune (they delete by key).
func TestBatchPruneJudgesEachRow(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			raw, ctx, d := roundOn(t, tg)
			if _, _, ok := dialect.BatchPrune(d, []string{"x"}, -time.Second); !ok {
				if tg.Name != "mysql" {
					t.Fatalf("no BatchPrune on %s", tg.Name)
				}
				t.Skip("MySQL, MariaDB and TiDB delete expired rows by key")
			}
			base := testdb.Namespace(t)
			pruned, other := base+".pruned", base+".other"
			exec := func(db interface {
				ExecContext(context.Context, string, ...any) (sql.Result, error)
			}, q string, args ...any) {
				t.Helper()
				if _, err := db.ExecContext(ctx, d.Rebind(q), args...); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			now := time.Now()
			long, soon := now.Add(-time.Hour), now.Add(time.Hour)
			member := func(ends time.Time) uuid.UUID {
				id := uuid.New()
				exec(raw, "INSERT INTO election_members (member_id, registered_at, last_heartbeat_at, expires_at) VALUES (?, ?, ?, ?)",
					id, d.TimeArg(long), d.TimeArg(long), d.TimeArg(ends))
				return id
			}
			liveMember, goneMember := member(soon), member(long)
			candidate := func(ns string, ends time.Time, member *uuid.UUID) uuid.UUID {
				id := uuid.New()
				exec(raw, "INSERT INTO election_candidates (namespace, candidate_id, registered_at, last_heartbeat_at, expires_at, member_id) VALUES (?, ?, ?, ?, ?, ?)",
					ns, id, d.TimeArg(long), d.TimeArg(long), d.TimeArg(ends), member)
				return id
			}
			want := map[uuid.UUID]bool{ // candidate -> kept
				candidate(pruned, long, nil):         false,
				candidate(pruned, soon, nil):         true,
				candidate(pruned, long, &liveMember): true,
				candidate(pruned, long, &goneMember): false,
				candidate(other, long, nil):          true,
			}
			// Expired, but refreshed while the prune waits for its lock.
			refreshed := candidate(pruned, long, nil)
			want[refreshed] = true

			prune := func() (int64, error) {
				q, args, _ := dialect.BatchPrune(d, []string{pruned, base + ".none"}, -time.Second)
				res, err := raw.ExecContext(ctx, q, args...)
				if err != nil {
					return 0, err
				}
				return res.RowsAffected()
			}
			var n int64
			if tg.Name == "postgres" {
				tx, err := raw.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback() }()
				exec(tx, "SELECT 1 FROM election_candidates WHERE namespace = ? AND candidate_id = ? FOR UPDATE", pruned, refreshed)
				type result struct {
					n   int64
					err error
				}
				done := make(chan result, 1)
				go func() {
					n, err := prune()
					done <- result{n, err}
				}()
				// The prune waits for the row lock.
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					var waiting int
					if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM election_candidates d%'").Scan(&waiting); err != nil {
						t.Fatal(err)
					}
					if waiting > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the prune never waited for the locked row")
					}
				}
				exec(tx, "UPDATE election_candidates SET expires_at = ? WHERE namespace = ? AND candidate_id = ?", d.TimeArg(soon), pruned, refreshed)
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				r := <-done
				if r.err != nil {
					t.Fatalf("BatchPrune: %v", r.err)
				}
				n = r.n
			} else {
				exec(raw, "UPDATE election_candidates SET expires_at = ? WHERE namespace = ? AND candidate_id = ?", d.TimeArg(soon), pruned, refreshed)
				var err error
				if n, err = prune(); err != nil {
					t.Fatalf("BatchPrune: %v", err)
				}
			}
			if n != 2 {
				t.Errorf("BatchPrune deleted %d rows, want 2", n)
			}
			for id, kept := range want {
				var c int
				if err := raw.QueryRowContext(ctx, d.Rebind("SELECT count(*) FROM election_candidates WHERE candidate_id = ?"), id).Scan(&c); err != nil {
					t.Fatal(err)
				}
				if (c == 1) != kept {
					t.Errorf("candidate %s: %d rows left, kept %v wanted", id, c, kept)
				}
			}
		})
	}
}

// TestPrunePiecesShareOneText: on PostgreSQL the statements of a Group's
// prune read the same whatever the number of namespaces in a piece, so
// that a connection prepares each once; a text per piece size cost a
// prepare per piece, and filled the driver's statement cache with texts
// used once.
func TestPrunePiecesShareOneText(t *testing.T) {
	d := dialect.PostgresForTest()
	texts := func(n int) [2]string {
		nss := make([]string, n)
		for i := range nss {
			nss[i] = "ns" + strconv.Itoa(i)
		}
		prune, _, _ := dialect.BatchPrune(d, nss, -time.Second)
		history, _ := dialect.BatchPruneHistory(d, nss, -time.Hour)
		return [2]string{prune, history}
	}
	if one, many := texts(1), texts(1000); one != many {
		t.Errorf("the texts differ with the namespaces:\n%q\n%q", one, many)
	}
}
