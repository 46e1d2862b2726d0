package election_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/rtcount"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// openFreshCounted opens an empty database of tg's kind (a new file, or a
// new database on the server, so that no other test's namespaces are in
// it) through a round-trip counter, and migrates it.
func openFreshCounted(t *testing.T, tg testdb.Target) (*gorm.DB, *rtcount.Counter) {
	t.Helper()
	c := &rtcount.Counter{}
	db, err := session.OpenWrapped(testdb.Fresh(t, tg), c.Wrap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testdb.Close(db) })
	if err := migrate.Up(testCtx(t), db); err != nil {
		t.Fatal(err)
	}
	return db, c
}

// countCalls returns the statements fn ran: the driver calls it made,
// but for preparing a statement (SQLite keeps the library's statements
// prepared, and prepares each on its first use).
func countCalls(t *testing.T, c *rtcount.Counter, fn func() error) int64 {
	t.Helper()
	c.Reset()
	if err := fn(); err != nil {
		t.Fatal(err)
	}
	n := c.Snapshot()
	return n.Total() - n[rtcount.Prepare]
}

// TestFleetReads: ListSeats, ListAllCandidates, ListProcesses and
// ListRecentTerms each read every namespace with one statement, whatever
// their number, and report what the per-namespace calls report: a led
// namespace, one with candidates but no leader row, one whose leader
// resigned, one whose lease lapsed, and one named with markup.
func TestFleetReads(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			ctx := testCtx(t)
			db, counter := openFreshCounted(t, tg)
			p1 := mustElection(t, db, "led", election.WithLabel("p1"), election.WithExpire(30*time.Second))
			p2 := mustElection(t, db, "led", election.WithLabel("p2"), election.WithExpire(30*time.Second))
			p3 := mustElection(t, db, "lapsed", election.WithLabel("p3"), election.WithExpire(time.Second))
			in := func(e *election.Election, ns string) *election.Election {
				t.Helper()
				x, err := e.ForNamespace(ns)
				must(t, "ForNamespace", err)
				return x
			}
			const markup = `<script>alert(1)</script> x`
			a, b, c := uuid.New(), uuid.New(), uuid.New()

			// Empty: the seats are none, and the clock is still read.
			seats, err := p1.ListSeats(ctx)
			must(t, "ListSeats", err)
			if len(seats.Seats) != 0 || seats.Seats == nil || seats.Now.IsZero() {
				t.Errorf("ListSeats on empty tables: %+v", seats)
			}

			led := mustElect(t, p1, a)
			must(t, "register b", p2.RegisterCandidate(ctx, b))
			must(t, "register a in follow", in(p1, "follow").RegisterCandidate(ctx, a))
			resigned := mustElect(t, in(p1, "resigned"), a)
			must(t, "Resign", in(p1, "resigned").Resign(ctx, a))
			lapsed := mustElect(t, p3, c)
			marked := mustElect(t, in(p2, markup), b)
			if marked.Leader != b || lapsed.Leader != c || resigned.Leader != a || led.Leader != a {
				t.Fatal("the setup's elections went elsewhere")
			}
			// The lapsed lease and its candidate row expire.
			time.Sleep(1200 * time.Millisecond)
			host, _ := os.Hostname()
			id := func(label string) election.Identity {
				return election.Identity{Hostname: host, PID: os.Getpid(), Label: label}
			}

			var list election.SeatList
			if n := countCalls(t, counter, func() (err error) { list, err = p1.ListSeats(ctx); return err }); n != 1 {
				t.Errorf("ListSeats: %d statements, want 1", n)
			}
			got := map[string]election.SeatInfo{}
			var names []string
			for _, s := range list.Seats {
				got[s.Namespace] = s
				names = append(names, s.Namespace)
			}
			if want := []string{markup, "follow", "lapsed", "led", "resigned"}; !slices.Equal(names, want) {
				t.Errorf("ListSeats namespaces %q, want %q (byte order)", names, want)
			}
			if d := time.Since(list.Now); d < -time.Minute || d > time.Minute {
				t.Errorf("ListSeats Now %v is not the clock", list.Now)
			}
			s := got["led"]
			if s.Lease.Leader != a || s.Lease.Term != led.Term || !s.Lease.ExpiresAt.After(list.Now) || s.Identity != id("p1") ||
				s.Candidates != 2 || s.LeaseWindow != 30*time.Second || !s.LapsedAt.IsZero() ||
				s.Last.Term != led.Term || s.Last.Leader != a || s.Last.Ended() || s.Last.Identity != id("p1") {
				t.Errorf("led: %+v", s)
			}
			info, err := p1.LeaderInfo(ctx)
			must(t, "LeaderInfo", err)
			if info.Lease.Leader != s.Lease.Leader || info.Lease.Term != s.Lease.Term || info.Identity != s.Identity {
				t.Errorf("ListSeats %+v disagrees with LeaderInfo %+v", s, info)
			}
			if s := got["follow"]; !s.Lease.Vacant() || s.Candidates != 1 || s.Last.Term != 0 || !s.LapsedAt.IsZero() {
				t.Errorf("follow (a candidate, no leader row): %+v", s)
			}
			if s := got["resigned"]; !s.Lease.Vacant() || s.Candidates != 1 || s.Last.Term != resigned.Term ||
				s.Last.EndReason != election.EndResigned || s.Last.Identity != id("p1") || !s.LapsedAt.IsZero() {
				t.Errorf("resigned: %+v", s)
			}
			if s := got["lapsed"]; !s.Lease.Vacant() || s.Candidates != 0 || !s.LapsedAt.Equal(lapsed.ExpiresAt) ||
				s.Last.Leader != c || s.Last.Ended() || s.Last.Identity != id("p3") {
				t.Errorf("lapsed: %+v, want lapsed at %v", s, lapsed.ExpiresAt)
			}
			if s := got[markup]; s.Lease.Leader != b || s.Identity != id("p2") || s.Candidates != 1 {
				t.Errorf("markup: %+v", s)
			}

			var cands []election.NamespaceCandidate
			if n := countCalls(t, counter, func() (err error) { cands, err = p1.ListAllCandidates(ctx); return err }); n != 1 {
				t.Errorf("ListAllCandidates: %d statements, want 1", n)
			}
			var seen []string
			for _, ci := range cands {
				seen = append(seen, fmt.Sprintf("%s %s %v %s", ci.Namespace, ci.ID, ci.Leader, ci.Identity.Label))
				if !ci.ExpiresAt.After(list.Now) || ci.RegisteredAt.IsZero() || ci.LastHeartbeatAt.IsZero() {
					t.Errorf("candidate %+v: times", ci)
				}
			}
			ledWant := []string{fmt.Sprintf("led %s true p1", a), fmt.Sprintf("led %s false p2", b)}
			if b.String() < a.String() {
				ledWant[0], ledWant[1] = ledWant[1], ledWant[0]
			}
			want := append(append([]string{fmt.Sprintf("%s %s true p2", markup, b), fmt.Sprintf("follow %s false p1", a)}, ledWant...),
				fmt.Sprintf("resigned %s false p1", a))
			if !slices.Equal(seen, want) {
				t.Errorf("ListAllCandidates:\n%q\nwant\n%q", seen, want)
			}
			one, err := p2.Candidates(ctx)
			must(t, "Candidates", err)
			if len(one) != 2 {
				t.Errorf("Candidates of led: %+v", one)
			}

			var procs []election.ProcessInfo
			if n := countCalls(t, counter, func() (err error) { procs, err = p1.ListProcesses(ctx); return err }); n != 1 {
				t.Errorf("ListProcesses: %d statements, want 1", n)
			}
			if len(procs) != 2 ||
				procs[0].Identity != id("p1") || procs[0].Candidacies != 3 || procs[0].CandidateIDs != 1 || procs[0].Leads != 1 ||
				procs[1].Identity != id("p2") || procs[1].Candidacies != 2 || procs[1].CandidateIDs != 1 || procs[1].Leads != 1 ||
				procs[0].LastHeartbeatAt.IsZero() {
				t.Errorf("ListProcesses: %+v", procs)
			}

			var terms []election.TermRecord
			if n := countCalls(t, counter, func() (err error) { terms, err = p1.ListRecentTerms(ctx, time.Hour); return err }); n != 1 {
				t.Errorf("ListRecentTerms: %d statements, want 1", n)
			}
			var ts []string
			for _, tr := range terms {
				ts = append(ts, fmt.Sprintf("%s %d %s %s", tr.Namespace, tr.Term, tr.Identity.Label, tr.EndReason))
			}
			if want := []string{markup + " 1 p2 ", "lapsed 1 p3 ", "led 1 p1 ", "resigned 1 p1 resigned"}; !slices.Equal(ts, want) {
				t.Errorf("ListRecentTerms(1h): %q, want %q", ts, want)
			}
			// The resignation is more than a second old: a shorter window
			// leaves it out, and keeps the running terms.
			terms, err = p1.ListRecentTerms(ctx, 500*time.Millisecond)
			must(t, "ListRecentTerms", err)
			ts = ts[:0]
			for _, tr := range terms {
				ts = append(ts, tr.Namespace)
			}
			if want := []string{markup, "lapsed", "led"}; !slices.Equal(ts, want) {
				t.Errorf("ListRecentTerms(500ms): %q, want %q", ts, want)
			}
			if _, err := p1.ListRecentTerms(ctx, 0); !errors.Is(err, election.ErrInvalidOption) {
				t.Errorf("ListRecentTerms(0) = %v, want ErrInvalidOption", err)
			}

			// Many more namespaces: still one statement each.
			for i := range 40 {
				must(t, "register", in(p2, fmt.Sprintf("more-%02d", i)).RegisterCandidate(ctx, b))
			}
			for what, call := range map[string]func() error{
				"ListSeats":         func() error { _, err := p1.ListSeats(ctx); return err },
				"ListAllCandidates": func() error { _, err := p1.ListAllCandidates(ctx); return err },
				"ListProcesses":     func() error { _, err := p1.ListProcesses(ctx); return err },
				"ListRecentTerms":   func() error { _, err := p1.ListRecentTerms(ctx, time.Hour); return err },
			} {
				if n := countCalls(t, counter, call); n != 1 {
					t.Errorf("%s over 45 namespaces: %d statements, want 1", what, n)
				}
			}
			list, err = p1.ListSeats(ctx)
			must(t, "ListSeats", err)
			if len(list.Seats) != 45 {
				t.Errorf("ListSeats over 45 namespaces: %d seats", len(list.Seats))
			}
		})
	}
}

