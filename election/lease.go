package election

import (
	"time"

	"github.com/google/uuid"
)

// Lease is the state of a namespace's leadership seat as one call saw it.
type Lease struct {
	// Namespace is the election the lease belongs to.
	Namespace string
	// Leader is the candidate holding the lease; uuid.Nil when the seat is
	// vacant or the lease has expired.
	Leader uuid.UUID
	// Term is the fencing token of the lease: it grows by one each time the
	// lease goes to a candidate that did not already hold it. Within a term
	// exactly one candidate leads. Zero when vacant.
	Term int64
	// ExpiresAt is when the lease ends, by the database clock (UTC).
	ExpiresAt time.Time
	// AcquiredAt is when the term began, by the database clock (UTC).
	AcquiredAt time.Time
}

// Vacant reports whether the lease names no leader.
func (l Lease) Vacant() bool { return l.Leader == uuid.Nil }

// HeldBy reports whether the lease names id as its leader.
func (l Lease) HeldBy(id uuid.UUID) bool { return id != uuid.Nil && l.Leader == id }
