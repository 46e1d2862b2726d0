package main

import (
	"context"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Job is one row of the example's queue table.
//
// A job's id is "term-seq": the scheduler's term when it was enqueued and a
// counter the leader keeps for that term. Terms grow with every new leader
// and only one leader holds a term, so ids never collide, and ordering by
// (term, seq) is first in, first out without relying on any clock.
type Job struct {
	ID     string  `gorm:"column:id;primaryKey"`
	Term   int64   `gorm:"column:term"`
	Seq    int64   `gorm:"column:seq"`
	Status string  `gorm:"column:status"`
	Worker *string `gorm:"column:worker"` // candidate id of the member running it
}

// TableName is the table of Job.
func (Job) TableName() string { return "worker_pool_jobs" }

// Job states.
const (
	pending = "pending"
	running = "running"
	done    = "done"
)

// jobsDDL is portable SQL: the same statement works on PostgreSQL,
// MySQL/MariaDB and SQLite.
const jobsDDL = `CREATE TABLE IF NOT EXISTS worker_pool_jobs (
	id     VARCHAR(64) NOT NULL PRIMARY KEY,
	term   BIGINT      NOT NULL,
	seq    BIGINT      NOT NULL,
	status VARCHAR(16) NOT NULL,
	worker VARCHAR(36)
)`

// queue claims and finishes jobs.
type queue struct {
	db *gorm.DB
	// lock is added to the SELECT that picks a job to claim. FOR UPDATE
	// SKIP LOCKED lets concurrent workers pass over rows another worker is
	// claiming instead of queueing behind it. GORM's SQLite dialect leaves
	// locking clauses out, which is right there: transactions begin
	// IMMEDIATE (session.Open), so SQLite runs one claim at a time. Where
	// the database rejects SKIP LOCKED (MySQL before 8.0, MariaDB before
	// 10.6), lock is nil and the conditional UPDATE alone keeps claims
	// exclusive.
	lock clause.Expression
}

func newQueue(ctx context.Context, db *gorm.DB) (*queue, error) {
	if err := db.WithContext(ctx).Exec(jobsDDL).Error; err != nil {
		// Processes starting together can race on CREATE TABLE IF NOT
		// EXISTS (PostgreSQL reports a duplicate type); what matters is
		// that the table is there.
		if !db.WithContext(ctx).Migrator().HasTable(&Job{}) {
			return nil, fmt.Errorf("creating worker_pool_jobs: %w", err)
		}
	}
	q := &queue{db: db, lock: clause.Locking{Strength: clause.LockingStrengthUpdate, Options: clause.LockingOptionsSkipLocked}}
	// Ask the database once whether it understands the clause.
	var probe []Job
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return tx.Clauses(q.lock).Where("status = ?", pending).Limit(1).Find(&probe).Error
	})
	if err != nil {
		q.lock = nil
	}
	return q, nil
}

// claim takes the oldest pending job for worker (a member's candidate id).
// ok is false when there is none.
func (q *queue) claim(ctx context.Context, worker string) (job Job, ok bool, err error) {
	err = q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		sel := tx.Where("status = ?", pending).Order("term, seq").Limit(1)
		if q.lock != nil {
			sel = sel.Clauses(q.lock)
		}
		var found []Job
		if err := sel.Find(&found).Error; err != nil || len(found) == 0 {
			return err
		}
		job = found[0]
		// The claim itself: only one worker can move the row out of
		// pending, whatever the SELECT above locked.
		res := tx.Model(&Job{}).Where("id = ? AND status = ?", job.ID, pending).
			Updates(map[string]any{"status": running, "worker": worker})
		ok = res.RowsAffected == 1
		return res.Error
	})
	return job, ok && err == nil, err
}

// finish marks job done. It reports false when the claim was lost: the
// reaper gave the job to another worker because this member looked dead.
func (q *queue) finish(ctx context.Context, job Job, worker string) (bool, error) {
	res := q.db.WithContext(ctx).Model(&Job{}).
		Where("id = ? AND status = ? AND worker = ?", job.ID, running, worker).
		Update("status", done)
	return res.RowsAffected == 1, res.Error
}
