// Command sqlelect-scale measures Groups at scale: P candidate processes
// (separate OS processes, each with its own pool; see internal/fleet),
// each a Group over the same M namespaces, on one database. For each size
// it reports the time from a cold start until every namespace has a
// leader, the leaderships started during a steady window (flaps) and of
// them the new terms (a lease reclaimed after a stall starts a leadership
// in the term it had), the
// statements per second the processes sent (counted at each process's
// driver) and the connections they held, the rows the database wrote and
// read per interval in the election tables (from the server's own
// statistics), the CPU of a candidate process, the most namespaces one
// process led against the fair share, and the time until every namespace
// a killed process led has a leader again. The processes' leases go
// through the electiontest checker, which must find no overlapping terms.
//
//	go run ./internal/cmd/sqlelect-scale -db postgres -namespaces 16,128,1000 -procs 2,8,32
//
// With -overload-latency or -overload-stall each process reaches the
// server through a fault proxy of its own, and after the steady window
// the proxies add latency to every round trip for -overload-for, or stall
// every connection for the given time; a second table then gives, for
// the fault and the -overload-after window after it, the statements per
// process per interval, the flaps per minute, the rows written and read,
// and the time until every namespace was led again.
//
// With -activity on PostgreSQL, the program reads pg_stat_activity that
// often over the whole run and lists the statements found running by
// kind, with what they waited on: where the server's time goes.
//
// With -vacuum on PostgreSQL, the program vacuums the election tables that
// often over the whole run, as an autovacuum set to visit them that often
// would: on a server with autovacuum off, every renewal's dead row version
// otherwise stays until the next size.
//
// DSNs come from SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN; SQLite uses
// a file in a temporary directory. On PostgreSQL and MySQL the program
// measures in a database of its own (-database, created when missing and
// dropped again if it created it), so that the server's row counts are
// the fleet's alone. make bench-scale runs the full matrix.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/internal/fleet"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

func main() {
	fleet.MaybeChild()
	if err := parent(); err != nil {
		fmt.Fprintln(os.Stderr, "sqlelect-scale:", err)
		os.Exit(1)
	}
}

// options are the parent's flags.
type options struct {
	db         string
	expire     time.Duration
	steady     time.Duration
	conns      int
	trace      bool
	timeline   time.Duration // the cold start's steps, per process (printTimeline); 0: none
	cpuProfile string        // a directory for each process's CPU profile
	profileFor time.Duration // of its first profileFor (0: its whole life)
	overload   overload
	rows       rowStats
	electionDB *gorm.DB
}

// overload is the fault put between the processes and the server after
// the steady window, if any.
type overload struct {
	latency time.Duration // added to every round trip, for hold
	stall   time.Duration // every connection stalled this long
	hold    time.Duration // how long the latency stays
	after   time.Duration // the window measured after the fault
}

func (o overload) on() bool { return o.latency > 0 || o.stall > 0 }

func (o overload) String() string {
	if o.latency > 0 {
		return fmt.Sprintf("+%v per round trip for %v", o.latency, o.hold)
	}
	return fmt.Sprintf("connections stalled for %v", o.stall)
}

// duration is how long the fault lasts.
func (o overload) duration() time.Duration {
	if o.latency > 0 {
		return o.hold
	}
	return o.stall
}

