package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
)

// ---- what the operator typed

// shortQuote quotes s for a message, cut to its first 40 bytes (at a rune
// boundary) with "…" and its length when longer: an argument of any size
// is never echoed whole.
func shortQuote(s string) string {
	const limit = 40
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// checkNamespaces validates the namespaces named on the command line, as
// the library would refuse them, before anything is read or printed. It
// returns the message of the first one refused, or "".
func checkNamespaces(nss []string) string {
	for _, ns := range nss {
		if err := election.ValidateNamespace(ns); err != nil {
			return fmt.Sprintf("namespace %s: %v", shortQuote(ns), err)
		}
	}
	return ""
}

// errNoSuchNamespace is the error of a namespace nobody ever used.
var errNoSuchNamespace = errors.New("no such namespace")

// unknownNamespaces returns an error naming each of named that is not in
// known (sorted), with the closest known names, or nil when all are known.
func unknownNamespaces(named, known []string) error {
	var msgs []string
	for _, ns := range named {
		if _, found := slices.BinarySearch(known, ns); found {
			continue
		}
		// Valid namespaces are short enough to quote whole.
		msg := fmt.Sprintf("%v %q", errNoSuchNamespace, ns)
		if near := closest(ns, known, 3); len(near) > 0 {
			q := make([]string, len(near))
			for i, n := range near {
				q[i] = strconv.Quote(n)
			}
			msg += " (did you mean " + strings.Join(q, ", ") + "?)"
		}
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w\n(a namespace exists once a candidate has registered in it; --allow-unknown shows it as empty)",
		errors.New(strings.Join(msgs, "\n")))
}

// closest returns up to n of known nearest to name: those within a few
// edits of it (fewer for short names), or that contain it or that it
// contains when letter case is ignored; nearest first.
func closest(name string, known []string, n int) []string {
	type cand struct {
		s string
		d int
	}
	limit := max(2, utf8.RuneCountInString(name)/3)
	lower := strings.ToLower(name)
	var cs []cand
	for _, k := range known {
		d := distance(name, k, limit)
		if d > limit {
			lk := strings.ToLower(k)
			if len(lower) < 3 || len(lk) < 3 || (!strings.Contains(lk, lower) && !strings.Contains(lower, lk)) {
				continue
			}
			d = limit + 1
		}
		cs = append(cs, cand{k, d})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return a.d - b.d })
	var out []string
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, c.s)
	}
	return out
}

