// Command sqlelect-chaos is a soak test of mutual exclusion under faults.
//
// For each database it starts -procs OS processes (this program again, in
// child mode). Each runs -electors Electors in each of -namespaces
// namespaces, all on one database, with an expiry window well under a
// second so that terms change often. Every leader makes fenced writes
// (electiontest.Fence: Guard and the write in one transaction) for as long
// as it leads. Every process reports each lease it sees (from the Electors'
// callbacks, the leader's work loop and a bystander polling Leader) to the
// parent on a pipe.
//
// Meanwhile the parent injects faults at random:
//
//   - kill: SIGKILL a process, then start a new one in its place;
//   - stop: SIGSTOP a process for two to four expiry windows, then SIGCONT
//     (a frozen leader wakes up past its lease: the fence must stop its writes);
//   - term: SIGTERM a process (its Electors unregister and hand over), then
//     start a new one;
//   - resign: SIGUSR1 makes one leading Elector of a process resign;
//   - cut: reset every connection of a process and refuse new ones for a
//     while, through a TCP proxy between the process and the server;
//   - delay: slow every packet of a process down for a while, same proxy;
//   - server-restart: restart the PostgreSQL or MariaDB server, once per
//     run, halfway through (-restart-server=false to skip it).
//
// At the end it stops the processes, reads every committed fenced write
// from the database, checks the whole history with electiontest, checks the
// election_history table against the seats and against that history (no
// gap in the terms, the same holders and starts, every term but the last
// ended before the next began), and prints
// one line per database: elections (Elect calls that reached the database),
// terms, faults injected by kind, overlapping terms and stale writes (and
// the other violations electiontest knows), and the history table's terms
// and mismatches. Any violation or mismatch makes the exit status 1.
//
// The short run CI makes (about two minutes per database):
//
//	go run ./internal/cmd/sqlelect-chaos -db all -duration 2m
//
// A long run:
//
//	go run ./internal/cmd/sqlelect-chaos -db all -duration 10m -procs 4 -namespaces 4 -electors 3 -expire 300ms -interval 50ms
//
// Releases are recorded twice: the lease an Elector knows it gives up, and
// a window of the database clock in which whatever its candidate holds is
// given up (UnregisterCandidate at shutdown and Resign vacate the seat
// even when the candidate never heard that its Elect had won it, when the
// answer was lost to a fault).
//
// -events DIR keeps every process's event lines, and on a failed check the
// history, for diagnosis.
//
// With -group each process runs -electors election.Groups, each a
// candidate in every namespace, instead of Electors per namespace: the same
// faults and checks, the resign fault done by Leave and Join.
//
// With -unfenced the leaders skip Guard and write on their own idea of
// leadership: the run then shows what the check catches (stale writes after
// a frozen leader wakes up) and exits 1.
//
// The server databases come from $SQLELECT_POSTGRES_DSN and
// $SQLELECT_MYSQL_DSN and must be on the loopback interface (the proxy
// accepts nothing else); SQLite runs on a new file in a temporary
// directory, without the proxy faults. Restarting a server disrupts
// everything else using it: do not run this alongside other tests.
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

// options are the parent's flags.
type options struct {
	dbs           string
	duration      time.Duration
	procs         int
	namespaces    int
	electors      int
	expire        time.Duration
	interval      time.Duration
	faultGap      time.Duration
	restartServer bool
	seed          uint64
	verbose       bool
	unfenced      bool
	group         bool
	minRate       float64
	proxy         bool
	events        string
	dsns          map[string]string
}

