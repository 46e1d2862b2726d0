package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/migrate"
	"github.com/sqlelect/sqlelect/session"
)

// common are the flags every command that reaches the database takes.
type common struct {
	dsn     string
	schema  string
	json    bool
	timeout time.Duration

	// allowUnknown, set by --allow-unknown, shows a namespace named on
	// the command line that nobody ever used as empty instead of failing.
	allowUnknown bool

	base *election.Election // the first Election made, checked
	log  *slog.Logger       // the library's warnings, to stderr
}

// addAllowUnknown adds --allow-unknown to a command that takes namespaces.
func addAllowUnknown(fs *flag.FlagSet, c *common) {
	fs.BoolVar(&c.allowUnknown, "allow-unknown", false,
		"treat a namespace nobody has used as empty instead of failing with \"no such namespace\"")
}

// flags returns a flag set for a command, with the common flags. Its help
// (summary, then the flags, then the example) goes to stdout when asked for
// (-h, --help) and to stderr with a usage error.
func (e env) flags(name, args, summary, example string, withJSON bool) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	// The command reports what it did itself; the library's log adds its
	// warnings (a listener reconnecting).
	c := &common{log: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	fs.StringVar(&c.dsn, "dsn", "", "database (default $SQLELECT_DSN): postgres://..., mysql://..., sqlite:PATH, ...")
	fs.StringVar(&c.schema, "schema", "", "PostgreSQL schema holding the election tables (default: the search path)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound of each database call")
	if withJSON {
		fs.BoolVar(&c.json, "json", false, "one JSON object per line (see JSON fields)")
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: sqlelect %s [flags] %s\n\n%s\n\nFlags:\n", name, args, summary)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\nExample:\n  %s\n", example)
	}
	return fs, c
}

// parse parses args, flags and arguments in any order (a lone "--" ends
// the flags). It returns the arguments, and the exit code to return at
// once, or -1 to go on.
func (e env) parse(fs *flag.FlagSet, args []string) ([]string, int) {
	if wantsHelp(args) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		return nil, exitOK
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, exitUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	// A bound of zero or less would fail every call with "context deadline
	// exceeded": it is a mistake in the command line.
	if f := fs.Lookup("timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d <= 0 {
			return nil, e.usageError(fs, fmt.Sprintf("--timeout must be positive, got %v", d))
		}
	}
	return pos, -1
}

// wantsHelp reports whether args ask for help before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}

// open opens the database the flags or the environment name, creating a
// SQLite file that does not exist: for migrate up only.
func (e env) open(c *common) (*gorm.DB, error) {
	dsn, err := e.dsn(c)
	if err != nil {
		return nil, err
	}
	return session.Open(dsn, &gorm.Config{Logger: logger.Discard})
}

// openExisting opens the database the flags or the environment name, which
// must exist: a SQLite path that names no file is an error, and no file is
// created (a mistyped path must not become an empty database that the
// next command is then told to migrate).
func (e env) openExisting(c *common) (*gorm.DB, error) {
	dsn, err := e.dsn(c)
	if err != nil {
		return nil, err
	}
	if path := missingSQLite(dsn); path != "" {
		where := strconv.Quote(path)
		if abs, err := filepath.Abs(path); err == nil && abs != path {
			where += " (" + strconv.Quote(abs) + ")"
		}
		return nil, fmt.Errorf("the SQLite database %s does not exist (is the path right? only `sqlelect migrate up` creates a database)", where)
	}
	return session.Open(dsn, &gorm.Config{Logger: logger.Discard})
}

