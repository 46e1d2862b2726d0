package election_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

// connectCounter counts the connections a pool opens.
type connectCounter struct {
	driver.Connector
	n *atomic.Int64
}

func (c connectCounter) Connect(ctx context.Context) (driver.Conn, error) {
	c.n.Add(1)
	return c.Connector.Connect(ctx)
}

// poolRun is what one process did in TestManyNamespacesOnePool's run.
type poolRun struct {
	calls    int64 // driver calls (round trips), all namespaces together
	connects int64 // connections the pool opened
	elapsed  time.Duration
}

// perNamespace is the rate of driver calls per namespace and second.
func (r poolRun) perNamespace(namespaces int) float64 {
	return float64(r.calls) / float64(namespaces) / r.elapsed.Seconds()
}

// runNamespacesOnePool runs, in one pool opened by session.OpenWrapped
// with a counting connector, electors Electors and one Leader poller in
// each of namespaces namespaces, for d.
func runNamespacesOnePool(t *testing.T, dsn string, namespaces, electors int, d time.Duration) poolRun {
	t.Helper()
	var connects atomic.Int64
	counter := &rtcount.Counter{}
	wrap := func(c driver.Connector) driver.Connector {
		return connectCounter{Connector: counter.Wrap(c), n: &connects}
	}
	db, err := session.OpenWrapped(dsn, wrap, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer testdb.Close(db)

	const expire, interval = 400 * time.Millisecond, 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var els []*election.Elector
	for i := 0; i < namespaces; i++ {
		e, err := election.New(db, election.WithNamespace(testdb.Namespace(t)+fmt.Sprint(i)),
			election.WithExpire(expire), election.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < electors; j++ {
			el, err := e.NewElector(uuid.New(), election.ElectorConfig{Interval: interval})
			if err != nil {
				t.Fatal(err)
			}
			els = append(els, el)
		}
		// An application reading the lease now and then, as leader work and
		// dashboards do: another user of the same pool.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = e.Leader(ctx)
				sleepCtx(ctx, interval)
			}
		}()
	}
	// Warm up: every namespace led, the pool at its working size.
	for _, el := range els {
		wg.Add(1)
		go func() { defer wg.Done(); _ = el.Run(ctx) }()
	}
	time.Sleep(4 * expire)
	before, beforeConnects, start := counter.Total(), connects.Load(), time.Now()
	time.Sleep(d)
	return poolRun{calls: counter.Total() - before, connects: connects.Load() - beforeConnects, elapsed: time.Since(start)}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// TestManyNamespacesOnePool: a process that is a candidate in several
// namespaces through one pool (opened with a wrapping connector, as tracing
// wrappers do) does about as many rounds per namespace as a process in one
// namespace, and does not keep opening connections. A pool that keeps too
// few idle connections closes most of them as they come back and opens new
// ones for the next round; on PostgreSQL every new connection is a new
// server process, and rounds stalled to a few percent of their rate.
func TestManyNamespacesOnePool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Electors for several seconds")
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, _ := testdb.Shared(t, tg)
			const electors, namespaces, d = 3, 4, 2 * time.Second
			one := runNamespacesOnePool(t, dsn, 1, electors, d)
			many := runNamespacesOnePool(t, dsn, namespaces, electors, d)
			ratio := many.perNamespace(namespaces) / one.perNamespace(1)
			t.Logf("calls per namespace and second: 1 namespace %.0f, %d namespaces %.0f (ratio %.2f); connections opened while running: %d and %d",
				one.perNamespace(1), namespaces, many.perNamespace(namespaces), ratio, one.connects, many.connects)
			if ratio < 0.5 {
				t.Errorf("with %d namespaces each namespace made %.2f times the calls of a lone namespace; want at least 0.5",
					namespaces, ratio)
			}
			// Once warmed up, a pool keeps its connections: a few may be
			// added when more rounds than before happen to overlap, never
			// one per round.
			if limit := int64(namespaces); many.connects > limit {
				t.Errorf("the pool opened %d connections in %v with %d namespaces; want at most %d (it is closing and reopening them)",
					many.connects, d, namespaces, limit)
			}
		})
	}
}