func main() {
	var (
		o       options
		isChild bool
	)
	flag.StringVar(&o.dbs, "db", "all", "databases to run on: sqlite, postgres, mysql, a comma-separated list, or all (sqlite and every server with a DSN); "+
		"sqlite-mattn and sqlite-modernc are SQLite through one driver (sqlite is through the build's default: mattn with cgo, modernc without)")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long to inject faults on each database")
	flag.IntVar(&o.procs, "procs", 4, "processes per database")
	flag.IntVar(&o.namespaces, "namespaces", 3, "namespaces per database")
	flag.IntVar(&o.electors, "electors", 2, "Electors per namespace in each process")
	flag.DurationVar(&o.expire, "expire", 400*time.Millisecond, "expiry window")
	flag.DurationVar(&o.interval, "interval", 0, "Elector interval (default expire/4)")
	flag.DurationVar(&o.faultGap, "fault-gap", 800*time.Millisecond, "mean pause between faults")
	flag.BoolVar(&o.restartServer, "restart-server", true, "restart the PostgreSQL and MariaDB servers once per run")
	flag.Uint64Var(&o.seed, "seed", 0, "random seed (default: from the clock)")
	flag.BoolVar(&o.verbose, "v", false, "print every fault and unexpected error of the processes")
	flag.BoolVar(&o.proxy, "proxy", true, "put a TCP proxy between each process and a server database, for the cut and delay faults")
	flag.StringVar(&o.events, "events", "", "directory to keep every process's event lines in (DB-PROC.jsonl), and on a failed check the history (DB-history.json), for diagnosis")
	flag.BoolVar(&o.unfenced, "unfenced", false, "negative control: leaders write without Guard, so the check must fail")
	flag.Float64Var(&o.minRate, "min-rate", defaultMinRate, "fail as stalled below this fraction of the elections the interval makes (0 to 1)")
	flag.BoolVar(&o.group, "group", false, "run -electors election.Groups per process, each a candidate in every namespace, instead of Electors; "+
		"the resign fault becomes a Group leaving a namespace it leads and joining it again")
	flag.BoolVar(&isChild, "child", false, "run as a candidate process (used by the parent)")
	flag.Parse()

	if isChild {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "sqlelect-chaos child:", err)
			os.Exit(2)
		}
		return
	}
	if o.interval == 0 {
		o.interval = o.expire / 4
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	o.dsns = map[string]string{"postgres": os.Getenv("SQLELECT_POSTGRES_DSN"), "mysql": os.Getenv("SQLELECT_MYSQL_DSN")}
	ok, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqlelect-chaos:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// run soaks each database in turn; ok is false when a check failed.
func run(ctx context.Context, o options) (ok bool, err error) {
	if o.procs < 2 || o.namespaces < 1 || o.electors < 1 {
		return false, errors.New("need -procs >= 2, -namespaces >= 1 and -electors >= 1")
	}
	if o.minRate < 0 || o.minRate > 1 {
		return false, fmt.Errorf("-min-rate %v: want a fraction from 0 to 1", o.minRate)
	}
	var names []string
	switch o.dbs {
	case "all":
		names = []string{"sqlite"}
		for _, n := range []string{"postgres", "mysql"} {
			if o.dsns[n] != "" {
				names = append(names, n)
			}
		}
	default:
		names = strings.Split(o.dbs, ",")
	}
	tmp, err := os.MkdirTemp("", "sqlelect-chaos-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	o.dsns["sqlite"] = "sqlite:" + tmp + "/chaos.db"
	for _, drv := range []string{"mattn", "modernc"} {
		o.dsns["sqlite-"+drv] = "sqlite:" + tmp + "/chaos-" + drv + ".db?driver=" + drv
	}

	fmt.Fprintf(os.Stderr, "sqlelect-chaos: seed %d; %d processes x %d namespaces x %d electors, expire %v, interval %v, %v per database\n",
		o.seed, o.procs, o.namespaces, o.electors, o.expire, o.interval, o.duration)
	ok = true
	var lines []string
	for i, name := range names {
		name = strings.TrimSpace(name)
		dsn, known := o.dsns[name]
		if !known {
			return false, fmt.Errorf("unknown database %q (want sqlite, sqlite-mattn, sqlite-modernc, postgres or mysql)", name)
		}
		if dsn == "" {
			return false, fmt.Errorf("no DSN for %s: set $SQLELECT_%s_DSN", name, strings.ToUpper(name))
		}
		s, err := soak(ctx, o, name, dsn, o.seed+uint64(i))
		if err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		lines = append(lines, s.String())
		fmt.Println(s.String())
		if !s.ok() {
			ok = false
			if err := s.result.Err(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
	if len(lines) > 1 {
		fmt.Fprintln(os.Stderr, "sqlelect-chaos: summary")
		for _, l := range lines {
			fmt.Fprintln(os.Stderr, "  "+l)
		}
	}
	return ok, nil
}
