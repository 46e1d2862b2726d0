package dialect

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// binds counts the bound parameters of q: ? markers, or the highest $n.
func binds(q string) int {
	if n := strings.Count(q, "?"); n > 0 {
		return n
	}
	most := 0
	for i := 0; i < len(q); i++ {
		if q[i] != '$' {
			continue
		}
		j := i + 1
		for j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		if n, err := strconv.Atoi(q[i+1 : j]); err == nil && n > most {
			most = n
		}
		i = j - 1
	}
	return most
}

// TestBatchMaxNamespaces: at BatchMaxNamespaces, with every namespace
// held, no batch statement a Group sends carries more parameters than its
// database takes; one namespace more and the largest does.
func TestBatchMaxNamespaces(t *testing.T) {
	for _, c := range []struct {
		d     Dialect
		limit int
	}{{postgres{}, pgMaxBinds}, {mysql{}, mysqlMaxBinds}, {sqlite{}, sqliteMaxBinds}} {
		t.Run(c.d.Name(), func(t *testing.T) {
			most := func(n int) int {
				// Sent outside the rounds: the pruning of led namespaces
				// and the unregistering at shutdown.
				nss := make([]string, n)
				for i := range nss {
					nss[i] = "ns" + strconv.Itoa(i)
				}
				history, _ := BatchPruneHistory(c.d, nss, -time.Hour)
				qs := []string{BatchExpired(c.d, n), history, BatchUnregister(c.d, n)}
				if q, _, ok := BatchPrune(c.d, nss, -time.Hour); ok {
					qs = append(qs, q)
				}
				if _, ok := c.d.(postgres); ok {
					// The round is all PostgreSQL sends in a round.
					qs = append(qs, pgRound(c.d, n))
				} else {
					p := c.d.(pieces)
					qs = append(qs, BatchRenew(c.d, n), joinRows(p, n), readSeats(p, n, 4))
					if q, ok := BatchRenewReturning(c.d, n); ok {
						qs = append(qs, q)
					}
				}
				m := 0
				for _, q := range qs {
					m = max(m, binds(q))
				}
				return m
			}
			n := BatchMaxNamespaces(c.d)
			if got := most(n); got > c.limit {
				t.Errorf("%d namespaces: a statement carries %d parameters, more than %d", n, got, c.limit)
			}
			if got := most(n + 1); got <= c.limit {
				t.Errorf("%d namespaces: at most %d parameters; the limit %d is not the largest", n+1, got, c.limit)
			}
		})
	}
}

// TestSQLiteBatchAtTheLimit: SQLite runs the round that joins
// BatchMaxNamespaces namespaces and refuses one namespace more, so the
// limit is the database's, not a guess.
func TestSQLiteBatchAtTheLimit(t *testing.T) {
	db, err := OpenSQLiteRaw("sqlite:" + filepath.Join(t.TempDir(), "limit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE TABLE election_candidates (namespace TEXT NOT NULL, candidate_id TEXT NOT NULL, "+
		"registered_at TEXT, last_heartbeat_at TEXT, expires_at TEXT, hostname TEXT, pid INTEGER, label TEXT, member_id TEXT, "+
		"PRIMARY KEY (namespace, candidate_id))"); err != nil {
		t.Fatal(err)
	}
	d := sqlite{}
	id := uuid.New().String()
	join := func(n int) error {
		args := make([]any, 0, joinBinds*n)
		for i := range n {
			args = append(args, fmt.Sprintf("n%05d", i), id, "host", 1, "", id)
		}
		_, err := db.ExecContext(ctx, joinRows(d, n), args...)
		return err
	}
	n := BatchMaxNamespaces(d)
	if err := join(n); err != nil {
		t.Fatalf("joining %d namespaces: %v", n, err)
	}
	if err := join(n + 1); err == nil || !strings.Contains(err.Error(), "too many SQL variables") {
		t.Fatalf("joining %d namespaces: %v, want too many SQL variables", n+1, err)
	}
}
