package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/models"
)

// misuseFixture is a fresh database with some election state that a misuse
// could damage: namespace "misuse" led by leader (term 1) with a second
// candidate, and namespace "other" led by its own leader.
type misuseFixture struct {
	tg       testdb.Target
	db       *gorm.DB
	e        *election.Election
	leader   uuid.UUID
	follower uuid.UUID
	lease    election.Lease // leader's lease in "misuse"
	other    election.Lease // the lease of namespace "other"
	otherTx  func(t *testing.T) *gorm.DB
}

func newMisuseFixture(t *testing.T, tg testdb.Target) *misuseFixture {
	t.Helper()
	ctx := testCtx(t)
	db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
	if err := migrate.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	f := &misuseFixture{tg: tg, db: db, leader: uuid.New(), follower: uuid.New()}
	f.e = mustElection(t, db, "misuse", election.WithExpire(time.Hour))
	for _, id := range []uuid.UUID{f.leader, f.follower} {
		if err := f.e.RegisterCandidate(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if f.lease, err = f.e.Elect(ctx, f.leader); err != nil || !f.lease.HeldBy(f.leader) {
		t.Fatalf("Elect: %+v, %v", f.lease, err)
	}
	if l, err := f.e.Elect(ctx, f.follower); err != nil || !l.HeldBy(f.leader) {
		t.Fatalf("follower's Elect: %+v, %v", l, err)
	}
	other := mustElection(t, db, "other", election.WithExpire(time.Hour))
	if f.other, err = other.Elect(ctx, uuid.New()); err != nil {
		t.Fatal(err)
	}
	f.otherTx = otherKindTx(t, tg)
	return f
}

// otherKindTx returns a function that begins a transaction on a database
// of another kind than tg, or nil when none is configured.
func otherKindTx(tb testing.TB, tg testdb.Target) func(t *testing.T) *gorm.DB {
	var other testdb.Target
	if tg.Name != "sqlite" {
		other = testdb.Target{Name: "sqlite"}
	} else {
		for _, o := range testdb.Targets(tb) {
			if o.Name != "sqlite" {
				other = o
				break
			}
		}
	}
	if other.Name == "" {
		return nil
	}
	return func(t *testing.T) *gorm.DB {
		db := testdb.Open(t, other)
		tx := db.Begin()
		if tx.Error != nil {
			t.Fatal(tx.Error)
		}
		t.Cleanup(func() { tx.Rollback() })
		return tx
	}
}

// snapshot is every row of the election tables.
type snapshot struct {
	Candidates []models.Candidate
	Leaders    []models.Leader
	History    []models.Term
}

func takeSnapshot(t *testing.T, db *gorm.DB) snapshot {
	t.Helper()
	var s snapshot
	if err := db.Order("namespace, candidate_id").Find(&s.Candidates).Error; err != nil {
		t.Fatalf("reading %s: %v", models.CandidatesTable, err)
	}
	if err := db.Order("namespace").Find(&s.Leaders).Error; err != nil {
		t.Fatalf("reading %s: %v", models.LeadersTable, err)
	}
	if err := db.Order("namespace, term").Find(&s.History).Error; err != nil {
		t.Fatalf("reading %s: %v", models.HistoryTable, err)
	}
	return s
}

// protocolCall is one protocol call, made for candidate id (ignored by the
// calls that take none; Guard uses the fixture leader's lease).
type protocolCall struct {
	name   string
	takeID bool
	call   func(ctx context.Context, f *misuseFixture, id uuid.UUID, opts ...election.CallOption) error
}

var protocolCalls = []protocolCall{
	{"RegisterCandidate", true, func(ctx context.Context, f *misuseFixture, id uuid.UUID, o ...election.CallOption) error {
		return f.e.RegisterCandidate(ctx, id, o...)
	}},
	{"Heartbeat", true, func(ctx context.Context, f *misuseFixture, id uuid.UUID, o ...election.CallOption) error {
		return f.e.Heartbeat(ctx, id, o...)
	}},
	{"Elect", true, func(ctx context.Context, f *misuseFixture, id uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.Elect(ctx, id, o...)
		return err
	}},
	{"IsLeader", true, func(ctx context.Context, f *misuseFixture, id uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.IsLeader(ctx, id, o...)
		return err
	}},
	{"Leader", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.Leader(ctx, o...)
		return err
	}},
	{"ListCandidates", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.ListCandidates(ctx, o...)
		return err
	}},
	{"UnregisterCandidate", true, func(ctx context.Context, f *misuseFixture, id uuid.UUID, o ...election.CallOption) error {
		return f.e.UnregisterCandidate(ctx, id, o...)
	}},
	{"Resign", true, func(ctx context.Context, f *misuseFixture, id uuid.UUID, o ...election.CallOption) error {
		return f.e.Resign(ctx, id, o...)
	}},
	{"Guard", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		return f.e.Guard(ctx, f.lease, o...)
	}},
	{"Prune", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.Prune(ctx, o...)
		return err
	}},
	{"Candidates", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.Candidates(ctx, o...)
		return err
	}},
	{"LeaderInfo", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.LeaderInfo(ctx, o...)
		return err
	}},
	{"History", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.History(ctx, 10, o...)
		return err
	}},
	{"VacateSeat", false, func(ctx context.Context, f *misuseFixture, _ uuid.UUID, o ...election.CallOption) error {
		_, err := f.e.VacateSeat(ctx, o...)
		return err
	}},
}

