package election_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/models"
)

// validNamespaceOracle is the rule for namespaces, written down
// independently of the package: 1 to MaxNamespaceLen bytes of UTF-8 without
// NUL.
func validNamespaceOracle(ns string) bool {
	return len(ns) >= 1 && len(ns) <= election.MaxNamespaceLen && utf8.ValidString(ns) && !strings.ContainsRune(ns, 0)
}

// FuzzNamespace elects on SQLite in arbitrary namespaces. A valid
// namespace is its own election and comes back byte for byte from the
// Lease, Leader and the stored rows; an invalid one is refused by New with
// ErrInvalidNamespace and changes no row.
func FuzzNamespace(f *testing.F) {
	for _, ns := range []string{
		"default", "jobs", "Jobs", "x ", " x", "x\t", "\n",
		`x'; DROP TABLE election_leaders; --`, `' OR '1'='1`, `%`, `_`, `\`, `$1`, `?`,
		"名前空間", "🗳️", "e\u0301", "\u202e", "\ufeffbom", "\u2028",
		"", "\x00", "a\x00b", "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82",
		strings.Repeat("n", 190), strings.Repeat("n", 191), strings.Repeat("n", 192),
		strings.Repeat("n", 190) + "é",  // 192 bytes, the last rune across the limit
		strings.Repeat("n", 189) + "é",  // 191 bytes
		strings.Repeat("🗳", 47) + "nnn", // 191 bytes of 4-byte runes
		strings.Repeat("x", 4096),
	} {
		f.Add(ns)
	}
	db := testdb.OpenDSN(f, "sqlite:"+filepath.Join(f.TempDir(), "fuzz.db"))
	ctx := context.Background()
	if err := migrate.Up(ctx, db); err != nil {
		f.Fatal(err)
	}
	rows := func(t *testing.T) (leaders, candidates int64) {
		t.Helper()
		if err := db.Model(&models.Leader{}).Count(&leaders).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Model(&models.Candidate{}).Count(&candidates).Error; err != nil {
			t.Fatal(err)
		}
		return leaders, candidates
	}
	f.Fuzz(func(t *testing.T, ns string) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		leaders, candidates := rows(t)
		e, err := election.New(db, election.WithNamespace(ns), election.WithLogger(quiet))
		if !validNamespaceOracle(ns) {
			if !errors.Is(err, election.ErrInvalidNamespace) {
				t.Fatalf("New(%q) = %v, want ErrInvalidNamespace", ns, err)
			}
			if l, c := rows(t); l != leaders || c != candidates {
				t.Fatalf("a refused namespace changed the row counts: %d/%d -> %d/%d", leaders, candidates, l, c)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%q): %v", ns, err)
		}
		if e.Namespace() != ns {
			t.Fatalf("Namespace() = %q, want %q", e.Namespace(), ns)
		}
		id := uuid.New()
		l, err := e.Elect(ctx, id)
		if err != nil {
			t.Fatalf("Elect in %q: %v", ns, err)
		}
		// Every earlier iteration unregistered, so the seat was vacant.
		if !l.HeldBy(id) || l.Namespace != ns {
			t.Fatalf("Elect in %q = %+v", ns, l)
		}
		got, err := e.Leader(ctx)
		if err != nil || got.Namespace != ns || got.Leader != id || got.Term != l.Term {
			t.Fatalf("Leader in %q = %+v, %v; want %+v", ns, got, err, l)
		}
		var stored []models.Leader
		if err := db.Where("namespace = ?", ns).Find(&stored).Error; err != nil {
			t.Fatal(err)
		}
		if len(stored) != 1 || stored[0].Namespace != ns || stored[0].LeaderID == nil || *stored[0].LeaderID != id {
			t.Fatalf("stored leader rows for %q: %+v", ns, stored)
		}
		var cands []models.Candidate
		if err := db.Where("namespace = ?", ns).Find(&cands).Error; err != nil {
			t.Fatal(err)
		}
		if len(cands) != 1 || cands[0].Namespace != ns || cands[0].CandidateID != id {
			t.Fatalf("stored candidate rows for %q: %+v", ns, cands)
		}
		if l, _ := rows(t); l != leaders && l != leaders+1 {
			t.Fatalf("one namespace added %d leader rows", l-leaders)
		}
		if err := e.UnregisterCandidate(ctx, id); err != nil {
			t.Fatal(err)
		}
		if l, c := rows(t); c != candidates || (l != leaders && l != leaders+1) {
			t.Fatalf("after UnregisterCandidate: %d/%d rows, before %d/%d", l, c, leaders, candidates)
		}
	})
}