// dsn returns the DSN the flags or the environment name.
func (e env) dsn(c *common) (string, error) {
	dsn := c.dsn
	if dsn == "" {
		dsn = e.getenv("SQLELECT_DSN")
	}
	if dsn == "" {
		return "", errors.New("no database: pass --dsn or set SQLELECT_DSN")
	}
	return dsn, nil
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
	opts := []election.Option{election.WithNamespace(ns), election.WithLogger(c.log)}
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

// known fails with errNoSuchNamespace, naming the closest known names,
// unless every one of named is a namespace in the tables (or
// --allow-unknown).
func (c *common) known(ctx context.Context, db *gorm.DB, named []string) error {
	if len(named) == 0 || c.allowUnknown {
		return nil
	}
	el, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	known, err := el.ListNamespaces(cctx)
	if err != nil {
		return err
	}
	return unknownNamespaces(named, known)
}

// fail prints err and returns exitError; a missing table says what to run.
// A line the error repeats is printed once.
func (e env) fail(err error) int {
	if errors.Is(err, election.ErrNotMigrated) {
		fmt.Fprintln(e.stderr, "sqlelect: the election tables are missing: run `sqlelect migrate up`")
		return exitError
	}
	fmt.Fprintln(e.stderr, "sqlelect:", dedupeLines(err.Error()))
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

// local formats a database time in the user's zone, with its offset from
// UTC; "-" for the zero time.
func local(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 -07:00")
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

const migrateUsage = `Usage: sqlelect migrate up|status|sql [flags]

  up      create or upgrade the election tables (safe to run from several places at once)
  status  the versions applied and pending
  sql     print the plain SQL of every version (--dialect postgres|mysql|sqlite), for other migration tools

Run "sqlelect migrate up --help" (status, sql) for the flags.

Example:
  sqlelect migrate up --dsn 'postgres://app@db:5432/app'
`

func (e env) migrate(ctx context.Context, args []string) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && wantsHelp(args[:1]) {
			fmt.Fprint(e.stdout, migrateUsage)
			return exitOK
		}
		fmt.Fprint(e.stderr, migrateUsage)
		return exitUsage
	}
	switch args[0] {
	case "up":
		fs, c := e.flags("migrate up", "", "Creates or upgrades the election tables, and says which versions it applied. Safe to run from\n"+
			"several processes at once. It is the only command that creates a database (a SQLite file) that does not exist.",
			"sqlelect migrate up --dsn 'postgres://app@db:5432/app'", false)
		pos, code := e.parse(fs, args[1:])
		if code >= 0 {
			return code
		}
		if len(pos) > 0 {
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
		// The versions pending before and applied after are those this
		// command applied (or another process applying them at the same
		// time, which Up waits for).
		before, err := migrate.Status(cctx, db, opts...)
		if err != nil {
			return e.fail(err)
		}
		if err := migrate.Up(cctx, db, opts...); err != nil {
			return e.fail(err)
		}
		after, err := migrate.Status(cctx, db, opts...)
		if err != nil {
			return e.fail(err)
		}
		var applied []string
		latest := int64(0)
		for i, m := range after {
			if m.Applied {
				latest = m.Version
			}
			if m.Applied && i < len(before) && !before[i].Applied {
				applied = append(applied, fmt.Sprintf("%d (%s)", m.Version, m.Name))
			}
		}
		if len(applied) == 0 {
			fmt.Fprintf(e.stdout, "the election tables are already up to date (version %d); nothing applied\n", latest)
			return exitOK
		}
		word := "version"
		if len(applied) > 1 {
			word = "versions"
		}
		fmt.Fprintf(e.stdout, "applied %s %s; the election tables are up to date (version %d)\n", word, strings.Join(applied, ", "), latest)
		return exitOK
	case "status":
		fs, c := e.flags("migrate status", "",
			"Shows the versions of the election tables, applied and pending.\n\n"+
				"JSON fields: version, name, applied (true or false).",
			"sqlelect migrate status --json", true)
		pos, code := e.parse(fs, args[1:])
		if code >= 0 {
			return code
		}
		if len(pos) > 0 {
			return e.usageError(fs, "migrate status takes no arguments")
		}
		db, err := e.openExisting(c)
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
			w := fs.Output()
			fmt.Fprint(w, "Usage: sqlelect migrate sql --dialect postgres|mysql|sqlite [--down]\n\n"+
				"Prints the SQL of every version, for goose, golang-migrate, atlas or by hand. It needs no database.\n\nFlags:\n")
			fs.PrintDefaults()
			fmt.Fprint(w, "\nExample:\n  sqlelect migrate sql --dialect postgres > 0001_sqlelect.sql\n")
		}
		pos, code := e.parse(fs, args[1:])
		if code >= 0 {
			return code
		}
		if len(pos) > 0 {
			return e.usageError(fs, "migrate sql takes no arguments")
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
	fmt.Fprintf(e.stderr, "sqlelect: unknown migrate command %q (want up, status or sql)\n\n%s", args[0], migrateUsage)
	return exitUsage
}

func (e env) migrateStatus(ctx context.Context, db *gorm.DB, c *common) int {
	var opts []migrate.Option
	if c.schema != "" {
		opts = append(opts, migrate.WithSchema(c.schema))
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	states, err := migrate.Status(cctx, db, opts...)
	if err != nil {
		return e.fail(err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json {
		fmt.Fprintln(tw, "VERSION\tNAME\tSTATE")
	}
	pending := 0
	for _, m := range states {
		state := "applied"
		if !m.Applied {
			state = "pending"
			pending++
		}
		if c.json {
			if err := writeJSON(e.stdout, migrationRow{Version: m.Version, Name: m.Name, Applied: m.Applied}); err != nil {
				return e.fail(err)
			}
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

// migrationRow is one version in migrate status --json.
type migrationRow struct {
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
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

// seats reads every seat in one statement, and returns those named (in
// the order given, a namespace without a seat as vacant), or all of them.
func (c *common) seats(ctx context.Context, db *gorm.DB, named []string) (election.SeatList, error) {
	el, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return election.SeatList{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	list, err := el.ListSeats(cctx)
	if err != nil || len(named) == 0 {
		return list, err
	}
	byName := make(map[string]election.SeatInfo, len(list.Seats))
	for _, s := range list.Seats {
		byName[s.Namespace] = s
	}
	out := election.SeatList{Now: list.Now}
	for _, ns := range named {
		s, ok := byName[ns]
		if !ok {
			s = election.SeatInfo{Namespace: ns, Lease: election.Lease{Namespace: ns}}
		}
		out.Seats = append(out.Seats, s)
	}
	return out, nil
}

func (e env) status(ctx context.Context, args []string) int {
	fs, c := e.flags("status", "[namespace...]",
		"Shows each namespace's leader (id and identity: host/pid [label]), term, the lease left by the database\n"+
			"clock, and how many live candidates it has, then a one-line summary: how many namespaces are led, how\n"+
			"many have no leader, and how many leadership changes the last hour saw. Without namespaces, every\n"+
			"namespace in the tables; --unled, --leader and --match keep some of them. The seats of every namespace\n"+
			"are read with one statement, whatever their number. A namespace named that nobody ever used is an\n"+
			"error (\"no such namespace\", with the closest names) unless --allow-unknown.\n\n"+
			"JSON fields (one object per namespace, no summary): namespace, leader (null when vacant), term, hostname,\n"+
			"pid, label, acquired_at, expires_at (RFC 3339, UTC), lease_remaining_ms, candidates.\n\n"+
			"With --require-leader it exits 1 when a namespace shown has no leader, for scripts and cron checks.",
		"sqlelect status --require-leader scheduler reaper", true)
	requireLeader := fs.Bool("require-leader", false, "exit 1 when a namespace shown has no leader")
	addAllowUnknown(fs, c)
	f := addFilterFlags(fs)
	named, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if msg := f.check(); msg != "" {
		return e.usageError(fs, msg)
	}
	if msg := checkNamespaces(named); msg != "" {
		return e.usageError(fs, msg)
	}
	db, err := e.openExisting(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	if err := c.known(ctx, db, named); err != nil {
		return e.fail(err)
	}
	list, err := c.seats(ctx, db, named)
	if err != nil {
		return e.fail(err)
	}
	var shown []election.SeatInfo
	for _, s := range list.Seats {
		if f.keep(s.Namespace, s.Lease.Leader, s.Identity) {
			shown = append(shown, s)
		}
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json && len(shown) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tLEADER\tIDENTITY\tTERM\tLEASE LEFT\tCANDIDATES")
	}
	leaderless := 0
	for _, s := range shown {
		r := statusRow{Namespace: s.Namespace, Candidates: s.Candidates}
		if l := s.Lease; !l.Vacant() {
			id := l.Leader
			r.Leader, r.Term = &id, l.Term
			r.Hostname, r.PID, r.Label = s.Identity.Hostname, s.Identity.PID, s.Identity.Label
			r.AcquiredAt, r.ExpiresAt = jsonTime(l.AcquiredAt), jsonTime(l.ExpiresAt)
			r.LeaseRemainingMS = max(l.ExpiresAt.Sub(list.Now), 0).Milliseconds()
		} else {
			leaderless++
		}
		if c.json {
			if err := writeJSON(e.stdout, r); err != nil {
				return e.fail(err)
			}
			continue
		}
		if r.Leader == nil {
			fmt.Fprintf(tw, "%s\t(none)\t-\t-\t-\t%d\n", s.Namespace, r.Candidates)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%d\n", s.Namespace, r.Leader, s.Identity, r.Term,
			time.Duration(r.LeaseRemainingMS)*time.Millisecond, r.Candidates)
	}
	tw.Flush()
	if !c.json {
		if err := e.statusSummary(ctx, db, c, list, shown, f.active() || len(named) > 0); err != nil {
			return e.fail(err)
		}
	}
	if *requireLeader && leaderless > 0 {
		fmt.Fprintf(e.stderr, "sqlelect: %d namespace(s) without a leader\n", leaderless)
		return exitError
	}
	return exitOK
}

// statusSummary prints status's last line: the namespaces shown, led and
// not, and the leadership changes (terms granted) of the last hour among
// them, read in one statement.
func (e env) statusSummary(ctx context.Context, db *gorm.DB, c *common, list election.SeatList, shown []election.SeatInfo, selected bool) error {
	if len(list.Seats) == 0 {
		fmt.Fprintln(e.stdout, "no namespaces yet")
		return nil
	}
	if len(shown) == 0 {
		fmt.Fprintf(e.stdout, "no namespace matches (of %d)\n", len(list.Seats))
		return nil
	}
	el, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	terms, err := el.ListRecentTerms(cctx, time.Hour)
	if err != nil {
		return err
	}
	in := make(map[string]bool, len(shown))
	led := 0
	for _, s := range shown {
		in[s.Namespace] = true
		if !s.Lease.Vacant() {
			led++
		}
	}
	changes := 0
	for _, t := range terms {
		if in[t.Namespace] && t.AcquiredAt.After(list.Now.Add(-time.Hour)) {
			changes++
		}
	}
	line := fmt.Sprintf("%s: %d led, %d without a leader; %s in the last hour",
		plural(len(shown), "namespace"), led, len(shown)-led, plural(changes, "leadership change"))
	if selected {
		line += fmt.Sprintf(" (%d of %d namespaces shown)", len(shown), len(list.Seats))
	}
	fmt.Fprintf(e.stdout, "\n%s\n", line)
	return nil
}

// plural is n and the noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
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
	fs, c := e.flags("candidates", "[namespace...]",
		"Lists the live candidates of the namespaces named (every namespace without any; --unled, --leader and\n"+
			"--match keep some of them), the leader marked, with their first registration and last heartbeat in\n"+
			"the local time zone, then a one-line summary. Every candidate is read with one statement, whatever the\n"+
			"number of namespaces. A namespace named that nobody ever used is an error (\"no such namespace\") unless\n"+
			"--allow-unknown.\n\n"+
			"JSON fields (one object per candidate, no summary): namespace, id, hostname, pid, label, leader (true or\n"+
			"false), registered_at, last_heartbeat_at, expires_at (RFC 3339, UTC).",
		"sqlelect candidates scheduler --json", true)
	addAllowUnknown(fs, c)
	f := addFilterFlags(fs)
	named, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if msg := f.check(); msg != "" {
		return e.usageError(fs, msg)
	}
	if msg := checkNamespaces(named); msg != "" {
		return e.usageError(fs, msg)
	}
	db, err := e.openExisting(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	if err := c.known(ctx, db, named); err != nil {
		return e.fail(err)
	}
	el, err := c.election(ctx, db, election.DefaultNamespace)
	if err != nil {
		return e.fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	all, err := el.ListAllCandidates(cctx)
	if err != nil {
		return e.fail(err)
	}
	// Each namespace's candidates, and its leader among them.
	byNS := map[string][]election.NamespaceCandidate{}
	var order []string
	for _, ci := range all {
		if _, ok := byNS[ci.Namespace]; !ok {
			order = append(order, ci.Namespace)
		}
		byNS[ci.Namespace] = append(byNS[ci.Namespace], ci)
	}
	if len(named) > 0 {
		order = slices.Compact(slices.Clone(named))
	}
	var shown []election.NamespaceCandidate
	var empty []string
	nss := 0
	for _, ns := range order {
		cs := byNS[ns]
		leader, ident := uuid.Nil, election.Identity{}
		for _, ci := range cs {
			if ci.Leader {
				leader, ident = ci.ID, ci.Identity
			}
		}
		if !f.keep(ns, leader, ident) {
			continue
		}
		if len(cs) == 0 {
			empty = append(empty, ns)
			continue
		}
		nss++
		shown = append(shown, cs...)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !c.json && len(shown) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tCANDIDATE\tIDENTITY\tLEADER\tREGISTERED\tLAST HEARTBEAT")
	}
	procs := map[election.Identity]bool{}
	for _, ci := range shown {
		procs[ci.Identity] = true
		if c.json {
			if err := writeJSON(e.stdout, candidateRow{Namespace: ci.Namespace, ID: ci.ID, Hostname: ci.Identity.Hostname, PID: ci.Identity.PID,
				Label: ci.Identity.Label, Leader: ci.Leader, RegisteredAt: jsonTime(ci.RegisteredAt),
				LastHeartbeatAt: jsonTime(ci.LastHeartbeatAt), ExpiresAt: jsonTime(ci.ExpiresAt)}); err != nil {
				return e.fail(err)
			}
			continue
		}
		mark := "-"
		if ci.Leader {
			mark = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ci.Namespace, ci.ID, ci.Identity, mark, local(ci.RegisteredAt), local(ci.LastHeartbeatAt))
	}
	tw.Flush()
	if c.json {
		return exitOK
	}
	if len(shown) > 0 {
		fmt.Fprintln(e.stdout)
	}
	for _, ns := range empty {
		fmt.Fprintf(e.stdout, "no live candidates in %q\n", ns)
	}
	fmt.Fprintf(e.stdout, "%s in %s, from %s\n", plural(len(shown), "live candidate"), plural(nss, "namespace"),
		plural(len(procs), "process"))
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
	fs, c := e.flags("history", "NAMESPACE",
		"Lists the recent terms of a namespace, newest first: who led, from when to when (local time zone),\n"+
			"and how each ended: resigned, unregistered, expired, or vacated (by an operator). A lease that lapsed\n"+
			"shows as running until the next term is granted. A namespace nobody ever used is an error (\"no such\n"+
			"namespace\") unless --allow-unknown.\n\n"+
			"JSON fields: namespace, term, leader, hostname, pid, label, acquired_at, ended_at (RFC 3339, UTC;\n"+
			"null while running), end_reason (\"\" while running).",
		"sqlelect history scheduler --limit 5", true)
	limit := fs.Int("limit", 20, "how many terms")
	addAllowUnknown(fs, c)
	pos, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) != 1 {
		return e.usageError(fs, "history takes one namespace")
	}
	if *limit < 1 {
		return e.usageError(fs, "--limit must be at least 1")
	}
	if msg := checkNamespaces(pos); msg != "" {
		return e.usageError(fs, msg)
	}
	ns := pos[0]
	db, err := e.openExisting(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	if err := c.known(ctx, db, pos); err != nil {
		return e.fail(err)
	}
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
			if err := writeJSON(e.stdout, termRow{Namespace: ns, Term: t.Term, Leader: t.Leader, Hostname: t.Identity.Hostname,
				PID: t.Identity.PID, Label: t.Identity.Label, AcquiredAt: jsonTime(t.AcquiredAt), EndedAt: jsonTime(t.EndedAt),
				EndReason: string(t.EndReason)}); err != nil {
				return e.fail(err)
			}
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

// resignRow is the JSON form of resign's outcome.
type resignRow struct {
	Namespace string `json:"namespace"`
	// Vacated is true when the term was ended.
	Vacated bool `json:"vacated"`
	// Leader and Term are the lease that was confirmed (and, when Vacated,
	// ended); null and 0 when the seat was vacant.
	Leader *uuid.UUID `json:"leader"`
	Term   int64      `json:"term"`
	// CurrentLeader and CurrentTerm are the seat's holder when the seat had
	// moved on and nothing was changed; null and 0 otherwise.
	CurrentLeader *uuid.UUID `json:"current_leader"`
	CurrentTerm   int64      `json:"current_term"`
}

func (e env) resign(ctx context.Context, args []string) int {
	fs, c := e.flags("resign", "NAMESPACE",
		"Vacates a namespace's seat as an operator. It shows the leader and its term and asks for confirmation\n"+
			"(unless --yes), then ends exactly that term: if the seat has moved on meanwhile (another term began),\n"+
			"it says so, changes nothing and exits 1. Once the term has ended, the old leader's Guard fails at\n"+
			"once and its Elector stops leading at its next renewal; the other candidates are woken (PostgreSQL,\n"+
			"MySQL/MariaDB, SQLite on Linux) or try at their next tick, and one of them takes the seat in a new\n"+
			"term. The old leader sits out one interval first, so it takes the seat back only when no other\n"+
			"candidate is live. The history records the term as vacated. A namespace nobody ever used is an error\n"+
			"(\"no such namespace\") unless --allow-unknown.\n\n"+
			"JSON fields: namespace, vacated (true or false), leader, term (the lease confirmed; null and 0 when\n"+
			"there was no leader), current_leader, current_term (the seat's holder when it had moved on).",
		"sqlelect resign scheduler --yes", true)
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	addAllowUnknown(fs, c)
	pos, code := e.parse(fs, args)
	if code >= 0 {
		return code
	}
	if len(pos) != 1 {
		return e.usageError(fs, "resign takes one namespace")
	}
	if msg := checkNamespaces(pos); msg != "" {
		return e.usageError(fs, msg)
	}
	ns := pos[0]
	db, err := e.openExisting(c)
	if err != nil {
		return e.fail(err)
	}
	defer closeDB(db)
	if err := c.known(ctx, db, pos); err != nil {
		return e.fail(err)
	}
	el, err := c.election(ctx, db, ns)
	if err != nil {
		return e.fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	info, err := el.LeaderInfo(cctx)
	cancel()
	if err != nil {
		return e.fail(err)
	}
	lease := info.Lease
	if lease.Vacant() {
		if c.json {
			return e.writeOrFail(resignRow{Namespace: ns})
		}
		fmt.Fprintf(e.stdout, "%q has no leader; nothing changed\n", ns)
		return exitOK
	}
	if !*yes {
		// Confirmation takes as long as the operator likes: no timeout here.
		fmt.Fprintf(e.stderr, "Vacate %q, led by %s (%s) in term %d? [y/N] ", ns, lease.Leader, info.Identity, lease.Term)
		line, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(e.stderr, "sqlelect: not confirmed; nothing changed")
			return exitError
		}
	}
	cctx, cancel = context.WithTimeout(ctx, c.timeout)
	defer cancel()
	l, err := el.VacateLease(cctx, lease)
	if errors.Is(err, election.ErrNotLeader) {
		now, nerr := el.LeaderInfo(cctx)
		if nerr != nil {
			return e.fail(nerr)
		}
		row := resignRow{Namespace: ns, Leader: &lease.Leader, Term: lease.Term}
		desc := "no leader now"
		if cur := now.Lease; !cur.Vacant() {
			row.CurrentLeader, row.CurrentTerm = &cur.Leader, cur.Term
			desc = fmt.Sprintf("now led by %s (%s) in term %d", cur.Leader, now.Identity, cur.Term)
		}
		if c.json {
			_ = writeJSON(e.stdout, row)
		}
		fmt.Fprintf(e.stderr, "sqlelect: the seat of %q moved on: term %d of %s is over, %s; nothing changed\n", ns, lease.Term, lease.Leader, desc)
		return exitError
	}
	if err != nil {
		return e.fail(err)
	}
	if c.json {
		return e.writeOrFail(resignRow{Namespace: ns, Vacated: true, Leader: &l.Leader, Term: l.Term})
	}
	fmt.Fprintf(e.stdout, "vacated %q: term %d of %s (%s) has ended; another live candidate takes the seat in term %d or later\n"+
		"(the old leader takes it back only if no other candidate is live)\n", ns, l.Term, l.Leader, info.Identity, l.Term+1)
	return exitOK
}

// writeOrFail writes v as a JSON line and returns exitOK, or the error.
func (e env) writeOrFail(v any) int {
	if err := writeJSON(e.stdout, v); err != nil {
		return e.fail(err)
	}
	return exitOK
}
