package election_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// TestGroupShutdownVacatesInOneStatement: on PostgreSQL and MariaDB, a
// Group whose Run returns vacates the seats whose work has returned in one
// statement, not in one a seat: every seat is vacated, its term ended as
// unregistered in the history and its candidate row deleted, and the
// other processes' candidates are woken by the statement's notifications,
// so that another Group leads every namespace long before the leases
// would have expired.
func TestGroupShutdownVacatesInOneStatement(t *testing.T) {
	for _, tg := range testdb.Servers(t) {
		t.Run(tg.Name, func(t *testing.T) { testShutdownVacates(t, tg) })
	}
}

func testShutdownVacates(t *testing.T, tg testdb.Target) {
	testdb.SkipWithoutNotifications(t, tg)
	const n = 32
	// The batch vacate, then the one-seat vacate, on PostgreSQL; on
	// MariaDB the batch vacate, then the one-seat acquire or vacate.
	db, tl := openTallied(t, tg, "WITH t AS (\n  SELECT * FROM unnest(", "WITH seen AS (",
		"BEGIN NOT ATOMIC DECLARE v_id ", "BEGIN NOT ATOMIC DECLARE v_ns ")
	if tg.Name != "postgres" {
		if d := detected(t, db); dialect.AcquirerOf(d) == nil {
			t.Skipf("%s vacates one seat at a time in a transaction (MySQL, TiDB)", d.Name())
		}
	}
	other := testdb.Open(t, tg)
	nss := groupNamespaces(t, n)
	const expire = 10 * time.Second
	a := runGroup(t, db, uuid.New(), election.GroupConfig{Namespaces: nss}, election.WithExpire(expire))
	waitUntil(t, 30*time.Second, "a leads every namespace", func() bool { return len(a.g.Leading()) == n })
	b := runGroup(t, other, uuid.New(), election.GroupConfig{Namespaces: nss}, election.WithExpire(expire))
	defer func() { must(t, "Run", b.stop()) }()
	waitUntil(t, 30*time.Second, "b is a candidate in every namespace", func() bool {
		for _, ns := range nss {
			if _, ok := candidateRows(t, other, ns)[b.g.ID()]; !ok {
				return false
			}
		}
		return true
	})

	tl.on.Store(true)
	stopped := time.Now()
	must(t, "Run", a.stop())
	tl.on.Store(false)
	if k := tl.sent[0].Load() + tl.sent[2].Load(); k < 1 || k > 4 {
		t.Errorf("%d statements vacated %d seats, want 1 to 4", k, n)
	}
	if k, bg := tl.sent[1].Load()+tl.sent[3].Load(), tl.begins.Load(); k != 0 || bg != 0 {
		t.Errorf("%d seats vacated one at a time and %d transactions begun on the way out, want none", k, bg)
	}
	for _, ns := range nss {
		if _, ok := candidateRows(t, other, ns)[a.g.ID()]; ok {
			t.Errorf("%s: a's candidate row is left", ns)
		}
		h, err := mustElection(t, other, ns).History(testCtx(t), 10)
		must(t, "History", err)
		var mine *election.TermRecord
		for i := range h {
			if h[i].Leader == a.g.ID() {
				mine = &h[i]
			}
		}
		if mine == nil || !mine.Ended() || mine.EndReason != election.EndUnregistered {
			t.Errorf("%s: a's term in the history is %+v, want ended as %q", ns, mine, election.EndUnregistered)
		}
	}
	// Woken, b takes every seat well before a's leases would have ended.
	waitUntil(t, expire/2, "b leads every namespace after a's shutdown", func() bool { return len(b.g.Leading()) == n })
	t.Logf("b led all %d namespaces %v after a's Run was stopped", n, time.Since(stopped).Round(time.Millisecond))
}