// distance is the Levenshtein distance of a and b in runes, or limit+1
// when it is more than limit.
func distance(a, b string, limit int) int {
	ra, rb := []rune(a), []rune(b)
	if d := len(ra) - len(rb); d > limit || -d > limit {
		return limit + 1
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		best := cur[0]
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			best = min(best, cur[j])
		}
		if best > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// ---- filters of status and candidates

// filter selects namespaces by the flags of status and candidates.
type filter struct {
	unled  bool
	leader string
	match  string
	re     *regexp.Regexp
}

// addFilterFlags adds --unled, --leader and --match to fs.
func addFilterFlags(fs *flag.FlagSet) *filter {
	f := &filter{}
	fs.BoolVar(&f.unled, "unled", false, "only namespaces without a leader")
	fs.StringVar(&f.leader, "leader", "", "only namespaces led by this candidate: its id (or the first 8+ characters of it), hostname, host/pid, or label")
	fs.StringVar(&f.match, "match", "", "only namespaces whose name matches this pattern (* any text, ? one character)")
	return f
}

// check readies the filter, or returns what is wrong with the flags.
func (f *filter) check() string {
	if f.unled && f.leader != "" {
		return "--unled and --leader exclude each other"
	}
	if f.match != "" {
		var b strings.Builder
		b.WriteString("^")
		for _, r := range f.match {
			switch r {
			case '*':
				b.WriteString(".*")
			case '?':
				b.WriteString(".")
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		b.WriteString("$")
		f.re = regexp.MustCompile("(?s)" + b.String())
	}
	return ""
}

// active reports whether the filter leaves anything out.
func (f *filter) active() bool { return f.unled || f.leader != "" || f.re != nil }

// keep reports whether the namespace ns, led by leader (uuid.Nil when
// nobody leads) with that identity, passes the filter.
func (f *filter) keep(ns string, leader uuid.UUID, id election.Identity) bool {
	if f.re != nil && !f.re.MatchString(ns) {
		return false
	}
	if f.unled && leader != uuid.Nil {
		return false
	}
	if f.leader != "" && (leader == uuid.Nil || !leaderMatches(f.leader, leader, id)) {
		return false
	}
	return true
}

// leaderMatches reports whether x names the leader: its id or a prefix of
// at least 8 characters of it, its hostname, host/pid, label, or identity
// as the command prints it.
func leaderMatches(x string, leader uuid.UUID, id election.Identity) bool {
	s := leader.String()
	return x == s || (len(x) >= 8 && strings.HasPrefix(s, strings.ToLower(x))) ||
		x == id.Hostname || x == fmt.Sprintf("%s/%d", id.Hostname, id.PID) || (id.Label != "" && x == id.Label) || x == id.String()
}

// ---- opening an existing database only

// missingSQLite returns the path of the SQLite file dsn names when the file
// does not exist, and "" otherwise (another database, an in-memory one, or
// a file that is there). It recognizes the SQLite forms session.Open
// accepts: sqlite:PATH, sqlite://PATH, sqlite3:PATH, file:PATH (a URI) and
// a path ending in .db, .sqlite or .sqlite3.
func missingSQLite(dsn string) string {
	lower := strings.ToLower(dsn)
	var rest string
	switch {
	case strings.HasPrefix(lower, "sqlite://"):
		rest = dsn[len("sqlite://"):]
	case strings.HasPrefix(lower, "sqlite3:"):
		rest = dsn[len("sqlite3:"):]
	case strings.HasPrefix(lower, "sqlite:"):
		rest = dsn[len("sqlite:"):]
	case strings.HasPrefix(lower, "file:"):
		rest = dsn
	case strings.Contains(dsn, "://"), strings.Contains(dsn, "@tcp("), strings.Contains(dsn, "@unix("), strings.Contains(strings.SplitN(dsn, "?", 2)[0], "="):
		return ""
	default:
		p, _, _ := strings.Cut(lower, "?")
		if !strings.HasSuffix(p, ".db") && !strings.HasSuffix(p, ".sqlite") && !strings.HasSuffix(p, ".sqlite3") {
			return ""
		}
		rest = dsn
	}
	path, query, _ := strings.Cut(rest, "?")
	if q, err := url.ParseQuery(query); err == nil && (q.Get("mode") == "memory" || q.Get("vfs") == "memdb") {
		return ""
	}
	if p, ok := strings.CutPrefix(path, "file:"); ok {
		path = p
		// file://host/path: only an empty host or localhost names a file.
		if after, ok := strings.CutPrefix(path, "//"); ok {
			host, p, _ := strings.Cut(after, "/")
			if host != "" && host != "localhost" {
				return ""
			}
			path = "/" + p
		}
	}
	if path == "" || path == ":memory:" {
		return ""
	}
	// SQLite reads the path as a URI (session.Open hands it file:PATH),
	// so %XX escapes stand for bytes.
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return path
	}
	return ""
}

// ---- messages

// dedupeLines drops the lines of msg that repeat an earlier line: a
// driver that tried the same address twice (PostgreSQL with and without
// TLS) reports the same failure twice.
func dedupeLines(msg string) string {
	lines := strings.Split(msg, "\n")
	seen := map[string]bool{}
	out := lines[:0]
	for _, l := range lines {
		key := strings.TrimSpace(l)
		if key != "" && seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
