package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// activity is what -activity found the server running for the measured
// database: on PostgreSQL, pg_stat_activity read every tick over the
// whole run, each active statement counted by its kind (statementKind) and
// by what it waited on (CPU when nothing). The shares say where the
// server's time goes, which the row counts do not: a statement cancelled
// at its deadline reads rows that pg_stat_user_tables never counts.
type activity struct {
	mu     sync.Mutex
	reads  int                       // readings of pg_stat_activity
	byWait map[string]map[string]int // statements found running, by kind, then by what they waited on
}

// sampleActivity reads pg_stat_activity every tick until stop is called.
func sampleActivity(ctx context.Context, db *gorm.DB, tick time.Duration) (a *activity, stop func()) {
	a = &activity{byWait: map[string]map[string]int{}}
	return a, every(ctx, tick, func(ctx context.Context) {
		var rows []struct {
			Wait  string
			Query string
		}
		// A reading that fails (the run ending, a server too busy to
		// answer in a tick's time) is left out, not counted.
		if err := db.WithContext(ctx).Raw("SELECT COALESCE(wait_event_type || ' ' || wait_event, 'CPU') AS wait, LEFT(query, 120) AS query " +
			"FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()").
			Scan(&rows).Error; err != nil {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.reads++
		for _, r := range rows {
			k := statementKind(r.Query)
			if a.byWait[k] == nil {
				a.byWait[k] = map[string]int{}
			}
			a.byWait[k][r.Wait]++
		}
	})
}

// every runs fn every tick, one call at a time, until the returned stop
// is called; stop returns once the last call ended. fn's context ends
// with stop.
func every(ctx context.Context, tick time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			fn(ctx)
		}
	}()
	return func() { cancel(); <-stopped }
}

// statementKind names a statement by its kind: a Group's round whatever
// its number of namespaces, any other by its first 60 characters, spaces
// folded.
func statementKind(q string) string {
	if _, ok := dialect.GroupRoundNamespaces(q); ok {
		return "Group round"
	}
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 60 {
		q = q[:60] + "..."
	}
	return q
}

// print writes the table of statement kinds, the most found first: the
// share of all statements found, the share of those on CPU, and the three
// waits found most.
func (a *activity) print(w io.Writer, tick time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	byKind, total := map[string]int{}, 0
	for k, waits := range a.byWait {
		for _, n := range waits {
			byKind[k] += n
			total += n
		}
	}
	fmt.Fprintf(w, "\nStatements found running (pg_stat_activity every %v over the whole run: %d readings, %d statements):\n\n", tick, a.reads, total)
	if total == 0 {
		return
	}
	fmt.Fprintln(w, "| statement | share of those found | on CPU | waiting on (most found) |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, k := range mostFirst(byKind) {
		n, waits := byKind[k], a.byWait[k]
		var most []string
		for _, wt := range mostFirst(waits) {
			if wt != "CPU" && len(most) < 3 {
				most = append(most, fmt.Sprintf("%s %.0f %%", wt, 100*float64(waits[wt])/float64(n)))
			}
		}
		fmt.Fprintf(w, "| `%s` | %.1f %% | %.0f %% | %s |\n", strings.ReplaceAll(k, "|", `\|`), 100*float64(n)/float64(total),
			100*float64(waits["CPU"])/float64(n), strings.Join(most, ", "))
	}
}

// mostFirst returns the keys of counts, the largest count first (ties by
// key).
func mostFirst(counts map[string]int) []string {
	return slices.SortedFunc(maps.Keys(counts), func(x, y string) int {
		return cmp.Or(cmp.Compare(counts[y], counts[x]), strings.Compare(x, y))
	})
}