// TestFleetRecentTermsCap: ListRecentTerms returns the newest
// MaxRecentTerms terms of a namespace that changed leaders more often than
// that within the window.
func TestFleetRecentTermsCap(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		ctx := testCtx(t)
		ns := testdb.Namespace(t)
		e := mustElection(t, db, ns)
		ids := []uuid.UUID{uuid.New(), uuid.New()}
		var last election.Lease
		for i := range election.MaxRecentTerms + 3 {
			last = mustElect(t, e, ids[i%2])
			must(t, "Resign", e.Resign(ctx, ids[i%2]))
		}
		terms, err := e.ListRecentTerms(ctx, time.Hour)
		must(t, "ListRecentTerms", err)
		var mine []int64
		for _, tr := range terms {
			if tr.Namespace == ns {
				mine = append(mine, tr.Term)
			}
		}
		if len(mine) != election.MaxRecentTerms || mine[0] != last.Term-election.MaxRecentTerms+1 || mine[len(mine)-1] != last.Term {
			t.Errorf("terms of a namespace with %d terms in the window: %d, from %v to %v", last.Term, len(mine), mine[0], mine[len(mine)-1])
		}
	})
}

// TestFleetSchema: on PostgreSQL the fleet reads of an Election WithSchema
// see the tables of that schema only.
func TestFleetSchema(t *testing.T) {
	tg := testdb.Only(t, "postgres")
	db := testdb.OpenDSN(t, testdb.Fresh(t, tg))
	ctx := testCtx(t)
	must(t, "migrate", migrate.Up(ctx, db))
	must(t, "migrate schema", migrate.Up(ctx, db, migrate.WithSchema("fleet schema")))
	plain := mustElection(t, db, "in-public")
	other := mustElection(t, db, "in-schema", election.WithSchema("fleet schema"))
	mustElect(t, plain, uuid.New())
	mustElect(t, other, uuid.New())
	for _, c := range []struct {
		e    *election.Election
		want string
	}{{plain, "in-public"}, {other, "in-schema"}} {
		seats, err := c.e.ListSeats(ctx)
		must(t, "ListSeats", err)
		terms, err := c.e.ListRecentTerms(ctx, time.Hour)
		must(t, "ListRecentTerms", err)
		cands, err := c.e.ListAllCandidates(ctx)
		must(t, "ListAllCandidates", err)
		procs, err := c.e.ListProcesses(ctx)
		must(t, "ListProcesses", err)
		if len(seats.Seats) != 1 || seats.Seats[0].Namespace != c.want || len(terms) != 1 || terms[0].Namespace != c.want ||
			len(cands) != 1 || cands[0].Namespace != c.want || len(procs) != 1 || procs[0].Leads != 1 {
			t.Errorf("%s: seats %+v terms %+v candidates %+v processes %+v", c.want, seats, terms, cands, procs)
		}
	}
}

// TestValidateNamespace: the namespaces New refuses, and only those.
func TestValidateNamespace(t *testing.T) {
	for _, ns := range []string{"", string(make([]byte, election.MaxNamespaceLen+1)), "a\x00b", "\xff"} {
		if err := election.ValidateNamespace(ns); !errors.Is(err, election.ErrInvalidNamespace) {
			t.Errorf("ValidateNamespace(%q) = %v", ns, err)
		}
	}
	long := string(slices.Repeat([]byte("n"), election.MaxNamespaceLen+1))
	if err := election.ValidateNamespace(long); err == nil || len(err.Error()) > 200 {
		t.Errorf("ValidateNamespace of %d bytes = %v: want a short error", len(long), err)
	}
	for _, ns := range []string{"default", "<b>x</b>", string(slices.Repeat([]byte("n"), election.MaxNamespaceLen))} {
		if err := election.ValidateNamespace(ns); err != nil {
			t.Errorf("ValidateNamespace(%q) = %v", ns, err)
		}
	}
}
