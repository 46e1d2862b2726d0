package session_test

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	drv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/session"
)

// dsnSeeds are DSNs of every accepted form and of many broken ones:
// injection strings, unicode, NUL bytes, boundary lengths.
var dsnSeeds = []string{
	"",
	"\x00",
	"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"postgresql://u:p%40ss@localhost/db",
	"postgres://u:pa:ss@h/db%zz",
	"postgres://u:pass@[::1]:5432/db?password=other",
	"postgres://u:pass@h1,h2:5433/db?target_session_attrs=any",
	"postgres://:@/",
	"postgres://%",
	"postgres://u:p@h:99999/db",
	"postgres://u:p@h:-1/db",
	"postgres://u:'; DROP TABLE election_leaders; --@h/db",
	"postgres://u:p@h/db?sslmode=bogus",
	"postgres://u:p@h/db?timezone=Mars/Olympus",
	"postgres://u@h/db?connect_timeout=x",
	"mysql://root@tcp(127.0.0.1:3306)/test",
	"mysql://root:pw@tcp(127.0.0.1:3306)/test?parseTime=false&loc=Local",
	"mysql://root:p@ss:w0rd@tcp(h)/db?x=%zz",
	"mysql://root:pw@tcp(h/db",
	"mysql://root:pw@unix(/tmp/mysql.sock)/db",
	"mysql://root:pw@tcp(h)/db?time_zone=%27%2B00%3A00%27&tx_isolation=%27READ-COMMITTED%27",
	"mysql://root:pw@tcp(h)/db?maxAllowedPacket=-1",
	"mysql://root:pw@tcp(h)/db?timeout=forever",
	"root:pw@tcp(127.0.0.1:3306)/test",
	"root:pw@tcp(127.0.0.1:3306)/",
	"tcp(h)/db",
	"sqlite:/tmp/x.db",
	"sqlite://app.db?_busy_timeout=abc",
	"sqlite3:app.db",
	"sqlite:",
	"file::memory:",
	":memory:",
	"file:app.db?mode=memory&cache=shared",
	"app.sqlite3",
	"x.db?%zz",
	"名前空間.db",
	"postgres://ユーザー:パスワード@ホスト/データベース",
	"mysql://\xff\xfe:\xff@tcp(\xff)/\xff",
	"postgres://u:p@h/db\x00",
	strings.Repeat("a", 4096),
	"postgres://u:" + strings.Repeat("p", 1000) + "@h/db",
	"mysql://u:" + strings.Repeat("@", 100) + "@tcp(h)/db",
	"' OR '1'='1",
	"x'; DROP TABLE election_leaders; --",
}

// FuzzDialectOpen feeds arbitrary DSNs to the parser behind session.Open
// (without connecting): it never panics, every error is an ErrDSN, and what
// it reports of the target never contains the password it found.
func FuzzDialectOpen(f *testing.F) {
	for _, s := range dsnSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		o, err := dialect.Open(dsn)
		if err != nil {
			if !errors.Is(err, dialect.ErrDSN) {
				t.Fatalf("error does not wrap ErrDSN: %v", err)
			}
			if o.Dialect != nil {
				t.Fatal("error with a dialect")
			}
			// A password the DSN plainly carries never shows in the error.
			// (Unless the text is in the message anyway, whatever the
			// password: with the password replaced, the message still has it.)
			if pw := plainPassword(dsn); distinctive(pw, dsn) && strings.Contains(err.Error(), pw) {
				_, err2 := dialect.Open(strings.Replace(dsn, pw, strings.Repeat("k", len(pw)), 1))
				if err2 == nil || !strings.Contains(err2.Error(), pw) {
					t.Fatalf("error %q shows the password %q", err, pw)
				}
			}
			return
		}
		if o.Dialect == nil || o.DriverName == "" || o.DSN == "" {
			t.Fatalf("incomplete result %+v", o)
		}
		if s := o.Target.Secret; distinctive(s, dsn) && strings.Contains(o.Target.String(), s) {
			t.Fatalf("target %q shows the password", o.Target)
		}
		// The rewritten DSN is itself accepted, and means the same database.
		o2, err := dialect.Open(prefixFor(o) + o.DSN)
		if err != nil {
			t.Fatalf("rewritten DSN %q rejected: %v", o.DSN, err)
		}
		if o2.Dialect.Name() != o.Dialect.Name() {
			t.Fatalf("rewritten DSN is %s, was %s", o2.Dialect.Name(), o.Dialect.Name())
		}
	})
}

// prefixFor is what makes a driver DSN recognizable again.
func prefixFor(o dialect.Opened) string {
	if o.Dialect.Name() == "mysql" {
		return "mysql://"
	}
	return ""
}

