package electiontest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/sqlelect/sqlelect/election"
)

// FenceTable is the table Fence writes to. NewFence creates it; drop it when
// you no longer need it.
const FenceTable = "electiontest_fenced_writes"

// The table is keyed by a hash of the namespace, so that namespaces that a
// case-insensitive collation would confuse stay apart, and the key fits an
// index on every database.
const fenceDDL = "CREATE TABLE IF NOT EXISTS " + FenceTable + ` (
    namespace_key CHAR(64)    NOT NULL,
    counter       BIGINT      NOT NULL,
    term          BIGINT      NOT NULL,
    leader_id     VARCHAR(36) NOT NULL,
    PRIMARY KEY (namespace_key, counter)
)`

// Fence does leader-only writes the way an application should: in one
// transaction, first election.Guard with WithTx, then the write. Each write
// appends a row (counter, term, leader) to FenceTable, the counter one more
// than the namespace's last, so the rows' order is their commit order and
// the Checker can tell whether a write of an old term committed after one of
// a newer term.
//
// A Fence is safe for concurrent use.
type Fence struct {
	db  *gorm.DB
	e   *election.Election
	rec *Recorder
	key string
}

// NewFence returns a Fence for e's namespace on db, creating FenceTable if
// it does not exist. db must be the database e runs on. Committed writes
// are recorded in rec; rec may be nil.
func NewFence(ctx context.Context, db *gorm.DB, e *election.Election, rec *Recorder) (*Fence, error) {
	if db == nil || e == nil {
		return nil, errors.New("electiontest: NewFence needs a database and an election")
	}
	// Concurrent CREATE TABLE IF NOT EXISTS can fail on PostgreSQL with a
	// duplicate key in its catalog; the table then exists and a retry passes.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = db.WithContext(ctx).Exec(fenceDDL).Error; err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("electiontest: creating %s: %w", FenceTable, err)
	}
	sum := sha256.Sum256([]byte(e.Namespace()))
	return &Fence{db: db, e: e, rec: rec, key: hex.EncodeToString(sum[:])}, nil
}

// Write does one fenced write for lease in a transaction of its own and,
// once it has committed, records it. It returns an error matching
// election.ErrNotLeader, and writes nothing, when lease is no longer held.
func (f *Fence) Write(ctx context.Context, lease election.Lease) (Write, error) {
	return f.commit(ctx, func(tx *gorm.DB) (Write, error) { return f.WriteTx(ctx, tx, lease) })
}

// commit runs write in a transaction of its own and records the write once
// the transaction has committed.
func (f *Fence) commit(ctx context.Context, write func(tx *gorm.DB) (Write, error)) (Write, error) {
	var w Write
	err := f.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		w, err = write(tx)
		return err
	})
	if err != nil {
		return Write{}, err
	}
	if f.rec != nil {
		f.rec.Wrote(w)
	}
	return w, nil
}

// WriteTx does one fenced write for lease in tx, a transaction the caller
// began and will commit or roll back, next to its own leader-only writes. It
// does not record the write: call Recorder.Wrote after the commit, or Load
// at the end of the test.
func (f *Fence) WriteTx(ctx context.Context, tx *gorm.DB, lease election.Lease) (Write, error) {
	if err := f.e.Guard(ctx, lease, election.WithTx(tx)); err != nil {
		return Write{}, err
	}
	return f.insert(ctx, tx, lease)
}

// insert appends the namespace's next write for lease in tx.
func (f *Fence) insert(ctx context.Context, tx *gorm.DB, lease election.Lease) (Write, error) {
	var last int64
	if err := tx.WithContext(ctx).Raw("SELECT COALESCE(MAX(counter), 0) FROM "+FenceTable+" WHERE namespace_key = ?", f.key).Row().Scan(&last); err != nil {
		return Write{}, fmt.Errorf("electiontest: reading the last fenced write: %w", err)
	}
	w := Write{Namespace: f.e.Namespace(), Counter: last + 1, Term: lease.Term, Leader: lease.Leader}
	if err := tx.WithContext(ctx).Exec("INSERT INTO "+FenceTable+" (namespace_key, counter, term, leader_id) VALUES (?, ?, ?, ?)",
		f.key, w.Counter, w.Term, w.Leader.String()).Error; err != nil {
		return Write{}, fmt.Errorf("electiontest: fenced write: %w", err)
	}
	return w, nil
}

// WriteUnguarded does the same write as Write without calling Guard: what
// an application that trusts its own idea of leadership does. It exists as
// a negative control, to show that the Checker catches the stale writes of
// a leader that lost its lease without noticing.
func (f *Fence) WriteUnguarded(ctx context.Context, lease election.Lease) (Write, error) {
	return f.commit(ctx, func(tx *gorm.DB) (Write, error) { return f.insert(ctx, tx, lease) })
}

// Writes returns the committed writes of the namespace, in commit order, as
// the database has them.
func (f *Fence) Writes(ctx context.Context) ([]Write, error) {
	rows, err := f.db.WithContext(ctx).Raw("SELECT counter, term, leader_id FROM "+FenceTable+" WHERE namespace_key = ? ORDER BY counter", f.key).Rows()
	if err != nil {
		return nil, fmt.Errorf("electiontest: reading fenced writes: %w", err)
	}
	defer rows.Close()
	var out []Write
	for rows.Next() {
		var (
			w      = Write{Namespace: f.e.Namespace()}
			leader string
		)
		if err := rows.Scan(&w.Counter, &w.Term, &leader); err != nil {
			return nil, fmt.Errorf("electiontest: reading fenced writes: %w", err)
		}
		if w.Leader, err = uuid.Parse(leader); err != nil {
			return nil, fmt.Errorf("electiontest: fenced write %d: %w", w.Counter, err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("electiontest: reading fenced writes: %w", err)
	}
	return out, nil
}

// Load records in the Fence's Recorder every committed write of the
// namespace, including those whose commit the writer never heard back
// about. Call it before checking.
func (f *Fence) Load(ctx context.Context) error {
	if f.rec == nil {
		return errors.New("electiontest: Load needs a Fence made with a Recorder")
	}
	ws, err := f.Writes(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		f.rec.Wrote(w)
	}
	return nil
}

// Reset deletes the namespace's fenced writes, e.g. between runs of a test
// that reuses its namespace.
func (f *Fence) Reset(ctx context.Context) error {
	if err := f.db.WithContext(ctx).Exec("DELETE FROM "+FenceTable+" WHERE namespace_key = ?", f.key).Error; err != nil {
		return fmt.Errorf("electiontest: %w", err)
	}
	return nil
}
