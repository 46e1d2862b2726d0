// Package models holds the row types of the election tables.
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
	HistoryTable    = "election_history"
	MembersTable    = "election_members"
)

// Candidate is one row of election_candidates: a process that takes part in
// the election of one namespace. A candidate is live while ExpiresAt is later
// than the database clock, or, when MemberID is set, while that member's
// row is live (schema version 3: a Group keeps its candidacy in all its
// namespaces alive with one member row).
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
	// Hostname is the host the candidate runs on, as the process saw it
	// (schema version 2; empty in rows written before it).
	Hostname string `gorm:"column:hostname;not null;default:'';size:255"`
	// PID is the candidate's process id (schema version 2; 0 in rows
	// written before it).
	PID int64 `gorm:"column:pid;not null;default:0"`
	// Label is what the application said about the candidate, such as a pod
	// name or a version: at most 255 bytes of UTF-8 (schema version 2).
	Label string `gorm:"column:label;not null;default:'';size:255"`
	// MemberID is the member row that keeps this candidacy alive (schema
	// version 3): a Group's id, nil for a candidate that heartbeats its
	// own row.
	MemberID *uuid.UUID `gorm:"column:member_id;size:36"`
}

// TableName returns the table the model is stored in.
func (Candidate) TableName() string { return CandidatesTable }

// Member is one row of election_members (schema version 3): a process
// that is a candidate in many namespaces (a Group) and keeps all those
// candidacies alive by refreshing this one row, as an etcd lease is shared
// by its keys. Its candidate rows point to it (Candidate.MemberID).
type Member struct {
	// MemberID identifies the process: the Group's candidate id.
	MemberID uuid.UUID `gorm:"column:member_id;primaryKey;size:36"`
	// Hostname, PID and Label are who the process is (see Candidate).
	Hostname string `gorm:"column:hostname;not null;default:'';size:255"`
	PID      int64  `gorm:"column:pid;not null;default:0"`
	Label    string `gorm:"column:label;not null;default:'';size:255"`
	// RegisteredAt, LastHeartbeatAt and ExpiresAt are as a Candidate's:
	// the member, and every candidate row pointing to it, is live while
	// ExpiresAt is later than the database clock.
	RegisteredAt    time.Time `gorm:"column:registered_at;not null;precision:6"`
	LastHeartbeatAt time.Time `gorm:"column:last_heartbeat_at;not null;precision:6"`
	ExpiresAt       time.Time `gorm:"column:expires_at;not null;precision:6"`
}

// TableName returns the table the model is stored in.
func (Member) TableName() string { return MembersTable }

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
	// FreeAt is when the seat is or became free: the lease's end while
	// held, the vacate while vacant (schema version 3). The database
	// computes it; a Group's round reads through its index the seats that
	// lapse or were vacated lately. On PostgreSQL (schema version 5) it is
	// nil while MemberID names the leader, and otherwise the later of the
	// lease's end and the row's last change.
	FreeAt *time.Time `gorm:"column:free_at;->;precision:6"`
	// MemberID (schema version 5) marks a seat whose lease a Group's rounds
	// renew on PostgreSQL: the Group's member id, equal to LeaderID. Such
	// a seat lapses with the member row, and the other Groups find it
	// through that row, so a renewal changes no indexed column and stays a
	// heap-only update. A Group takes the mark off the seats it stops
	// renewing; it means nothing once LeaderID differs. Nil on the other
	// databases.
	MemberID *uuid.UUID `gorm:"column:member_id;size:36"`
}

// TableName returns the table the model is stored in.
func (Leader) TableName() string { return LeadersTable }

// Term is one row of election_history (schema version 2): one term granted
// in a namespace, written in the transaction that granted it and updated in
// the one that ended it. Renewals do not touch it.
type Term struct {
	// Namespace is the election the term belongs to.
	Namespace string `gorm:"column:namespace;primaryKey;size:191"`
	// Term is the term's number, as in election_leaders.
	Term int64 `gorm:"column:term;primaryKey;autoIncrement:false"`
	// LeaderID is the candidate the term was granted to.
	LeaderID uuid.UUID `gorm:"column:leader_id;not null;size:36"`
	// Hostname, PID and Label are the leader's identity when the term was
	// granted (see Candidate).
	Hostname string `gorm:"column:hostname;not null;default:'';size:255"`
	PID      int64  `gorm:"column:pid;not null;default:0"`
	Label    string `gorm:"column:label;not null;default:'';size:255"`
	// AcquiredAt is when the term was granted (database clock, UTC).
	AcquiredAt time.Time `gorm:"column:acquired_at;not null;precision:6"`
	// EndedAt is when the term ended (database clock, UTC); nil while it has
	// not been seen to end. A lease that lapses is recorded as ended, at its
	// expiry, by the grant of the next term.
	EndedAt *time.Time `gorm:"column:ended_at;precision:6"`
	// EndReason says how the term ended: "resigned", "unregistered",
	// "expired" (the lease lapsed and the next term was granted) or
	// "vacated" (by an operator); nil while EndedAt is nil.
	EndReason *string `gorm:"column:end_reason;size:16"`
}

// TableName returns the table the model is stored in.
func (Term) TableName() string { return HistoryTable }
