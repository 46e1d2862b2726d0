// Command pglockbench measures sqlelect beside cirello.io/pglock on one
// PostgreSQL database, side by side in one run: acquiring a free lock,
// renewing it, releasing it, and a bare single-row UPDATE, each library
// through its own pool. Each operation is timed on its own and its calls of
// the driver counted (internal/rtcount); the two libraries' operations
// alternate, so both see the same load.
//
//	cd internal/peers && go run ./pglockbench -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// It is a program run by hand (docs/performance.md), in a module of its
// own so that the core module does not depend on pglock. pglock runs on
// lib/pq, the driver its New accepts; sqlelect on pgx through session.Open
// (pglock v1.16.1 requires pgx v5.7.5, so sqlelect runs on that version
// here).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"cirello.io/pglock"
	"github.com/google/uuid"
	"github.com/lib/pq"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("SQLELECT_POSTGRES_DSN"), "PostgreSQL DSN (default $SQLELECT_POSTGRES_DSN)")
	n := flag.Int("n", 500, "operations of each kind")
	ttl := flag.Duration("ttl", 2*time.Second, "lease duration of both libraries")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("no DSN: pass -dsn or set SQLELECT_POSTGRES_DSN")
	}
	if err := run(*dsn, *n, *ttl); err != nil {
		log.Fatal(err)
	}
}

// sample is the time and the driver calls of one kind of operation.
type sample struct {
	times []time.Duration
	calls rtcount.Counts
}

func (s *sample) add(d time.Duration, c rtcount.Counts) {
	s.times = append(s.times, d)
	for k := range c {
		s.calls[k] += c[k]
	}
}

func (s *sample) pct(p int) time.Duration {
	t := slices.Clone(s.times)
	slices.Sort(t)
	return t[min(len(t)-1, len(t)*p/100)]
}

// perOp is the calls of one operation, rounded.
func (s *sample) perOp() (float64, rtcount.Counts) {
	var each rtcount.Counts
	n := int64(len(s.times))
	for k := range s.calls {
		each[k] = (s.calls[k] + n/2) / n
	}
	return float64(s.calls.Total()) / float64(n), each
}

// timed runs op and adds its time and its calls on c to s.
func timed(s *sample, c *rtcount.Counter, op func() error) error {
	before := c.Snapshot()
	start := time.Now()
	err := op()
	d := time.Since(start)
	s.add(d, c.Snapshot().Sub(before))
	return err
}

