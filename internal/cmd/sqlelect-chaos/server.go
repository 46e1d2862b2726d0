package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/session"
)

// restartServer restarts the database server of a local PostgreSQL or
// MariaDB installation and waits until it answers dsn again.
func restartServer(ctx context.Context, name, dsn string) error {
	var err error
	switch name {
	case "postgres":
		err = restartPostgres(ctx)
	case "mysql":
		err = restartMariaDB(ctx)
	default:
		return fmt.Errorf("cannot restart a %s server", name)
	}
	if werr := waitUp(ctx, dsn, 2*time.Minute); werr != nil {
		if name == "mysql" {
			// Try once more to start it, so the machine is left with a
			// running server whatever happened.
			_ = startMariaDB(ctx)
			werr = waitUp(ctx, dsn, 2*time.Minute)
		}
		if werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

func restartPostgres(ctx context.Context) error {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return errors.New("no cluster under /etc/postgresql")
	}
	for _, v := range entries {
		if err := command(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", v.Name(), "main", "restart"); err != nil {
			return err
		}
	}
	return nil
}

func restartMariaDB(ctx context.Context) error {
	if err := command(ctx, "mysqladmin", "-uroot", "shutdown"); err != nil {
		return err
	}
	// The server may still be finishing its shutdown; start-stop-daemon
	// would take it for running and start nothing.
	deadline := time.Now().Add(time.Minute)
	for exec.CommandContext(ctx, "pidof", "mariadbd").Run() == nil {
		if time.Now().After(deadline) {
			return errors.New("mariadbd still running a minute after shutdown")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return startMariaDB(ctx)
}

func startMariaDB(ctx context.Context) error {
	if err := command(ctx, "sh", "-c", "mkdir -p /run/mysqld && chown mysql /run/mysqld"); err != nil {
		return err
	}
	return command(ctx, "start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd", "--", "--user=mysql")
}

func command(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitUp waits until dsn answers a query.
func waitUp(ctx context.Context, dsn string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		db, err := session.Open(dsn, &gorm.Config{Logger: logger.Discard})
		if err == nil {
			var one int
			err = db.WithContext(ctx).Raw("SELECT 1").Row().Scan(&one)
			closeDB(db)
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the database did not answer within %v: %w", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
