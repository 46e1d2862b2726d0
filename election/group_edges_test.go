package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupTakesLapsedSeatsInOneStatement: on PostgreSQL and MariaDB,
// where one statement takes many seats, a Group that follows a leader
// whose leases end together (a crashed process: its leases were renewed
// in one statement) takes them at their edge in batch takes, not in one
// transaction or statement a seat. Every lease ends at once, so the lease
// edges reach the Group before any round could queue the seats.
func TestGroupTakesLapsedSeatsInOneStatement(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) { testTakesLapsedSeats(t, tg) })
	}
}

func testTakesLapsedSeats(t *testing.T, tg testdb.Target) {
	const n = 64
	// The batch take's first words, on PostgreSQL and on MariaDB.
	db, tl := openTallied(t, tg, "WITH w AS (SELECT DISTINCT unnest(", "BEGIN NOT ATOMIC DECLARE v_nss ")
	testdb.Raw(t, db).SetMaxOpenConns(3)
	plain := testdb.Open(t, tg)
	if d := detected(t, plain); dialect.AcquirerOf(d) == nil {
		t.Skipf("%s takes one seat at a time in a transaction (MySQL, TiDB)", d.Name())
	}
	raw := testdb.Raw(t, plain)
	nss := groupNamespaces(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The crashed leader: every lease ends at one time, 1.5 s from now by
	// the database clock (read once: on a busy machine the inserts, each
	// reading the clock, would spread the ends over hundreds of ms).
	crashed := uuid.New()
	clock := "SELECT clock_timestamp() + interval '1500 milliseconds'"
	if tg.Name != "postgres" {
		clock = "SELECT SYSDATE(6) + INTERVAL 1500000 MICROSECOND"
	}
	var end time.Time
	if err := raw.QueryRowContext(ctx, clock).Scan(&end); err != nil {
		t.Fatal(err)
	}
	for i, ns := range nss {
		if err := plain.WithContext(ctx).Exec("INSERT INTO election_leaders (namespace, leader_id, term, lease_expires_at, acquired_at, updated_at) "+
			"VALUES (?, ?, ?, ?, ?, ?)", ns, crashed, int64(i+1), end, end, end).Error; err != nil {
			t.Fatal(err)
		}
	}
	tl.on.Store(true)
	r := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss, Interval: 600 * time.Millisecond}, election.WithExpire(2*time.Second))
	defer func() { must(t, "Run", r.stop()) }()
	waitUntil(t, 30*time.Second, "the Group leads every namespace", func() bool { return len(r.g.Leading()) == n })
	if b := tl.begins.Load(); b != 0 {
		t.Errorf("%d transactions began on the way to leading %d lapsed seats, want 0 (one statement takes many)", b, n)
	}
	// A few batches: the edges fire within a moment of each other, and a
	// take sent a little before the database's end of the leases is
	// tried again at the end.
	if k := tl.sent[0].Load() + tl.sent[1].Load(); k < 1 || k > n/4 {
		t.Errorf("%d batch takes for %d seats whose leases ended together, want 1 to %d", k, n, n/4)
	}
	for _, ns := range nss {
		var leader uuid.UUID
		if err := plain.WithContext(ctx).Raw("SELECT leader_id FROM election_leaders WHERE namespace = ?", ns).Row().Scan(&leader); err != nil {
			t.Fatal(err)
		}
		if leader != r.g.ID() {
			t.Fatalf("%s led by %v in the table, want the Group %v", ns, leader, r.g.ID())
		}
	}
}
