package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// common are the flags every command that reaches the database takes.
type common struct {
	dsn     string
	schema  string
	json    bool
	timeout time.Duration

	base *election.Election // the first Election made, checked
}

// flags returns a flag set for a command, with the common flags, writing
// its help (summary, then the flags, then the example) to stderr.
func (e env) flags(name, args, summary, example string, withJSON bool) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	c := &common{}
	fs.StringVar(&c.dsn, "dsn", "", "database (default $SQLELECT_DSN): postgres://..., mysql://..., sqlite:PATH, ...")
	fs.StringVar(&c.schema, "schema", "", "PostgreSQL schema holding the election tables (default: the search path)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound of each database call")
	if withJSON {
		fs.BoolVar(&c.json, "json", false, "one JSON object per line")
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: sqlelect %s [flags] %s\n\n%s\n\nFlags:\n", name, args, summary)
		fs.PrintDefaults()
		fmt.Fprintf(e.stderr, "\nExample:\n  %s\n", example)
	}
	return fs, c
}

// parse parses args; it returns the exit code to return at once, or -1 to
// go on.
func parse(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	return -1
}

// open opens the database the flags or the environment name.
func (e env) open(c *common) (*gorm.DB, error) {
	dsn := c.dsn
	if dsn == "" {
		dsn = e.getenv("SQLELECT_DSN")
	}
	if dsn == "" {
		return nil, errors.New("no database: pass --dsn or set SQLELECT_DSN")
	}
	return session.Open(dsn, &gorm.Config{Logger: logger.Discard})
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

// election binds namespace ns with the flags' schema: the first one made
// checks the database, the others derive from it.
func (c *common) election(ctx context.Context, db *gorm.DB, ns string) (*election.Election, error) {
	if c.base != nil {
		return c.base.ForNamespace(ns)
	}
	opts := []election.Option{election.WithNamespace(ns)}
	if c.schema != "" {
		opts = append(opts, election.WithSchema(c.schema))
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	e, err := election.NewContext(ctx, db, opts...)
	if err == nil {
		c.base = e
	}
	return e, err
}

// fail prints err and returns exitError; a missing table says what to run.
func (e env) fail(err error) int {
	if errors.Is(err, election.ErrNotMigrated) {
		fmt.Fprintln(e.stderr, "sqlelect: the election tables are missing: run `sqlelect migrate up`")
		return exitError
	}
	fmt.Fprintln(e.stderr, "sqlelect:", err)
	return exitError
}

// usageError prints msg and the command's usage and returns exitUsage.
func (e env) usageError(fs *flag.FlagSet, msg string) int {
	fmt.Fprintln(e.stderr, "sqlelect:", msg)
	fs.Usage()
	return exitUsage
}

// writeJSON writes v as one line.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// dbNow reads the database clock.
func dbNow(ctx context.Context, db *gorm.DB) (time.Time, error) {
	d, err := dialect.For(db)
	if err != nil {
		return time.Time{}, err
	}
	var now dialect.Time
	if err := db.WithContext(ctx).Raw(d.Statements().Clock).Row().Scan(&now); err != nil {
		return time.Time{}, err
	}
	return now.Time, nil
}

// local formats a database time in the user's zone; "-" for the zero time.
func local(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

// jsonTime is a time for JSON: RFC 3339 in UTC, null when zero.
func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ---- migrate

func (e env) migrate(ctx context.Context, args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(e.stderr, `Usage: sqlelect migrate up|status|sql [flags]

  up      create or upgrade the election tables (safe to run from several places at once)
  status  the versions applied and pending
  sql     print the plain SQL of every version (--dialect postgres|mysql|sqlite), for other migration tools

Example:
  sqlelect migrate up --dsn 'postgres://app@db:5432/app'
`)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return exitOK
		}
		return exitUsage
	}
	switch args[0] {
	case "up":
		fs, c := e.flags("migrate up", "", "Creates or upgrades the election tables.", "sqlelect migrate up --dsn 'postgres://app@db:5432/app'", false)
		if code := parse(fs, args[1:]); code >= 0 {
			return code
		}
		if fs.NArg() > 0 {
			return e.usageError(fs, "migrate up takes no arguments")
		}
		db, err := e.open(c)
		if err != nil {
			return e.fail(err)
		}
		defer closeDB(db)
		var opts []migrate.Option
		if c.schema != "" {
			opts = append(opts, migrate.WithSchema(c.schema))
		}
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		if err := migrate.Up(cctx, db, opts...); err != nil {
			return e.fail(err)
		}
		fmt.Fprintln(e.stdout, "the election tables are up to date")
		return exitOK
	case "status":
		fs, c := e.flags("migrate status", "", "Shows the versions of the election tables, applied and pending.", "sqlelect migrate status --json", true)
		if code := parse(fs, args[1:]); code >= 0 {
			return code
		}
		db, err := e.open(c)
		if err != nil {
			return e.fail(err)
		}
		defer closeDB(db)
		return e.migrateStatus(ctx, db, c)
	case "sql":
		fs := flag.NewFlagSet("migrate sql", flag.ContinueOnError)
		fs.SetOutput(e.stderr)
		d := fs.String("dialect", "", "postgres, mysql or sqlite")
		down := fs.Bool("down", false, "print the statements that undo each version instead, newest first")
		fs.Usage = func() {
			fmt.Fprint(e.stderr, "Usage: sqlelect migrate sql --dialect postgres|mysql|sqlite [--down]\n\nPrints the SQL of every version, for goose, golang-migrate, atlas or by hand.\n\nFlags:\n")
			fs.PrintDefaults()
			fmt.Fprint(e.stderr, "\nExample:\n  sqlelect migrate sql --dialect postgres > 0001_sqlelect.sql\n")
		}
		if code := parse(fs, args[1:]); code >= 0 {
			return code
		}
		ms, err := migrate.Migrations(*d)
		if err != nil {
			return e.usageError(fs, "--dialect: "+err.Error())
		}
		if *down {
			slices.Reverse(ms)
		}
		for _, m := range ms {
			stmts := m.Up
			if *down {
				stmts = m.Down
			}
			fmt.Fprintf(e.stdout, "-- sqlelect version %d: %s\n", m.Version, m.Name)
			for _, s := range stmts {
				fmt.Fprintf(e.stdout, "%s;\n", strings.TrimSpace(s))
			}
			fmt.Fprintln(e.stdout)
		}
		return exitOK
	}
	fmt.Fprintf(e.stderr, "sqlelect: unknown migrate command %q (want up, status or sql)\n", args[0])
	return exitUsage
}

func (e env) migrateStatus(ctx context.Context, db *gorm.DB, c *common) int {
	d, err := dialect.For(db)
	if err != nil {
		return e.fail(err)
	}
	ms, err := migrate.Migrations(d.Name())
	if err != nil {
		return e.fail(err)
	}
	applied := map[int64]bool{}
	q := "SELECT version FROM " + migrate.VersionsTable
	if c.schema != "" {
		q = "SELECT version FROM " + dialect.QuoteSchema(c.schema) + "." + migrate.VersionsTable
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	rows, err := db.WithContext(cctx).Raw(q).Rows()
	if err == nil {
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err == nil {
				applied[v] = true
			}
		}
		rows.Close()
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json {
		fmt.Fprintln(tw, "VERSION\tNAME\tSTATE")
	}
	pending := 0
	for _, m := range ms {
		state := "applied"
		if !applied[m.Version] {
			state = "pending"
			pending++
		}
		if c.json {
			_ = writeJSON(e.stdout, map[string]any{"version": m.Version, "name": m.Name, "applied": applied[m.Version]})
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", m.Version, m.Name, state)
		}
	}
	tw.Flush()
	if pending > 0 && !c.json {
		fmt.Fprintf(e.stdout, "%d pending: run `sqlelect migrate up`\n", pending)
	}
	return exitOK
}

// ---- status

// statusRow is one namespace in status, and its JSON form.
type statusRow struct {
	Namespace        string     `json:"namespace"`
	Leader           *uuid.UUID `json:"leader"` // null when vacant
	Term             int64      `json:"term"`
	Hostname         string     `json:"hostname"`
	PID              int        `json:"pid"`
	Label            string     `json:"label"`
	AcquiredAt       *time.Time `json:"acquired_at"`
	ExpiresAt        *time.Time `json:"expires_at"`
	LeaseRemainingMS int64      `json:"lease_remaining_ms"`
	Candidates       int        `json:"candidates"`
}

// namespaces returns the namespaces args name, or every namespace in the
// tables.
func (e env) namespaces(ctx context.Context, db *gorm.DB, c *common, args []string) ([]string, error) {
	if len(args) > 0 {
		return args, nil
	}
	el, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return el.Namespaces(cctx)
}

func (e env) readStatus(ctx context.Context, db *gorm.DB, c *common, ns string) (statusRow, error) {
	el, err := c.election(ctx, db, ns)
	if err != nil {
		return statusRow{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	info, err := el.LeaderInfo(cctx)
	if err != nil {
		return statusRow{}, err
	}
	cands, err := el.Candidates(cctx)
	if err != nil {
		return statusRow{}, err
	}
	now, err := dbNow(cctx, db)
	if err != nil {
		return statusRow{}, err
	}
	r := statusRow{Namespace: ns, Candidates: len(cands)}
	if l := info.Lease; !l.Vacant() {
		id := l.Leader
		r.Leader, r.Term = &id, l.Term
		r.Hostname, r.PID, r.Label = info.Identity.Hostname, info.Identity.PID, info.Identity.Label
		r.AcquiredAt, r.ExpiresAt = jsonTime(l.AcquiredAt), jsonTime(l.ExpiresAt)
		r.LeaseRemainingMS = max(l.ExpiresAt.Sub(now), 0).Milliseconds()
	}
	return r, nil
}

func (e env) status(ctx context.Context, args []string) int {
	fs, c := e.flags("status", "[namespace...]",
		"Shows each namespace's leader (id and identity), term, the lease left by the database clock, and its live candidates.\nWithout namespaces, every namespace in the tables.",
		"sqlelect status --require-leader scheduler reaper", true)
	requireLeader := fs.Bool("require-leader", false, "exit 1 when a namespace shown has no leader (for scripts and cron checks)")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	nss, err := e.namespaces(ctx, db, c, fs.Args())
	if err != nil {
		return e.fail(err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json {
		fmt.Fprintln(tw, "NAMESPACE\tLEADER\tIDENTITY\tTERM\tLEASE LEFT\tCANDIDATES")
	}
	leaderless := 0
	for _, ns := range nss {
		r, err := e.readStatus(ctx, db, c, ns)
		if err != nil {
			tw.Flush()
			return e.fail(fmt.Errorf("namespace %q: %w", ns, err))
		}
		if r.Leader == nil {
			leaderless++
		}
		if c.json {
			_ = writeJSON(e.stdout, r)
			continue
		}
		if r.Leader == nil {
			fmt.Fprintf(tw, "%s\t(none)\t-\t-\t-\t%d\n", ns, r.Candidates)
			continue
		}
		ident := election.Identity{Hostname: r.Hostname, PID: r.PID, Label: r.Label}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%d\n", ns, r.Leader, ident, r.Term,
			time.Duration(r.LeaseRemainingMS)*time.Millisecond, r.Candidates)
	}
	tw.Flush()
	if !c.json && len(nss) == 0 {
		fmt.Fprintln(e.stdout, "no namespaces yet")
	}
	if *requireLeader && leaderless > 0 {
		fmt.Fprintf(e.stderr, "sqlelect: %d namespace(s) without a leader\n", leaderless)
		return exitError
	}
	return exitOK
}

// ---- candidates

type candidateRow struct {
	Namespace       string     `json:"namespace"`
	ID              uuid.UUID  `json:"id"`
	Hostname        string     `json:"hostname"`
	PID             int        `json:"pid"`
	Label           string     `json:"label"`
	Leader          bool       `json:"leader"`
	RegisteredAt    *time.Time `json:"registered_at"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	ExpiresAt       *time.Time `json:"expires_at"`
}

func (e env) candidates(ctx context.Context, args []string) int {
	fs, c := e.flags("candidates", "NAMESPACE", "Lists the live candidates of a namespace; the leader is marked.",
		"sqlelect candidates scheduler --json", true)
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return e.usageError(fs, "candidates takes one namespace")
	}
	ns := fs.Arg(0)
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	el, err := c.election(ctx, db, ns)
	if err != nil {
		return e.fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cands, err := el.Candidates(cctx)
	if err != nil {
		return e.fail(err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json {
		fmt.Fprintln(tw, "CANDIDATE\tIDENTITY\tLEADER\tREGISTERED\tLAST HEARTBEAT")
	}
	for _, ci := range cands {
		if c.json {
			_ = writeJSON(e.stdout, candidateRow{Namespace: ns, ID: ci.ID, Hostname: ci.Identity.Hostname, PID: ci.Identity.PID,
				Label: ci.Identity.Label, Leader: ci.Leader, RegisteredAt: jsonTime(ci.RegisteredAt),
				LastHeartbeatAt: jsonTime(ci.LastHeartbeatAt), ExpiresAt: jsonTime(ci.ExpiresAt)})
			continue
		}
		mark := ""
		if ci.Leader {
			mark = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ci.ID, ci.Identity, mark, local(ci.RegisteredAt), local(ci.LastHeartbeatAt))
	}
	tw.Flush()
	if !c.json && len(cands) == 0 {
		fmt.Fprintf(e.stdout, "no live candidates in %q\n", ns)
	}
	return exitOK
}

// ---- history

type termRow struct {
	Namespace  string     `json:"namespace"`
	Term       int64      `json:"term"`
	Leader     uuid.UUID  `json:"leader"`
	Hostname   string     `json:"hostname"`
	PID        int        `json:"pid"`
	Label      string     `json:"label"`
	AcquiredAt *time.Time `json:"acquired_at"`
	EndedAt    *time.Time `json:"ended_at"`   // null while running
	EndReason  string     `json:"end_reason"` // "" while running
}

func (e env) history(ctx context.Context, args []string) int {
	fs, c := e.flags("history", "NAMESPACE", "Lists the recent terms of a namespace, newest first: who led, from when to when, and how each ended.",
		"sqlelect history scheduler --limit 5", true)
	limit := fs.Int("limit", 20, "how many terms")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return e.usageError(fs, "history takes one namespace")
	}
	if *limit < 1 {
		return e.usageError(fs, "--limit must be at least 1")
	}
	ns := fs.Arg(0)
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	el, err := c.election(ctx, db, ns)
	if err != nil {
		return e.fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	terms, err := el.History(cctx, *limit)
	if err != nil {
		return e.fail(err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json {
		fmt.Fprintln(tw, "TERM\tLEADER\tIDENTITY\tFROM\tUNTIL\tENDED")
	}
	for _, t := range terms {
		if c.json {
			_ = writeJSON(e.stdout, termRow{Namespace: ns, Term: t.Term, Leader: t.Leader, Hostname: t.Identity.Hostname,
				PID: t.Identity.PID, Label: t.Identity.Label, AcquiredAt: jsonTime(t.AcquiredAt), EndedAt: jsonTime(t.EndedAt),
				EndReason: string(t.EndReason)})
			continue
		}
		ended := string(t.EndReason)
		if !t.Ended() {
			ended = "(running)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.Term, t.Leader, t.Identity, local(t.AcquiredAt), local(t.EndedAt), ended)
	}
	tw.Flush()
	if !c.json && len(terms) == 0 {
		fmt.Fprintf(e.stdout, "no terms in %q yet\n", ns)
	}
	return exitOK
}

// ---- resign

func (e env) resign(ctx context.Context, args []string) int {
	fs, c := e.flags("resign", "NAMESPACE",
		"Vacates a namespace's seat as an operator. The leader's term ends at once: its Guard fails, its Elector steps down\n"+
			"at its next renewal, and the seat goes to whichever candidate elects first, in a new term. The history\n"+
			"records the term as vacated. Asks for confirmation unless --yes.",
		"sqlelect resign scheduler --yes", true)
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if code := parse(fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return e.usageError(fs, "resign takes one namespace")
	}
	ns := fs.Arg(0)
	db, err := e.open(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	el, err := c.election(ctx, db, ns)
	if err != nil {
		return e.fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	info, err := el.LeaderInfo(cctx)
	if err != nil {
		return e.fail(err)
	}
	if info.Lease.Vacant() {
		if c.json {
			_ = writeJSON(e.stdout, map[string]any{"namespace": ns, "vacated": false})
		} else {
			fmt.Fprintf(e.stdout, "%q has no leader; nothing to do\n", ns)
		}
		return exitOK
	}
	if !*yes {
		fmt.Fprintf(e.stderr, "Vacate %q, led by %s (%s) in term %d? [y/N] ", ns, info.Lease.Leader, info.Identity, info.Lease.Term)
		line, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(e.stderr, "sqlelect: not confirmed; nothing changed")
			return exitError
		}
	}
	l, err := el.VacateSeat(cctx)
	if err != nil {
		return e.fail(err)
	}
	if c.json {
		out := map[string]any{"namespace": ns, "vacated": !l.Vacant()}
		if !l.Vacant() {
			out["leader"], out["term"] = l.Leader, l.Term
		}
		_ = writeJSON(e.stdout, out)
		return exitOK
	}
	if l.Vacant() {
		fmt.Fprintf(e.stdout, "%q had no leader by then; nothing changed\n", ns)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "vacated %q: term %d of %s ended; the next candidate to elect takes term %d or later\n", ns, l.Term, l.Leader, l.Term+1)
	return exitOK
}