// plainPassword is the password of dsn as written (possibly escaped),
// found the way each driver finds it, or "".
func plainPassword(dsn string) string {
	lower := strings.ToLower(dsn)
	var userinfo string
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		// The authority ends at the first '/', '?' or '#'; the user
		// information ends at its last '@'.
		rest := dsn[strings.Index(dsn, "://")+3:]
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			return ""
		}
		userinfo = rest[:at]
	default:
		// The mysql driver: user[:password]@ before the last '/'.
		rest := dsn
		if strings.HasPrefix(lower, "mysql://") {
			rest = dsn[len("mysql://"):]
		}
		slash := strings.LastIndex(rest, "/")
		if slash < 0 {
			return ""
		}
		at := strings.LastIndex(rest[:slash], "@")
		if at < 0 {
			return ""
		}
		userinfo = rest[:at]
	}
	_, pw, ok := strings.Cut(userinfo, ":")
	if !ok {
		return ""
	}
	return pw
}

// distinctive reports whether pw is long and odd enough that finding it in a
// message means the message shows the password, not a host or user name
// that happens to contain it.
func distinctive(pw, dsn string) bool {
	if len(pw) < 6 {
		return false
	}
	// It must appear in the DSN only as the password.
	return strings.Count(dsn, pw) == 1
}

// FuzzOpenPassword builds DSNs of every form around a fuzzed user,
// password, database and parameters, and opens them with session.Open
// against a closed port on the loopback interface: Open fails fast, never
// panics, and no error shows the password, raw or escaped. Targets the
// parameters would move away from the loopback interface are not dialled.
func FuzzOpenPassword(f *testing.F) {
	f.Add(uint8(0), "postgres", "s3cr3t", "test", "sslmode=disable")
	f.Add(uint8(1), "root", "s3cr3t", "test", "")
	f.Add(uint8(2), "root", "p@ss:w/rd?#", "db", "parseTime=true")
	f.Add(uint8(0), "u", "pa:ss@x", "db", "password=other")
	f.Add(uint8(0), "u", "пароль🔑", "дб", "application_name=x")
	f.Add(uint8(1), "u", "'; DROP TABLE election_leaders; --", "db", "")
	f.Add(uint8(0), "u", "%zz%", "db", "")
	f.Add(uint8(2), "u", "\x00\xff", "db", "x=%zz")
	f.Add(uint8(0), "u", strings.Repeat("p", 300), "db", "")
	f.Fuzz(func(t *testing.T, form uint8, user, pass, db, params string) {
		pass = "Pw" + pass + "Zq" // distinctive enough to search for
		var dsn string
		switch form % 3 {
		case 0:
			u := url.URL{Scheme: "postgres", User: url.UserPassword(user, pass), Host: "127.0.0.1:1", Path: "/" + db, RawQuery: params}
			dsn = u.String()
		case 1:
			dsn = "mysql://" + user + ":" + pass + "@tcp(127.0.0.1:1)/" + db + query(params)
		case 2:
			dsn = user + ":" + pass + "@tcp(127.0.0.1:1)/" + db + query(params)
		}
		secrets := []string{pass, url.QueryEscape(pass), url.PathEscape(pass), (&url.URL{User: url.UserPassword("", pass)}).User.String()[1:]}
		check := func(what, msg string) {
			for _, s := range secrets {
				if len(s) >= 6 && strings.Contains(msg, s) && strings.Count(dsn, s) <= 1 {
					t.Fatalf("%s shows the password %q: %s", what, s, msg)
				}
			}
		}
		o, err := dialect.Open(dsn)
		if err != nil {
			check("dialect.Open error", err.Error())
			return
		}
		check("target", o.Target.String())
		if !loopbackOnly(o) {
			return
		}
		gdb, err := session.Open(dsn)
		if err == nil {
			// A server answered on port 1: nothing to check, close it.
			if sqlDB, derr := gdb.DB(); derr == nil {
				sqlDB.Close()
			}
			return
		}
		check("session.Open error", err.Error())
		if !errors.Is(err, session.ErrUnreachable) && !errors.Is(err, session.ErrDSN) {
			t.Fatalf("session.Open: %v: neither ErrUnreachable nor ErrDSN", err)
		}
	})
}

func query(params string) string {
	if params == "" {
		return ""
	}
	return "?" + params
}

// loopbackOnly reports whether every address the driver would dial for o
// is a literal loopback IP, so that fuzzing never reaches another host or
// a resolver.
func loopbackOnly(o dialect.Opened) bool {
	loop := func(host string) bool {
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	switch o.Dialect.Name() {
	case "postgres":
		cfg, err := pgconn.ParseConfig(o.DSN)
		if err != nil || !loop(cfg.Host) {
			return false
		}
		for _, fb := range cfg.Fallbacks {
			if !loop(fb.Host) {
				return false
			}
		}
		return true
	case "mysql":
		cfg, err := drv.ParseDSN(o.DSN)
		if err != nil || cfg.Net != "tcp" {
			return false
		}
		host, _, err := net.SplitHostPort(cfg.Addr)
		return err == nil && loop(host)
	}
	return false
}
