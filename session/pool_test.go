package session_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

// slowConnector takes delay to open a connection once slow is set, and
// gives up, as drivers do, when the caller's context ends first.
type slowConnector struct {
	driver.Connector
	delay     time.Duration
	slow      *atomic.Bool
	completed *atomic.Int64
}

func (c slowConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.slow.Load() {
		t := time.NewTimer(c.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	conn, err := c.Connector.Connect(ctx)
	if err == nil {
		c.completed.Add(1)
	}
	return conn, err
}

// TestConnectOutlivesCaller: when every connection takes longer to open
// than callers wait, the pool Open builds still gets connections: an
// attempt whose caller gave up finishes, and the next caller gets the
// connection. Otherwise every caller would start an attempt and abandon
// it, for ever (election rounds against a PostgreSQL server busy starting
// server processes stalled so).
func TestConnectOutlivesCaller(t *testing.T) {
	for _, tg := range testdb.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			dsn, _ := testdb.Shared(t, tg)
			var slow atomic.Bool
			var completed atomic.Int64
			const delay, patience = 300 * time.Millisecond, 50 * time.Millisecond
			db, err := session.OpenWrapped(dsn, func(c driver.Connector) driver.Connector {
				return slowConnector{Connector: c, delay: delay, slow: &slow, completed: &completed}
			}, &gorm.Config{Logger: logger.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer testdb.Close(db)
			pool := testdb.Raw(t, db)
			// Hold every idle connection, so that the next query needs a new one.
			var held []interface{ Close() error }
			for pool.Stats().Idle > 0 {
				c, err := pool.Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			slow.Store(true)
			query := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), patience)
				defer cancel()
				var one int
				return pool.QueryRowContext(ctx, "SELECT 1").Scan(&one)
			}
			before := completed.Load()
			if err := query(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first query with a %v deadline and a %v connect: %v, want a deadline error", patience, delay, err)
			}
			// The abandoned attempt goes on and completes.
			deadline := time.Now().Add(10 * time.Second)
			for completed.Load() == before {
				if time.Now().After(deadline) {
					t.Fatal("the attempt whose caller gave up never completed: it was abandoned")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The next caller gets that connection instead of starting
			// another attempt it would abandon too.
			if err := query(); err != nil {
				t.Fatalf("second query with a %v deadline: %v; want it to run on the connection the first attempt opened", patience, err)
			}
		})
	}
}
