// Package models holds the row types of the two election tables.
//
// They are for reading: the types are plain GORM models, to inspect the
// state of an election with GORM, for example in tests or an admin page.
// Package election does not use them; it runs its own SQL statements
// (kept in one place, for every database). Write to the tables only
// through package election; its calls keep the invariants (a term never
// goes back, times come from the database clock) that direct writes would
// break.
//
// The GORM tags describe a portable schema (36-character text UUIDs,
// microsecond timestamps). migrate.Up creates the canonical schema, which on
// PostgreSQL uses the native uuid type; both work with package election. A
// test checks on every database that the tables migrate.Up creates have
// exactly the models' columns, nullability and primary keys, and that rows
// the protocol writes read back through the models.
package models

import (
	"time"

	"github.com/google/uuid"
)

// Table names, shared by the models and the SQL in the other packages.
const (
	CandidatesTable = "election_candidates"
	LeadersTable    = "election_leaders"
)

// Candidate is one row of election_candidates: a process that takes part in
// the election of one namespace. A candidate is live while ExpiresAt is later
// than the database clock.
type Candidate struct {
	// Namespace is the election the candidate takes part in.
	Namespace string `gorm:"column:namespace;primaryKey;size:191"`
	// CandidateID identifies the process.
	CandidateID uuid.UUID `gorm:"column:candidate_id;primaryKey;size:36"`
	// RegisteredAt is when the row was first written (database clock, UTC).
	RegisteredAt time.Time `gorm:"column:registered_at;not null;precision:6"`
	// LastHeartbeatAt is when the row was last refreshed (database clock, UTC).
	LastHeartbeatAt time.Time `gorm:"column:last_heartbeat_at;not null;precision:6"`
	// ExpiresAt is when the candidate stops counting as live (database clock, UTC).
	ExpiresAt time.Time `gorm:"column:expires_at;not null;precision:6"`
}

// TableName returns the table the model is stored in.
func (Candidate) TableName() string { return CandidatesTable }

// Leader is one row of election_leaders: the leadership seat of one namespace.
// The seat is vacant when LeaderID is nil. The row is never deleted, so Term
// never goes back.
type Leader struct {
	// Namespace is the election the seat belongs to.
	Namespace string `gorm:"column:namespace;primaryKey;size:191"`
	// LeaderID is the candidate holding the lease, nil when the seat is vacant.
	LeaderID *uuid.UUID `gorm:"column:leader_id;size:36"`
	// Term is the fencing token: it grows by one each time the lease goes to a
	// candidate that did not already hold it, and never decreases.
	Term int64 `gorm:"column:term;not null;default:0"`
	// LeaseExpiresAt is when the lease ends (database clock, UTC); nil when vacant.
	LeaseExpiresAt *time.Time `gorm:"column:lease_expires_at;precision:6"`
	// AcquiredAt is when the current term began (database clock, UTC).
	AcquiredAt *time.Time `gorm:"column:acquired_at;precision:6"`
	// UpdatedAt is when the row last changed (database clock, UTC). It is
	// written by package election, never by GORM's clock.
	UpdatedAt time.Time `gorm:"column:updated_at;not null;precision:6;autoUpdateTime:false"`
}

// TableName returns the table the model is stored in.
func (Leader) TableName() string { return LeadersTable }