func run(dsn string, n int, ttl time.Duration) error {
	ctx := context.Background()
	prefix := "peers." + uuid.NewString()[:8] + "."

	// sqlelect through the pool session.Open builds.
	var sc rtcount.Counter
	gdb, err := session.OpenWrapped(dsn, sc.Wrap)
	if err != nil {
		return err
	}
	if err := migrate.Up(ctx, gdb); err != nil {
		return err
	}
	sdb, err := gdb.DB()
	if err != nil {
		return err
	}
	defer sdb.Close()

	// pglock through a pool of its own on lib/pq, the driver its New
	// accepts.
	var pc rtcount.Counter
	conn, err := pq.NewConnector(dsn)
	if err != nil {
		return err
	}
	pdb := sql.OpenDB(pc.Wrap(conn))
	defer pdb.Close()
	table := "sqlelect_peers_pglock"
	client, err := pglock.New(pdb, pglock.WithLeaseDuration(ttl), pglock.WithHeartbeatFrequency(0), pglock.WithCustomTable(table))
	if err != nil {
		return err
	}
	if err := client.TryCreateTable(); err != nil {
		return err
	}
	for _, db := range []*sql.DB{sdb, pdb} {
		if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS bench_bare (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO bench_bare (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"); err != nil {
			return err
		}
	}
	defer cleanup(gdb, pdb, prefix, table)

	base, err := election.New(gdb, election.WithExpire(ttl))
	if err != nil {
		return err
	}
	beside, err := base.ForNamespace(prefix + "beside")
	if err != nil {
		return err
	}
	besideEl, err := beside.NewElector(uuid.New(), election.ElectorConfig{})
	if err != nil {
		return err
	}
	bctx, stop := context.WithCancel(ctx)
	besideDone := make(chan error, 1)
	go func() { besideDone <- besideEl.Run(bctx) }()
	defer func() { stop(); <-besideDone }()
	bare := func(db *sql.DB) error {
		_, err := db.ExecContext(ctx, "UPDATE bench_bare SET n = n + 1 WHERE id = 1")
		return err
	}
	var (
		sBare, pBare                  sample
		sAcq, sRenew, sResign, sUnreg sample
		sRun                          sample
		pAcq, pRenew, pRelease        sample
		warm                          = n / 10
	)
	for i := -warm; i < n; i++ {
		// The warm-up rounds (i < 0) prepare the statements of both
		// pools and are left out.
		var junk [10]sample
		pick := func(s *sample, j int) *sample {
			if i < 0 {
				return &junk[j]
			}
			return s
		}
		if err := timed(pick(&sBare, 0), &sc, func() error { return bare(sdb) }); err != nil {
			return err
		}
		if err := timed(pick(&pBare, 1), &pc, func() error { return bare(pdb) }); err != nil {
			return err
		}

		// sqlelect: a free seat in a namespace nobody used, by a new
		// Election (made untimed); its renewal; then Resign, or
		// UnregisterCandidate on every other round.
		e, err := base.ForNamespace(fmt.Sprintf("%s%d", prefix, i+warm))
		if err != nil {
			return err
		}
		id := uuid.New()
		var lease election.Lease
		if err := timed(pick(&sAcq, 2), &sc, func() (err error) { lease, err = e.Elect(ctx, id); return err }); err != nil {
			return err
		}
		if !lease.HeldBy(id) {
			return fmt.Errorf("sqlelect: a free seat not granted: %+v", lease)
		}
		// The first renewal prunes expired candidates (at most every half
		// window); a leader's renewals after it are the steady state.
		if _, err := e.Elect(ctx, id); err != nil {
			return err
		}
		if err := timed(pick(&sRenew, 3), &sc, func() (err error) { lease, err = e.Elect(ctx, id); return err }); err != nil {
			return err
		}
		if !lease.HeldBy(id) {
			return fmt.Errorf("sqlelect: renewal lost the seat: %+v", lease)
		}
		if i%2 == 0 {
			err = timed(pick(&sResign, 4), &sc, func() error { return e.Resign(ctx, id) })
		} else {
			err = timed(pick(&sUnreg, 5), &sc, func() error { return e.UnregisterCandidate(ctx, id) })
		}
		if err != nil {
			return err
		}

		// An Elector from Run to leading on a free seat, beside another
		// Elector of the process (which keeps the pool's LISTEN
		// connection open).
		if err := timed(pick(&sRun, 9), &sc, func() error { return runToLeading(ctx, base, fmt.Sprintf("%srun.%d", prefix, i+warm)) }); err != nil {
			return err
		}

		// pglock: a free lock of a name nobody used; a heartbeat; release.
		var l *pglock.Lock
		if err := timed(pick(&pAcq, 6), &pc, func() (err error) {
			l, err = client.AcquireContext(ctx, fmt.Sprintf("%s%d", prefix, i+warm), pglock.FailIfLocked())
			return err
		}); err != nil {
			return err
		}
		if err := timed(pick(&pRenew, 7), &pc, func() error { return client.SendHeartbeat(ctx, l) }); err != nil {
			return err
		}
		if err := timed(pick(&pRelease, 8), &pc, func() error { return client.ReleaseContext(ctx, l) }); err != nil {
			return err
		}
	}

	fmt.Printf("%d operations of each kind after %d warm-up rounds; lease %v; %s\n\n", n, warm, ttl, time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| library | operation | p50 | p90 | mean | driver calls/op | calls per op | p50 ÷ bare UPDATE p50 (same pool) |")
	fmt.Println("|---|---|---:|---:|---:|---:|---|---:|")
	row := func(lib, op string, s, floor *sample) {
		mean := time.Duration(0)
		for _, d := range s.times {
			mean += d
		}
		mean /= time.Duration(len(s.times))
		calls, each := s.perOp()
		fmt.Printf("| %s | %s | %s | %s | %s | %.2f | %v | %.2f |\n", lib, op, ms(s.pct(50)), ms(s.pct(90)), ms(mean), calls, each,
			float64(s.pct(50))/float64(floor.pct(50)))
	}
	row("sqlelect", "bare UPDATE", &sBare, &sBare)
	row("sqlelect", "acquire a free seat (Elect, new Election)", &sAcq, &sBare)
	row("sqlelect", "renew (Elect by the leader)", &sRenew, &sBare)
	row("sqlelect", "release (Resign)", &sResign, &sBare)
	row("sqlelect", "release (UnregisterCandidate)", &sUnreg, &sBare)
	row("sqlelect", "an Elector from Run to leading (statements: also the other Elector's)", &sRun, &sBare)
	row("pglock", "bare UPDATE", &pBare, &pBare)
	row("pglock", "acquire a free lock", &pAcq, &pBare)
	row("pglock", "renew (SendHeartbeat)", &pRenew, &pBare)
	row("pglock", "release (Release)", &pRelease, &pBare)
	fmt.Println()
	fmt.Printf("sqlelect ÷ pglock, p50: acquire %.2f (Run to leading %.2f), renew %.2f, release %.2f (Resign) and %.2f (UnregisterCandidate)\n",
		float64(sAcq.pct(50))/float64(pAcq.pct(50)), float64(sRun.pct(50))/float64(pAcq.pct(50)), float64(sRenew.pct(50))/float64(pRenew.pct(50)),
		float64(sResign.pct(50))/float64(pRelease.pct(50)), float64(sUnreg.pct(50))/float64(pRelease.pct(50)))
	return nil
}

// runToLeading runs an Elector of a new candidate in namespace ns until it
// leads, and then stops it (untimed: the time is Run's start to
// OnStartedLeading).
func runToLeading(ctx context.Context, base *election.Election, ns string) error {
	e, err := base.ForNamespace(ns)
	if err != nil {
		return err
	}
	leading := make(chan struct{})
	el, err := e.NewElector(uuid.New(), election.ElectorConfig{
		OnStartedLeading: func(context.Context, election.Lease) { close(leading) },
	})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(rctx) }()
	select {
	case <-leading:
	case err := <-done:
		cancel()
		return fmt.Errorf("an Elector's Run returned before leading: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		return fmt.Errorf("not leading after 30s on a free seat")
	}
	go func() { cancel(); <-done }()
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }

// cleanup deletes the rows of this run.
func cleanup(gdb *gorm.DB, pdb *sql.DB, prefix, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, t := range []string{"election_candidates", "election_leaders", "election_history"} {
		gdb.WithContext(ctx).Exec("DELETE FROM "+t+" WHERE namespace LIKE ?", prefix+"%")
	}
	_, _ = pdb.ExecContext(ctx, "DELETE FROM "+table+" WHERE name LIKE $1", prefix+"%")
}
