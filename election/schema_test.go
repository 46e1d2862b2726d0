package election_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
)

// testSchema returns a schema name no other test uses, with a quote, upper
// case and a space so that quoting is exercised, and drops the schema when
// the test ends.
func testSchema(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := `Sq "el" ` + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		q := `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
		if err := db.Exec("DROP SCHEMA IF EXISTS " + q + " CASCADE").Error; err != nil {
			t.Errorf("dropping schema %s: %v", q, err)
		}
	})
	return name
}

// TestSchema: on PostgreSQL, WithSchema keeps an election's tables in a
// schema of their own. Before migrate.Up every call says the tables are
// missing; concurrent migrate.Up calls create them there (and nowhere
// else); the same namespace in two schemas holds two independent elections
// at once; renewal, Guard, Resign and an Elector work there. MySQL and
// SQLite refuse the option.
func TestSchema(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if tg.Name != "postgres" {
				if _, err := election.New(db, election.WithSchema("app")); !errors.Is(err, election.ErrInvalidOption) ||
					!strings.Contains(err.Error(), "PostgreSQL") {
					t.Errorf("New(WithSchema) on %s: %v, want ErrInvalidOption naming PostgreSQL", tg.Name, err)
				}
				if err := migrate.Up(ctx, db, migrate.WithSchema("app")); err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
					t.Errorf("migrate.Up(WithSchema) on %s: %v, want an error naming PostgreSQL", tg.Name, err)
				}
				return
			}
			schemaA, schemaB := testSchema(t, db), testSchema(t, db)
			ns := testdb.Namespace(t)
			a, err := election.New(db, election.WithSchema(schemaA), election.WithNamespace(ns), election.WithExpire(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			idA, idB := uuid.New(), uuid.New()
			if _, err := a.Elect(ctx, idA); !errors.Is(err, election.ErrNotMigrated) {
				t.Fatalf("Elect before migrate.Up: %v, want ErrNotMigrated", err)
			}

			// Concurrent migrations into each schema.
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for _, s := range []string{schemaA, schemaA, schemaA, schemaB, schemaB, schemaB} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- migrate.Up(ctx, db, migrate.WithSchema(s))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent migrate.Up: %v", err)
				}
			}
			for _, s := range []string{schemaA, schemaB} {
				var tables []string
				if err := db.Raw("SELECT table_name FROM information_schema.tables WHERE table_schema = ? ORDER BY table_name", s).
					Scan(&tables).Error; err != nil {
					t.Fatal(err)
				}
				got := "," + strings.Join(tables, ",") + ","
				for _, want := range []string{"election_candidates", "election_leaders", "election_history", migrate.VersionsTable} {
					if !strings.Contains(got, ","+want+",") {
						t.Errorf("tables in %q: %s; %s is missing", s, got, want)
					}
				}
			}

			b, err := election.New(db, election.WithSchema(schemaB), election.WithNamespace(ns), election.WithExpire(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				e  *election.Election
				id uuid.UUID
			}{{a, idA}, {b, idB}} {
				if err := c.e.RegisterCandidate(ctx, c.id); err != nil {
					t.Fatal(err)
				}
				l, err := c.e.Elect(ctx, c.id)
				if err != nil || l.Leader != c.id || l.Term != 1 {
					t.Fatalf("Elect: %+v, %v; want %v leading in term 1", l, err, c.id)
				}
			}
			// Renewal (one statement) keeps the term in its own schema.
			if l, err := a.Elect(ctx, idA); err != nil || l.Leader != idA || l.Term != 1 {
				t.Fatalf("renewal in %q: %+v, %v", schemaA, l, err)
			}
			// The grants are in the schema's history.
			if terms, err := a.History(ctx, 10); err != nil || len(terms) != 1 || terms[0].Leader != idA {
				t.Errorf("History in %q: %+v, %v; want the one term of %v", schemaA, terms, err, idA)
			}
			// Nothing of it in the search path's tables.
			var n int64
			if err := db.Raw("SELECT COUNT(*) FROM election_leaders WHERE namespace = ?", ns).Scan(&n).Error; err != nil || n != 0 {
				t.Errorf("rows in public.election_leaders for %s: %d, %v", ns, n, err)
			}
			lease, err := a.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Transaction(func(tx *gorm.DB) error {
				return a.Guard(ctx, lease, election.WithTx(tx))
			}); err != nil {
				t.Errorf("Guard in %q: %v", schemaA, err)
			}
			if err := a.Resign(ctx, idA); err != nil {
				t.Fatal(err)
			}
			if ok, err := a.IsLeader(ctx, idA); err != nil || ok {
				t.Errorf("IsLeader after Resign: %v, %v", ok, err)
			}
			if ok, err := b.IsLeader(ctx, idB); err != nil || !ok {
				t.Errorf("the other schema's leader after Resign: %v, %v; want still leading", ok, err)
			}

			// An Elector in the schema leads (its listener is on the
			// schema's own channel).
			el, err := a.NewElector(uuid.New(), election.ElectorConfig{})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- el.Run(rctx) }()
			deadline := time.Now().Add(20 * time.Second)
			for !el.IsLeader() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !el.IsLeader() {
				t.Error("an Elector in the schema did not lead")
			}
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// TestSchemaNames: a schema name that PostgreSQL would truncate or cannot
// store is refused by New and by migrate.Up, on every database, and no
// schema is created.
func TestSchemaNames(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			db := testdb.Open(t, tg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, name := range []string{"", strings.Repeat("s", 64), "a\x00b", "\xff\xfe"} {
				if _, err := election.New(db, election.WithSchema(name)); !errors.Is(err, election.ErrInvalidOption) {
					t.Errorf("New(WithSchema(%q)): %v, want ErrInvalidOption", name, err)
				}
				if err := migrate.Up(ctx, db, migrate.WithSchema(name)); err == nil || !strings.Contains(err.Error(), "schema") {
					t.Errorf("migrate.Up(WithSchema(%q)): %v, want an error about the schema name", name, err)
				}
			}
			if tg.Name == "postgres" {
				var n int64
				if err := db.Raw("SELECT COUNT(*) FROM pg_namespace WHERE nspname LIKE 'sssssssss%'").Scan(&n).Error; err != nil || n != 0 {
					t.Errorf("schemas created from refused names: %d, %v", n, err)
				}
			}
		})
	}
}