// misuseCase is one misuse; run returns the error it got, or skips.
type misuseCase struct {
	name string
	want error
	run  func(t *testing.T, f *misuseFixture) error
}

func misuseCases() []misuseCase {
	var nilCtx context.Context // a nil context, passed on purpose
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	cancel2()
	ctx := context.Background()

	var cases []misuseCase
	for _, pc := range protocolCalls {
		if pc.takeID {
			cases = append(cases, misuseCase{pc.name + "/uuid.Nil", election.ErrInvalidCandidate,
				func(t *testing.T, f *misuseFixture) error { return pc.call(ctx, f, uuid.Nil) }})
		}
		cases = append(cases,
			misuseCase{pc.name + "/WithTx(nil)", election.ErrInvalidOption,
				func(t *testing.T, f *misuseFixture) error { return pc.call(ctx, f, f.leader, election.WithTx(nil)) }},
			misuseCase{pc.name + "/WithTx(not a transaction)", election.ErrInvalidOption,
				func(t *testing.T, f *misuseFixture) error { return pc.call(ctx, f, f.leader, election.WithTx(f.db)) }},
			misuseCase{pc.name + "/WithTx(transaction on another kind of database)", election.ErrInvalidOption,
				func(t *testing.T, f *misuseFixture) error {
					if f.otherTx == nil {
						t.Skip("no database of another kind configured")
					}
					return pc.call(ctx, f, f.leader, election.WithTx(f.otherTx(t)))
				}},
			misuseCase{pc.name + "/WithTx(finished transaction)", sql.ErrTxDone,
				func(t *testing.T, f *misuseFixture) error {
					tx := f.db.Begin()
					if err := tx.Rollback().Error; err != nil {
						t.Fatal(err)
					}
					return pc.call(ctx, f, f.leader, election.WithTx(tx))
				}},
			misuseCase{pc.name + "/nil CallOption", election.ErrInvalidOption,
				func(t *testing.T, f *misuseFixture) error { return pc.call(ctx, f, f.leader, nil) }},
			misuseCase{pc.name + "/cancelled context", context.Canceled,
				func(t *testing.T, f *misuseFixture) error { return pc.call(cancelled, f, f.leader) }},
			misuseCase{pc.name + "/expired deadline", context.DeadlineExceeded,
				func(t *testing.T, f *misuseFixture) error { return pc.call(expired, f, f.leader) }},
			misuseCase{pc.name + "/nil context", election.ErrInvalidOption,
				func(t *testing.T, f *misuseFixture) error { return pc.call(nilCtx, f, f.leader) }},
		)
	}

	newWith := func(opts ...election.Option) func(t *testing.T, f *misuseFixture) error {
		return func(t *testing.T, f *misuseFixture) error {
			_, err := election.New(f.db, append([]election.Option{election.WithLogger(quiet)}, opts...)...)
			return err
		}
	}
	cases = append(cases,
		misuseCase{"New/empty namespace", election.ErrInvalidNamespace, newWith(election.WithNamespace(""))},
		misuseCase{"New/namespace of 192 bytes", election.ErrInvalidNamespace, newWith(election.WithNamespace(strings.Repeat("n", 192)))},
		misuseCase{"New/namespace of 192 bytes in 96 runes", election.ErrInvalidNamespace, newWith(election.WithNamespace(strings.Repeat("é", 96)))},
		misuseCase{"New/namespace with NUL", election.ErrInvalidNamespace, newWith(election.WithNamespace("misuse\x00"))},
		misuseCase{"New/namespace of NUL only", election.ErrInvalidNamespace, newWith(election.WithNamespace("\x00"))},
		misuseCase{"New/namespace not UTF-8", election.ErrInvalidNamespace, newWith(election.WithNamespace("misuse\xff"))},
		misuseCase{"New/namespace of a truncated rune", election.ErrInvalidNamespace, newWith(election.WithNamespace("\xe2\x82"))},
		misuseCase{"New/zero expire", election.ErrInvalidOption, newWith(election.WithExpire(0))},
		misuseCase{"New/negative expire", election.ErrInvalidOption, newWith(election.WithExpire(-time.Second))},
		misuseCase{"New/expire under a millisecond", election.ErrInvalidOption, newWith(election.WithExpire(time.Microsecond))},
		misuseCase{"New/nil logger", election.ErrInvalidOption, newWith(election.WithLogger(nil))},
		misuseCase{"New/nil Option", election.ErrInvalidOption, newWith(nil)},
		misuseCase{"New/nil database", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			_, err := election.New(nil)
			return err
		}},
		misuseCase{"New/zero gorm.DB", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			_, err := election.New(&gorm.DB{})
			return err
		}},
		misuseCase{"New/transaction handle", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			tx := f.db.Begin()
			defer tx.Rollback()
			_, err := election.New(tx)
			return err
		}},
		misuseCase{"Guard/zero lease", election.ErrNotLeader, func(t *testing.T, f *misuseFixture) error {
			return f.e.Guard(ctx, election.Lease{})
		}},
		misuseCase{"Guard/zero lease in a transaction", election.ErrNotLeader, func(t *testing.T, f *misuseFixture) error {
			tx := f.db.Begin()
			defer tx.Rollback()
			return f.e.Guard(ctx, election.Lease{}, election.WithTx(tx))
		}},
		misuseCase{"Guard/lease of another namespace", election.ErrNotLeader, func(t *testing.T, f *misuseFixture) error {
			return f.e.Guard(ctx, f.other)
		}},
		misuseCase{"Guard/lease of another namespace in a transaction", election.ErrNotLeader, func(t *testing.T, f *misuseFixture) error {
			tx := f.db.Begin()
			defer tx.Rollback()
			return f.e.Guard(ctx, f.other, election.WithTx(tx))
		}},
		misuseCase{"Guard/lease with the namespace's leader but another term", election.ErrNotLeader, func(t *testing.T, f *misuseFixture) error {
			l := f.lease
			l.Term++
			return f.e.Guard(ctx, l)
		}},
		misuseCase{"Guard/lease naming the follower", election.ErrNotLeader, func(t *testing.T, f *misuseFixture) error {
			l := f.lease
			l.Leader = f.follower
			return f.e.Guard(ctx, l)
		}},
		misuseCase{"NewElector/uuid.Nil", election.ErrInvalidCandidate, func(t *testing.T, f *misuseFixture) error {
			_, err := f.e.NewElector(uuid.Nil, election.ElectorConfig{})
			return err
		}},
		misuseCase{"NewElector/interval over half the expiry", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			_, err := f.e.NewElector(f.follower, election.ElectorConfig{Interval: f.e.Expire()/2 + time.Millisecond})
			return err
		}},
		misuseCase{"NewElector/negative interval", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			_, err := f.e.NewElector(f.follower, election.ElectorConfig{Interval: -time.Second})
			return err
		}},
		misuseCase{"NewElector/margin too large", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			_, err := f.e.NewElector(f.follower, election.ElectorConfig{SafetyMargin: f.e.Expire()})
			return err
		}},
		misuseCase{"NewElector/negative shutdown timeout", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			_, err := f.e.NewElector(f.follower, election.ElectorConfig{ShutdownTimeout: -time.Second})
			return err
		}},
		misuseCase{"Elector.Run/nil context", election.ErrInvalidOption, func(t *testing.T, f *misuseFixture) error {
			el, err := f.e.NewElector(f.leader, election.ElectorConfig{})
			if err != nil {
				t.Fatal(err)
			}
			return el.Run(nilCtx)
		}},
		misuseCase{"New/unsafe settings", election.ErrUnsafeDatabase, func(t *testing.T, f *misuseFixture) error {
			db := unsafeHandle(t, f.tg)
			if db == nil {
				t.Skipf("no unsafe setting to try on %s", f.tg.Name)
			}
			_, err := election.New(db, election.WithLogger(quiet))
			return err
		}},
	)
	for _, limit := range []int{0, -1} {
		cases = append(cases, misuseCase{fmt.Sprintf("History/limit %d", limit), election.ErrInvalidOption,
			func(t *testing.T, f *misuseFixture) error { _, err := f.e.History(ctx, limit); return err }})
	}
	return cases
}

