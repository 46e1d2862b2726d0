// Command outside is a program a user of sqlelect writes in a module of
// their own, with no replace and no workspace: it gets the core module and
// each nested module at the version being released, and uses each. The
// release helper builds and runs it against a file module proxy made from
// the repository (go -C internal/release run . outside).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/XSAM/otelsql"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver, for otelsql
	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sqlelect/sqlelect/election"
	sqlelectgocron "github.com/sqlelect/sqlelect/gocron"
	"github.com/sqlelect/sqlelect/migrate"
	_ "github.com/sqlelect/sqlelect/otel" // no API: it must resolve and build
	sqlelectprom "github.com/sqlelect/sqlelect/prometheus"
	"github.com/sqlelect/sqlelect/session"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "outside:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "outside")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "app.db")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The core: an Elector leads a namespace of a SQLite file, with the
	// Prometheus collector as its observer.
	db, err := session.Open("sqlite:" + file)
	if err != nil {
		return err
	}
	if err := migrate.Up(ctx, db); err != nil {
		return err
	}
	collector := sqlelectprom.NewCollector()
	reg := prom.NewRegistry()
	if err := reg.Register(collector); err != nil {
		return err
	}
	e, err := election.New(db, election.WithNamespace("reports"), election.WithObserver(collector), election.WithLogger(quiet))
	if err != nil {
		return err
	}
	collector.Watch(e)
	leading := make(chan election.Lease, 1)
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		OnStartedLeading: func(_ context.Context, l election.Lease) { leading <- l },
	})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(rctx) }()
	defer func() { stop(); <-done }()
	var lease election.Lease
	select {
	case lease = <-leading:
	case err := <-done:
		return fmt.Errorf("the Elector stopped: %v", err)
	case <-ctx.Done():
		return errors.New("no leader within a minute")
	}
	fmt.Printf("core: %s leads %q in term %d\n", lease.Leader, lease.Namespace, lease.Term)

	// prometheus: the collector saw it.
	isLeader, err := gauge(reg, "sqlelect_is_leader", "reports")
	if err != nil {
		return err
	}
	candidates, err := gauge(reg, "sqlelect_candidates", "reports")
	if err != nil {
		return err
	}
	if isLeader != 1 || candidates != 1 {
		return fmt.Errorf("prometheus: sqlelect_is_leader %v, sqlelect_candidates %v; want 1 and 1", isLeader, candidates)
	}
	fmt.Printf("prometheus: sqlelect_is_leader %v, sqlelect_candidates %v\n", isLeader, candidates)

	// gocron: a job runs on the leader; another candidate is refused.
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(sqlelectgocron.New(el)))
	if err != nil {
		return err
	}
	ran := make(chan struct{})
	if _, err := s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(func() { close(ran) })); err != nil {
		return err
	}
	s.Start()
	select {
	case <-ran:
	case <-ctx.Done():
		return errors.New("gocron: the job did not run on the leader")
	}
	if err := s.Shutdown(); err != nil {
		return err
	}
	if err := sqlelectgocron.ForCandidate(e, uuid.New()).IsLeader(ctx); !errors.Is(err, election.ErrNotLeader) {
		return fmt.Errorf("gocron: another candidate's IsLeader: %v, want election.ErrNotLeader", err)
	}
	fmt.Println("gocron: the job ran on the leader; another candidate was refused")

	// otel: the same database through an otelsql pool adopted by
	// session.Wrap, as the otel module's tests and docs/api.md do.
	sqlDB, err := otelsql.Open("sqlite3", "file:"+file+"?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate")
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	traced, err := session.Wrap(sqlDB)
	if err != nil {
		return fmt.Errorf("otel: session.Wrap of an otelsql pool: %w", err)
	}
	te, err := election.New(traced, election.WithNamespace("reports"), election.WithLogger(quiet))
	if err != nil {
		return err
	}
	seen, err := te.Leader(ctx)
	if err != nil {
		return err
	}
	if seen.Leader != lease.Leader || seen.Term != lease.Term {
		return fmt.Errorf("otel: the leader through otelsql is %s in term %d, want %s in term %d", seen.Leader, seen.Term, lease.Leader, lease.Term)
	}
	fmt.Printf("otel: through otelsql the leader is %s in term %d\n", seen.Leader, seen.Term)
	return nil
}

// gauge reads the gauge name of a namespace from reg.
func gauge(reg *prom.Registry, name, namespace string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "namespace") == namespace {
				return m.GetGauge().GetValue(), nil
			}
		}
	}
	return 0, fmt.Errorf("prometheus: no %s{namespace=%q}", name, namespace)
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
