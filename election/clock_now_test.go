package election_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestNow: Election.Now reads the database clock in UTC, inside or outside
// the caller's transaction; on these test servers it is the host's clock,
// so it lies within a few seconds of time.Now.
func TestNow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		e := mustElection(t, db, testdb.Namespace(t))
		now, err := e.Now(ctx)
		must(t, "Now", err)
		if now.Location() != time.UTC {
			t.Errorf("Now in %v, want UTC", now.Location())
		}
		if d := time.Since(now); d > 5*time.Second || d < -5*time.Second {
			t.Errorf("Now = %v, %v from the host's clock", now, d)
		}
		later, err := e.Now(ctx)
		must(t, "Now", err)
		if later.Before(now) {
			t.Errorf("the clock went back: %v then %v", now, later)
		}
	})
}