// unsafeHandle opens tg's database with the plain GORM driver, without the
// settings session.Open adds; nil when every handle is safe there.
func unsafeHandle(t *testing.T, tg testdb.Target) *gorm.DB {
	t.Helper()
	var d gorm.Dialector
	switch tg.Name {
	case "sqlite":
		// Rollback journal, no busy timeout.
		d = testdb.PlainSQLite(t, filepath.Join(t.TempDir(), "plain.db"), "", "")
	case "mysql":
		// The driver's own DSN without parseTime.
		d = gormmysql.Open(strings.TrimPrefix(tg.DSN, "mysql://"))
	default:
		return nil
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testdb.Close(db) })
	return db
}

// TestMisuse makes every misuse on every database: each returns its
// sentinel error and leaves every row of both tables as it was.
func TestMisuse(t *testing.T) {
	cases := misuseCases()
	if len(cases) < 15 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			f := newMisuseFixture(t, tg)
			before := takeSnapshot(t, f.db)
			if len(before.Candidates) != 3 || len(before.Leaders) != 2 {
				t.Fatalf("fixture: %d candidates, %d leaders", len(before.Candidates), len(before.Leaders))
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					err := c.run(t, f)
					if !errors.Is(err, c.want) {
						t.Fatalf("got %v, want %v", err, c.want)
					}
					if after := takeSnapshot(t, f.db); !reflect.DeepEqual(before, after) {
						t.Fatalf("rows changed:\nbefore %+v\nafter  %+v", before, after)
					}
				})
			}
			// The fixture still works as before.
			ctx := testCtx(t)
			if err := f.e.Guard(ctx, f.lease); err != nil {
				t.Fatalf("the leader's lease after all misuses: %v", err)
			}
		})
	}
}

