package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"gorm.io/gorm"
)

// vacuumTables are the tables -vacuum visits: those whose rows every
// interval rewrites (the leases, the candidates, the member rows).
const vacuumTables = "election_leaders, election_candidates, election_members"

// vacuums is what -vacuum did: on PostgreSQL, a plain VACUUM of the
// election tables every tick over the whole run, as an autovacuum set to
// visit them that often would (autovacuum_naptime, and a threshold per
// table). A server with autovacuum off, as the one the tests run on,
// otherwise keeps every dead row version of a run: each renewal leaves one
// behind in the leaders table and its indexes.
type vacuums struct {
	mu      sync.Mutex
	runs    int           // VACUUMs that ended
	failed  int           // VACUUMs that failed (the run ending, a busy server)
	took    time.Duration // their total time
	longest time.Duration
}

// vacuumEvery vacuums the election tables every tick, one VACUUM at a
// time, until stop is called.
func vacuumEvery(ctx context.Context, db *gorm.DB, tick time.Duration) (v *vacuums, stop func()) {
	v = &vacuums{}
	return v, every(ctx, tick, func(ctx context.Context) {
		start := time.Now()
		err := db.WithContext(ctx).Exec("VACUUM " + vacuumTables).Error
		v.add(time.Since(start), err)
	})
}

// add counts one VACUUM that took d and ended with err.
func (v *vacuums) add(d time.Duration, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.failed++
		return
	}
	v.runs++
	v.took += d
	v.longest = max(v.longest, d)
}

// print writes what the VACUUMs did: how many, and how long they took.
func (v *vacuums) print(w io.Writer, tick time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(w, "\nVACUUM %s every %v over the whole run: %d ran", vacuumTables, tick, v.runs)
	if v.runs > 0 {
		fmt.Fprintf(w, ", %v each on average, the longest %v", (v.took / time.Duration(v.runs)).Round(time.Millisecond), v.longest.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "; %d failed\n", v.failed)
}
