// Command sqlelect-failover measures how long leadership takes to move from
// one process to another, on each database.
//
// For every database it starts -procs child processes (this program again,
// in child mode), each running one election.Elector in a namespace of their
// own, and repeats two kinds of trial:
//
//   - crash: the leader process is killed with SIGKILL. Nobody unregisters,
//     so another process can lead only once the lease has expired; the
//     followers try at its end (target: expire + 25 ms after the kill).
//   - graceful: the leader process gets SIGTERM. Its Elector's Run returns
//     through its shutdown path, which unregisters the candidate and vacates
//     the seat; the others try at once when woken (LISTEN/NOTIFY on
//     PostgreSQL, the notification file on SQLite on Linux, a KILL QUERY
//     that ends a listener's wait on MySQL, MariaDB and TiDB; target 10 ms).
//
// A trial is timed from the signal to the moment another process reports
// that it leads. Children write one line to a pipe as each event happens
// (OnStartedLeading and the others); the parent timestamps the line when it
// reads it, so both ends of every measurement come from one monotonic clock.
// The stopped process is restarted after each trial, so -procs stay alive.
//
//	go run ./internal/cmd/sqlelect-failover -trials 20
//	go run ./internal/cmd/sqlelect-failover -db postgres -postgres 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./internal/cmd/sqlelect-failover -db mysql,tidb -tidb 'mysql://root@tcp(127.0.0.1:14000)/test'
//
// The server databases default to $SQLELECT_POSTGRES_DSN,
// $SQLELECT_MYSQL_DSN and $SQLELECT_TIDB_DSN (a TiDB is reached with the
// mysql driver, and reported on a line of its own); SQLite runs on a new
// file in a temporary directory.
// The result is printed as a markdown table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// config is what the parent measures with.
type config struct {
	procs    int
	trials   int
	expire   time.Duration
	interval time.Duration
	verbose  bool
	trace    bool
}

func main() {
	var (
		c       config
		dbs     string
		pg, my  string
		tidb    string
		isChild bool
	)
	flag.StringVar(&dbs, "db", "", "comma-separated databases to measure: sqlite, postgres, mysql, tidb (default: sqlite and every server database with a DSN); "+
		"sqlite-mattn and sqlite-modernc are SQLite through one driver (sqlite is through the build's default: mattn with cgo, modernc without)")
	flag.StringVar(&pg, "postgres", os.Getenv("SQLELECT_POSTGRES_DSN"), "PostgreSQL DSN (default $SQLELECT_POSTGRES_DSN)")
	flag.StringVar(&my, "mysql", os.Getenv("SQLELECT_MYSQL_DSN"), "MySQL/MariaDB DSN (default $SQLELECT_MYSQL_DSN)")
	flag.StringVar(&tidb, "tidb", os.Getenv("SQLELECT_TIDB_DSN"), "TiDB DSN, a mysql:// one (default $SQLELECT_TIDB_DSN)")
	flag.IntVar(&c.procs, "procs", 3, "candidate processes per database")
	flag.IntVar(&c.trials, "trials", 20, "trials of each kind per database")
	flag.DurationVar(&c.expire, "expire", 2*time.Second, "expiry window")
	flag.DurationVar(&c.interval, "interval", 200*time.Millisecond, "Elector interval")
	flag.BoolVar(&c.verbose, "v", false, "print every trial")
	flag.BoolVar(&c.trace, "trace", false, "print, for each graceful trial, what the processes did from the signal until another led: their statements, new connections, wake-ups and rounds, each with its time")
	flag.BoolVar(&isChild, "child", false, "run as a candidate process (used by the parent)")
	flag.Parse()

	if isChild {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "sqlelect-failover child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(c, dbs, map[string]string{"postgres": pg, "mysql": my, "tidb": tidb}); err != nil {
		fmt.Fprintln(os.Stderr, "sqlelect-failover:", err)
		os.Exit(1)
	}
}

func run(c config, dbs string, dsns map[string]string) error {
	if c.procs < 2 {
		return errors.New("-procs must be at least 2")
	}
	if c.trials < 1 {
		return errors.New("-trials must be at least 1")
	}
	var names []string
	if dbs == "" {
		names = []string{"sqlite"}
		for _, n := range []string{"postgres", "mysql", "tidb"} {
			if dsns[n] != "" {
				names = append(names, n)
			}
		}
	} else {
		names = strings.Split(dbs, ",")
	}
	tmp, err := os.MkdirTemp("", "sqlelect-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dsns["sqlite"] = "sqlite:" + tmp + "/failover.db"
	for _, drv := range []string{"mattn", "modernc"} {
		dsns["sqlite-"+drv] = "sqlite:" + tmp + "/failover-" + drv + ".db?driver=" + drv
	}

	start := time.Now()
	var results []result
	for _, name := range names {
		name = strings.TrimSpace(name)
		dsn, ok := dsns[name]
		if !ok {
			return fmt.Errorf("unknown database %q (want sqlite, sqlite-mattn, sqlite-modernc, postgres, mysql or tidb)", name)
		}
		if dsn == "" {
			return fmt.Errorf("no DSN for %s: set -%s or $SQLELECT_%s_DSN", name, name, strings.ToUpper(name))
		}
		fmt.Fprintf(os.Stderr, "%s: %d processes, %d trials of each kind, expire %v, interval %v\n", name, c.procs, c.trials, c.expire, c.interval)
		rs, err := measure(context.Background(), c, name, dsn, tmp)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, rs...)
	}
	fmt.Println(table(c, results))
	fmt.Fprintf(os.Stderr, "took %v\n", time.Since(start).Round(time.Second))
	return nil
}
