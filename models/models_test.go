package models_test

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/models"
)

// column is what the test compares of a column: its name, whether it may
// be NULL, and whether it is part of the primary key.
type column struct {
	Name       string
	Nullable   bool
	PrimaryKey bool
}

// TestMigratedSchemaMatchesModels: on every database, the tables migrate.Up
// creates have exactly the columns of the models, with the same
// nullability and primary keys, and a row written by the protocol's own
// statements reads back through the models.
func TestMigratedSchemaMatchesModels(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *gorm.DB) {
		for _, model := range []any{&models.Candidate{}, &models.Leader{}, &models.Term{}, &models.Member{}} {
			want := modelColumns(t, db, model)
			got := tableColumns(t, db, model)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%T: the migrated table differs from the model (-model +table):\n%s", model, d)
			}
		}

		ctx := context.Background()
		ns := testdb.Namespace(t)
		e, err := election.New(db, election.WithNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		id := uuid.New()
		lease, err := e.Elect(ctx, id)
		if err != nil {
			t.Fatalf("Elect: %v", err)
		}
		var leader models.Leader
		if err := db.WithContext(ctx).Where("namespace = ?", ns).Take(&leader).Error; err != nil {
			t.Fatalf("reading the leader row: %v", err)
		}
		if leader.LeaderID == nil || *leader.LeaderID != id || leader.Term != lease.Term ||
			leader.LeaseExpiresAt == nil || !leader.LeaseExpiresAt.Equal(lease.ExpiresAt) {
			t.Errorf("leader row %+v, want %s in term %d until %v", leader, id, lease.Term, lease.ExpiresAt)
		}
		var cand models.Candidate
		if err := db.WithContext(ctx).Where("namespace = ? AND candidate_id = ?", ns, id).Take(&cand).Error; err != nil {
			t.Fatalf("reading the candidate row: %v", err)
		}
		if cand.CandidateID != id || !cand.ExpiresAt.After(cand.LastHeartbeatAt) {
			t.Errorf("candidate row %+v", cand)
		}
		if want := e.Identity(); cand.Hostname != want.Hostname || cand.PID != int64(want.PID) || cand.Label != want.Label {
			t.Errorf("candidate row identity %q/%d/%q, want %v", cand.Hostname, cand.PID, cand.Label, want)
		}
		var term models.Term
		if err := db.WithContext(ctx).Where("namespace = ? AND term = ?", ns, lease.Term).Take(&term).Error; err != nil {
			t.Fatalf("reading the history row: %v", err)
		}
		if term.LeaderID != id || !term.AcquiredAt.Equal(lease.AcquiredAt) || term.EndedAt != nil || term.EndReason != nil ||
			term.PID != cand.PID || term.Hostname != cand.Hostname {
			t.Errorf("history row %+v, want %s's open term %d from %v", term, id, lease.Term, lease.AcquiredAt)
		}
	})
}

// modelColumns are the columns GORM derives from model.
func modelColumns(t *testing.T, db *gorm.DB, model any) []column {
	t.Helper()
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(model); err != nil {
		t.Fatalf("parsing %T: %v", model, err)
	}
	var out []column
	for _, f := range stmt.Schema.Fields {
		if f.DBName == "" {
			continue
		}
		out = append(out, column{Name: f.DBName, Nullable: !f.NotNull && !f.PrimaryKey, PrimaryKey: f.PrimaryKey})
	}
	sortColumns(out)
	return out
}

// tableColumns are the columns of model's table as the database describes
// them.
func tableColumns(t *testing.T, db *gorm.DB, model any) []column {
	t.Helper()
	types, err := db.Migrator().ColumnTypes(model)
	if err != nil {
		t.Fatalf("reading the columns of %T's table: %v", model, err)
	}
	var out []column
	for _, ct := range types {
		c := column{Name: ct.Name()}
		nullable, ok := ct.Nullable()
		if !ok {
			t.Fatalf("%s: the driver does not report nullability", ct.Name())
		}
		c.Nullable = nullable
		pk, ok := ct.PrimaryKey()
		if !ok {
			t.Fatalf("%s: the driver does not report primary keys", ct.Name())
		}
		c.PrimaryKey = pk
		out = append(out, c)
	}
	sortColumns(out)
	return out
}

func sortColumns(cs []column) {
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
}
