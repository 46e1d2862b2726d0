package prometheus_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
	sqlelectprom "github.com/sqlelect/sqlelect/prometheus"
	"github.com/sqlelect/sqlelect/session"
)

// One Collector per process, registered once, given to every Election.
// Serve the registry with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).
func ExampleNewCollector() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := session.Open("sqlite:" + filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := migrate.Up(ctx, db); err != nil {
		log.Fatal(err)
	}

	c := sqlelectprom.NewCollector()
	reg := prom.NewRegistry()
	reg.MustRegister(c)
	e, err := election.New(db, election.WithNamespace("billing"), election.WithObserver(c),
		election.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		log.Fatal(err)
	}
	c.Watch(e)

	leading := make(chan struct{})
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		OnStartedLeading: func(ctx context.Context, _ election.Lease) { close(leading) },
	})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- el.Run(rctx) }()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		log.Fatal("not leading")
	}

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sqlelect_is_leader 1 while an Elector of this process leads the namespace, else 0.
# TYPE sqlelect_is_leader gauge
sqlelect_is_leader{namespace="billing"} 1
# HELP sqlelect_candidates Live candidates of the namespace, all processes, read on scrape for watched Elections.
# TYPE sqlelect_candidates gauge
sqlelect_candidates{namespace="billing"} 1
`), "sqlelect_is_leader", "sqlelect_candidates")
	fmt.Println("metrics as expected:", err == nil)
	stop()
	<-done
	// Output: metrics as expected: true
}