func parent() error {
	dbName := flag.String("db", "postgres", "postgres, mysql or sqlite")
	nsList := flag.String("namespaces", "1,16,128,1000", "namespace counts (M)")
	procList := flag.String("procs", "2,8,32", "candidate process counts (P)")
	expire := flag.Duration("expire", 2*time.Second, "the expiry window (TTL)")
	steady := flag.Duration("steady", 20*time.Second, "the steady window in which flaps, statements, rows and CPU are measured")
	balance := flag.String("balance", "both", "off, on or both")
	plotFile := flag.String("plot", "", "write an SVG plot of the cost against the namespaces to this file: statements per process per interval, rows written and rows read per interval")
	conns := flag.Int("conns", 3, "the most connections a candidate process opens (SetMaxOpenConns; one fewer are kept idle, for an expiry window)")
	trace := flag.Bool("trace", false, "after each window, list its statements by kind and text, with the outcomes and stops")
	timeline := flag.Duration("timeline", 0, "after each cold start, list for each process when it was ready and how many namespaces it led at every step of this length (where a cold start's time goes); 0: not listed")
	cpuProfile := flag.String("cpuprofile", "", "write each candidate process's CPU profile to this directory (cpu-<pid>.prof; merge them with go tool pprof)")
	profileFor := flag.Duration("cpuprofile-for", 0, "profile only each process's first this long (a cold start); 0: its whole life")
	database := flag.String("database", "sqlelect_scale", "on PostgreSQL and MySQL, measure in this database (created when missing, and dropped again if this run created it); empty: the DSN's own")
	userstat := flag.Bool("mysql-userstat", false, "on MariaDB with performance_schema and userstat off, turn userstat on for the run (SET GLOBAL; turned off again at the end) to count rows")
	latency := flag.Duration("overload-latency", 0, "after the steady window, add this latency to every round trip (through a proxy per process) for -overload-for")
	hold := flag.Duration("overload-for", 10*time.Second, "how long -overload-latency lasts")
	stall := flag.Duration("overload-stall", 0, "after the steady window, stall every connection (through a proxy per process) this long: less than a lease")
	after := flag.Duration("overload-after", 20*time.Second, "the window measured after the fault ends")
	vacuumTick := flag.Duration("vacuum", 0, "on PostgreSQL, VACUUM the election tables this often over the whole run, as an autovacuum set to visit them that often would (for a server with autovacuum off, or one that visits them once a minute); 0: only before each size")
	activityTick := flag.Duration("activity", 0, "on PostgreSQL, read pg_stat_activity this often over the whole run and list the statements found running by kind, with what they waited on (where the server's time goes); 0: not read")
	flag.Parse()

	o := options{db: *dbName, expire: *expire, steady: *steady, conns: *conns, trace: *trace, timeline: *timeline,
		cpuProfile: *cpuProfile, profileFor: *profileFor,
		overload: overload{latency: *latency, stall: *stall, hold: *hold, after: *after}}
	switch {
	case *latency > 0 && *stall > 0:
		return errors.New("-overload-latency and -overload-stall: one at a time")
	case *latency < 0 || *stall < 0 || *hold <= 0 || *after <= 0:
		return errors.New("-overload-latency, -overload-stall, -overload-for and -overload-after must not be negative")
	case o.overload.on() && *dbName == "sqlite":
		return errors.New("-overload-latency and -overload-stall need a server: PostgreSQL or MySQL")
	case *activityTick < 0 || *activityTick > 0 && *dbName != "postgres":
		return errors.New("-activity: a positive duration, on PostgreSQL")
	case *vacuumTick < 0 || *vacuumTick > 0 && *dbName != "postgres":
		return errors.New("-vacuum: a positive duration, on PostgreSQL")
	case *stall >= *expire:
		fmt.Printf("note: -overload-stall %v is not less than the lease (%v)\n", *stall, *expire)
	}
	modes := map[string][]bool{"off": {false}, "on": {true}, "both": {false, true}}[*balance]
	if modes == nil {
		return fmt.Errorf("-balance %q: want off, on or both", *balance)
	}
	dsn, err := dsnFor(*dbName)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// GORM's slow-statement warnings (a VACUUM, a DROP DATABASE) go to
	// standard error, out of the tables.
	quiet := &gorm.Config{Logger: logger.New(log.New(os.Stderr, "", log.LstdFlags), logger.Config{
		SlowThreshold: time.Second, LogLevel: logger.Warn, Colorful: false})}
	gdb, err := session.Open(dsn, quiet)
	if err != nil {
		return err
	}
	if *database != "" && *dbName != "sqlite" {
		own, created, err := ownDatabase(ctx, gdb, *dbName, dsn, *database)
		if err != nil {
			return err
		}
		if created {
			admin := gdb
			defer func() {
				admin.Exec(fmt.Sprintf(databaseSQL[*dbName].drop, *database))
				closeDB(admin)
			}()
		} else {
			defer closeDB(gdb)
		}
		dsn = own
		if gdb, err = session.Open(dsn, quiet); err != nil {
			return err
		}
	}
	defer closeDB(gdb)
	if err := migrate.Up(ctx, gdb); err != nil {
		return err
	}
	o.electionDB = gdb
	o.rows = rowStatsFor[*dbName](ctx, gdb, *userstat)
	if o.rows.restore != nil {
		defer o.rows.restore()
	}

	fmt.Printf("%s, TTL %v, interval %v, steady window %v\n", *dbName, *expire, *expire/3, *steady)
	fmt.Printf("rows: %s\n", o.rows.how)
	if o.overload.on() {
		fmt.Printf("overload: %s after the steady window, through a proxy per process; measured after it for %v\n", o.overload, *after)
	}
	if *dbName == "postgres" {
		var av string
		if err := gdb.Raw("SHOW autovacuum").Scan(&av).Error; err == nil && av != "on" {
			fmt.Printf("autovacuum is %s on this server: the election tables are vacuumed before each size, as autovacuum would keep them\n", av)
		}
	}
	if *vacuumTick > 0 {
		done, stop := vacuumEvery(ctx, gdb, *vacuumTick)
		defer func() {
			stop()
			done.print(os.Stdout, *vacuumTick)
		}()
	}
	var (
		points   []point
		byTable  []string
		overRows []string
	)
	if *activityTick > 0 {
		found, stop := sampleActivity(ctx, gdb, *activityTick)
		defer func() {
			stop()
			found.print(os.Stdout, *activityTick)
		}()
	}
	fmt.Println("| M | P | balance | cold start to all led | flaps (leaderships started; new terms) | statements/s | per process per interval | rows written per interval | rows read per interval | connections | CPU per process | max led (share) | failover of a killed process | overlaps |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range ints(*nsList) {
		for _, p := range ints(*procList) {
			for _, bal := range modes {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				tidy(ctx, gdb, *dbName)
				r, err := measure(ctx, o, dsn, m, p, bal)
				if err != nil {
					// A size that fails is reported in its row; the
					// others still run.
					fmt.Printf("| %d | %d | %s | **failed**: %v | | | | | | | | | | |\n", m, p, onOff(bal), err)
					continue
				}
				fmt.Println(r.row)
				points = append(points, r.point)
				byTable = append(byTable, r.byTable...)
				if r.overload != "" {
					overRows = append(overRows, r.overload)
				}
			}
		}
	}
	if len(byTable) > 0 {
		fmt.Println()
		fmt.Println("Rows per interval by table, steady window:")
		fmt.Println()
		fmt.Println("| M | P | balance | table | written per interval | read per interval |")
		fmt.Println("|---|---|---|---|---|---|")
		for _, l := range byTable {
			fmt.Println(l)
		}
	}
	if len(overRows) > 0 {
		fmt.Println()
		fmt.Printf("Overload: %s, then %v after it. Statements per process per interval: the mean of the processes, and the worst process in brackets.\n", o.overload, *after)
		fmt.Println()
		fmt.Println("| M | P | balance | per process per interval: steady / during / after | flaps during / after (per minute, % of M; new terms) | ends of leadership during and after | every namespace led again | rows written per interval: steady / during / after | rows read per interval: steady / during / after | connections (most) | failed rounds and attempts | overlaps |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, l := range overRows {
			fmt.Println(l)
		}
	}
	if *plotFile != "" {
		title := fmt.Sprintf("%s, TTL %v", *dbName, *expire)
		// The target of docs/performance.md, for PostgreSQL, whose round is one
		// statement (elsewhere three).
		target := 0.0
		if *dbName == "postgres" {
			target = 2
		}
		if err := os.WriteFile(*plotFile, plotSVG(title, points, target), 0o644); err != nil {
			return err
		}
		fmt.Printf("plot written to %s\n", *plotFile)
	}
	return nil
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// tidy deletes the rows earlier sizes left (their namespaces begin with
// "scale-") and, on PostgreSQL, vacuums the election tables: every
// heartbeat leaves a dead row version behind, and a server without
// autovacuum, or one that lags behind the earlier sizes, would make the
// next size pay for them. Member rows (schema version 3) expire with
// their processes and are pruned by the Groups.
func tidy(ctx context.Context, gdb *gorm.DB, db string) {
	for _, table := range []string{"election_candidates", "election_leaders", "election_history"} {
		gdb.WithContext(ctx).Exec("DELETE FROM "+table+" WHERE namespace LIKE ?", "scale-%")
	}
	if db == "postgres" {
		var tables []string
		gdb.WithContext(ctx).Raw("SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname LIKE 'election\\_%'").Scan(&tables)
		if len(tables) > 0 {
			gdb.WithContext(ctx).Exec("VACUUM (ANALYZE) " + strings.Join(tables, ", "))
		}
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func dsnFor(db string) (string, error) {
	switch db {
	case "postgres":
		if v := os.Getenv("SQLELECT_POSTGRES_DSN"); v != "" {
			return v, nil
		}
		return "", errors.New("SQLELECT_POSTGRES_DSN is not set")
	case "mysql":
		if v := os.Getenv("SQLELECT_MYSQL_DSN"); v != "" {
			return v, nil
		}
		return "", errors.New("SQLELECT_MYSQL_DSN is not set")
	case "sqlite":
		dir, err := os.MkdirTemp("", "sqlelect-scale")
		if err != nil {
			return "", err
		}
		return "sqlite:" + filepath.Join(dir, "scale.db"), nil
	}
	return "", fmt.Errorf("-db %q: want postgres, mysql or sqlite", db)
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// printTrace writes the statements counted between q0 and q1, most frequent
// first, per second and per process.
func printTrace(w io.Writer, title string, q0, q1 map[string]int64, window float64, p int) {
	type line struct {
		key string
		n   int64
	}
	var lines []line
	for k, n := range q1 {
		if d := n - q0[k]; d > 0 {
			lines = append(lines, line{k, d})
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.key, b.key)) })
	fmt.Fprintf(w, "%s:\n", title)
	for _, l := range lines {
		fmt.Fprintf(w, "  %8.2f/s per process  %s\n", float64(l.n)/window/float64(p), l.key)
	}
}
