package election

// The calls that read the seat and the candidates: IsLeader, Leader,
// ListCandidates, and Guard, the check a leader's writes make before they
// commit.

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/internal/dialect"
)

// IsLeader reports whether candidate id holds an unexpired lease, judged by
// the database clock.
func (e *Election) IsLeader(ctx context.Context, id uuid.UUID, opts ...CallOption) (bool, error) {
	if id == uuid.Nil {
		return false, fmt.Errorf("%w: IsLeader", ErrInvalidCandidate)
	}
	var n int64
	err := e.autocommit(ctx, "IsLeader", opts, func(conn gorm.ConnPool, _ bool) error {
		return conn.QueryRowContext(ctx, e.q.IsLeader, e.namespace, id).Scan(&n)
	})
	return n > 0, err
}

// Leader returns the namespace's current lease: a Lease with Leader uuid.Nil
// when the seat is vacant or the lease has expired. LeaderInfo adds who the
// leader is.
func (e *Election) Leader(ctx context.Context, opts ...CallOption) (Lease, error) {
	var out Lease
	err := e.autocommit(ctx, "Leader", opts, func(conn gorm.ConnPool, _ bool) error {
		s, err := e.readSeat(ctx, conn, dialect.NoLock)
		out = e.lease(s)
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	return out, nil
}

// ListCandidates returns the live candidates (expires_at later than the
// database clock's now), ordered by id. The slice is empty, not nil, when
// there are none.
func (e *Election) ListCandidates(ctx context.Context, opts ...CallOption) ([]uuid.UUID, error) {
	out := []uuid.UUID{}
	err := e.autocommit(ctx, "ListCandidates", opts, func(conn gorm.ConnPool, _ bool) error {
		out = out[:0]
		return e.scanIDs(ctx, conn, &out, e.q.List, e.namespace)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Guard returns nil while lease is still held: the seat names the same
// leader in the same term and the lease has not expired by the database
// clock. Otherwise it returns an error matching ErrNotLeader.
//
// With WithTx, Guard also locks the leader row shared until the caller's
// transaction ends, so no other candidate can take the seat, and no new term
// can commit, before the caller's leader-only writes in that transaction
// commit or roll back. Write leader-only data in the same transaction, after
// Guard, and a stale leader can never commit. (On SQLite the database's
// single writer gives the same: a write after Guard fails if another
// connection wrote in between. On a Galera node, whose row locks other
// nodes do not see, Guard also writes the seat row, without changing who
// holds it or until when: a new term granted through another node then
// makes the caller's commit fail certification, a deadlock error, instead
// of letting the stale write in.) Without WithTx, Guard only checks.
func (e *Election) Guard(ctx context.Context, lease Lease, opts ...CallOption) error {
	if lease.Leader == uuid.Nil {
		return fmt.Errorf("%w: the lease names no leader", ErrNotLeader)
	}
	if lease.Namespace != "" && lease.Namespace != e.namespace {
		return fmt.Errorf("%w: the lease is for namespace %q, the election for %q", ErrNotLeader, lease.Namespace, e.namespace)
	}
	return e.autocommit(ctx, "Guard", opts, func(conn gorm.ConnPool, callerTx bool) error {
		lock := dialect.NoLock
		if callerTx {
			lock = dialect.ShareLock
			// On Galera the shared lock is this node's alone: the
			// transaction writes the seat row too, so that certification
			// aborts it if a new term was granted on another node first.
			if err := dialect.Fence(ctx, e.d, conn, e.namespace, lease.Leader, lease.Term); err != nil {
				return err
			}
		}
		s, err := e.readSeat(ctx, conn, lock)
		if err != nil {
			return err
		}
		switch {
		case !s.live():
			return final("%w: the lease of %s (term %d) has expired or was given up", ErrNotLeader, lease.Leader, lease.Term)
		case s.leader != lease.Leader || s.term != lease.Term:
			return final("%w: %s leads namespace %q in term %d, not %s in term %d", ErrNotLeader, s.leader, e.namespace, s.term, lease.Leader, lease.Term)
		}
		return nil
	})
}
