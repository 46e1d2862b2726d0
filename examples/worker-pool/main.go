// Command worker-pool is a runnable example of sqlelect: a pool of workers
// that process jobs from one SQL database, with two leader-only subsystems
// elected in namespaces of their own:
//
//   - the scheduler (namespace worker-pool.scheduler) enqueues jobs;
//   - the reaper (namespace worker-pool.reaper) deletes finished jobs and
//     puts back the jobs of workers whose process died.
//
// Every process that runs it is a member: a candidate in both namespaces
// and a host of workers. Whatever a subsystem's leader writes, it writes in
// one transaction with election.Guard, so a leader that lost its lease can
// never commit. Workers claim jobs with SELECT ... FOR UPDATE SKIP LOCKED
// where the database has it and a conditional UPDATE in any case.
//
// Run one member until Ctrl-C (a SQLite file in the temp directory unless
// -dsn says otherwise; start it in several terminals to see them share the
// work):
//
//	go run ./examples/worker-pool
//	go run ./examples/worker-pool -dsn 'postgres://user:pass@localhost:5432/app?sslmode=disable'
//
// Or watch three members in one process, the leader stopped mid-run:
//
//	go run ./examples/worker-pool -demo
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// options are the command-line settings.
type options struct {
	dsn        string        // database; "" means the default SQLite file
	demo       bool          // three members in one process, leader stopped mid-run
	workers    int           // workers per member
	expire     time.Duration // expiry window of both elections
	enqueue    time.Duration // how often the scheduler's leader enqueues a job
	reap       time.Duration // how often the reaper's leader cleans up
	timeout    time.Duration // demo: give up after this long
	http       string        // serve /metrics and /healthz on this address; "" for none
	label      string        // stored with the candidate rows, beside hostname and pid
	namespaces int           // shards, each elected in a namespace of its own by one Group per member; 0 for none
	logs       io.Writer     // where the library's own log goes (warnings and errors)
}

func main() {
	o := options{logs: os.Stderr}
	flag.StringVar(&o.dsn, "dsn", "", "database, in any form session.Open accepts (postgres://..., mysql://..., sqlite:PATH); "+
		"default: a SQLite file in the temp directory (a new one for -demo)")
	flag.BoolVar(&o.demo, "demo", false, "run three members in this process, stop the leader mid-run, and exit")
	flag.IntVar(&o.workers, "workers", 2, "workers per member")
	flag.DurationVar(&o.expire, "expire", 0, "expiry window of the elections (default 6s, 2s with -demo)")
	flag.DurationVar(&o.enqueue, "enqueue-every", 400*time.Millisecond, "how often the scheduler's leader enqueues a job")
	flag.DurationVar(&o.reap, "reap-every", 2*time.Second, "how often the reaper's leader cleans up")
	flag.DurationVar(&o.timeout, "demo-timeout", 60*time.Second, "with -demo: fail if the demo has not finished after this long")
	flag.IntVar(&o.namespaces, "namespaces", 0, "also elect an owner for each of this many shards (namespaces worker-pool.shard.NNN), "+
		"with one election.Group per member that balances the shards over the members")
	flag.StringVar(&o.http, "http", "", "serve /metrics (Prometheus text format) and /healthz on this address, e.g. :8080")
	flag.StringVar(&o.label, "label", "worker-pool", "label stored with this member's candidate rows and terms, beside hostname and pid "+
		"(e.g. a pod name or version; at most 255 bytes)")
	flag.Parse()
	if o.namespaces < 0 || o.namespaces > 10000 {
		fmt.Fprintln(os.Stderr, "worker-pool: -namespaces must be between 0 and 10000")
		os.Exit(2)
	}

	// The first Ctrl-C or SIGTERM shuts down cleanly (workers finish their
	// job, the member unregisters); a second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	defer stop()

	var err error
	if o.demo {
		err = runDemo(ctx, o, os.Stdout)
	} else {
		err = runMember(ctx, o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker-pool:", err)
		os.Exit(1)
	}
}

// defaultDSN is the SQLite file members share when -dsn is not given.
func defaultDSN() string {
	return "sqlite:" + filepath.Join(os.TempDir(), "sqlelect-worker-pool.db")
}

// libLogger is what the library logs through: warnings and errors only, so
// that the timeline stays readable.
func libLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// runMember runs one member until ctx ends (Ctrl-C or SIGTERM).
func runMember(ctx context.Context, o options, out io.Writer) error {
	if o.dsn == "" {
		o.dsn = defaultDSN()
	}
	if o.expire == 0 {
		o.expire = 6 * time.Second
	}
	tl := newTimeline(out, true)
	app, err := openApp(ctx, o, tl)
	if err != nil {
		return err
	}
	defer app.close()
	m := app.newMember("")
	tl.note("%s; I am member %s, %v (Ctrl-C to leave)", app.where, m.name, app.scheduler.Identity())
	app.printHistory(ctx)
	if o.http != "" {
		addr, err := serveHTTP(ctx, o.http, app.metrics, &app.health)
		if err != nil {
			return err
		}
		tl.note("metrics at http://%s/metrics, health at http://%s/healthz", addr, addr)
	}
	return m.run(ctx)
}