// TestMisuseNotMigrated makes every call on a database without the
// election tables: each returns ErrNotMigrated and creates nothing.
func TestMisuseNotMigrated(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			e := mustElection(t, db, "unmigrated")
			f := &misuseFixture{tg: tg, db: db, e: e, leader: uuid.New(),
				lease: election.Lease{Namespace: "unmigrated", Leader: uuid.New(), Term: 1, ExpiresAt: time.Now().Add(time.Hour)}}
			ctx := testCtx(t)
			for _, pc := range protocolCalls {
				if err := pc.call(ctx, f, f.leader); !errors.Is(err, election.ErrNotMigrated) {
					t.Errorf("%s: got %v, want ErrNotMigrated", pc.name, err)
				}
				tx := db.Begin()
				if err := pc.call(ctx, f, f.leader, election.WithTx(tx)); !errors.Is(err, election.ErrNotMigrated) {
					t.Errorf("%s WithTx: got %v, want ErrNotMigrated", pc.name, err)
				}
				tx.Rollback()
			}
			for _, table := range []string{models.CandidatesTable, models.LeadersTable} {
				if db.Migrator().HasTable(table) {
					t.Errorf("a refused call created %s", table)
				}
			}
		})
	}
}

// Namespaces are bound parameters: strings that would break a statement
// built by concatenation are ordinary namespaces, each its own election,
// stored and returned byte for byte, and the tables survive them.
func TestNamespacesAreBoundParameters(t *testing.T) {
	namespaces := []string{
		`x'; DROP TABLE election_leaders; --`,
		`x"; DROP TABLE election_candidates; --`,
		`Robert'); DROP TABLE election_leaders;--`,
		`' OR '1'='1`,
		`') OR 1=1 --`,
		`\'; DELETE FROM election_candidates; --`,
		`$1`, `?`, `:ns`, `@ns`, `%`, `_`, `*`, `\`, `\\`, "`", `[x]`, `{}`, `;`, `--`, `/*`,
		"名前空間", "🗳️", "\u202eevil", "a\u200bb", "e\u0301", "é",
		"Jobs", "jobs", "JOBS",
		"x", "x ", " x", "x\t", "x\n", "x\r\n",
		strings.Repeat("n", election.MaxNamespaceLen),
		strings.Repeat("é", 95) + "n", // 191 bytes
	}
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
			if err := migrate.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
			for i, ns := range namespaces {
				e := mustElection(t, db, ns)
				id := uuid.New()
				l, err := e.Elect(ctx, id)
				if err != nil {
					t.Fatalf("namespace %q: Elect: %v", ns, err)
				}
				if !l.HeldBy(id) || l.Term != 1 || l.Namespace != ns {
					t.Fatalf("namespace %q: first Elect gave %+v; another namespace's row was matched", ns, l)
				}
				got, err := e.Leader(ctx)
				if err != nil || got.Namespace != ns || got.Leader != id {
					t.Fatalf("namespace %q: Leader = %+v, %v", ns, got, err)
				}
				ids, err := e.ListCandidates(ctx)
				if err != nil || len(ids) != 1 || ids[0] != id {
					t.Fatalf("namespace %q: ListCandidates = %v, %v; want only %s", ns, ids, err, id)
				}
				if ok, err := e.IsLeader(ctx, id); err != nil || !ok {
					t.Fatalf("namespace %q: IsLeader = %v, %v", ns, ok, err)
				}
				if err := e.Guard(ctx, l); err != nil {
					t.Fatalf("namespace %q: Guard: %v", ns, err)
				}
				row, ok := leaderRow(t, db, ns)
				if !ok || row.Namespace != ns || row.LeaderID == nil || *row.LeaderID != id {
					t.Fatalf("namespace %q: stored leader row %+v (found %v)", ns, row, ok)
				}
				if rows := candidateRows(t, db, ns); len(rows) != 1 || rows[id].Namespace != ns {
					t.Fatalf("namespace %q: stored candidate rows %+v", ns, rows)
				}
				s := takeSnapshot(t, db)
				if len(s.Leaders) != i+1 || len(s.Candidates) != i+1 {
					t.Fatalf("after namespace %q: %d leader rows and %d candidate rows, want %d each",
						ns, len(s.Leaders), len(s.Candidates), i+1)
				}
			}
			for _, table := range []string{models.CandidatesTable, models.LeadersTable} {
				if !db.Migrator().HasTable(table) {
					t.Fatalf("%s is gone", table)
				}
			}
			// Every namespace kept its own row, byte for byte.
			s := takeSnapshot(t, db)
			stored := map[string]bool{}
			for _, l := range s.Leaders {
				stored[l.Namespace] = true
			}
			for _, ns := range namespaces {
				if !stored[ns] {
					t.Errorf("namespace %s not stored as given", fmt.Sprintf("%q", ns))
				}
			}
		})
	}
}
