package session_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	drv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlelect/sqlelect/internal/dialect"
	"github.com/sqlelect/sqlelect/internal/testdb"
	"github.com/sqlelect/sqlelect/session"
)

// kvQuote quotes a value for a libpq keyword/value string.
func kvQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// TestDSNForms lists every form Open accepts, with where its error messages
// say it points, and every form it refuses, with its message. Nothing is
// dialled: this is the parsing only. No message shows the password.
func TestDSNForms(t *testing.T) {
	esc := url.QueryEscape(secret)
	userinfo := url.UserPassword("app", secret).String()
	accepted := []struct {
		name, dsn, dialect, where string
	}{
		{"postgres URL", "postgres://" + userinfo + "@db.example.com:5432/app?sslmode=require", "postgres", `db.example.com:5432 (database "app", user "app")`},
		{"postgresql URL", "postgresql://" + userinfo + "@db.example.com/app", "postgres", `db.example.com:5432 (database "app", user "app")`},
		{"mixed-case scheme", "PostgreSQL://" + userinfo + "@db.example.com/app", "postgres", `db.example.com:5432`},
		{"postgres URL, several hosts", "postgres://" + userinfo + "@h1:5432,h2:5433/app?target_session_attrs=read-write", "postgres", `h1:5432,h2:5433 (database "app", user "app")`},
		{"postgres URL, password parameter", "postgres://app@db.example.com/app?password=" + esc, "postgres", `db.example.com:5432`},
		{"libpq keyword/value", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable", "postgres", `127.0.0.1:5432 (database "test", user "postgres")`},
		{"libpq keyword/value, quoted password", "host=db.example.com user=app password=" + kvQuote(secret) + " dbname=app", "postgres", `db.example.com:5432 (database "app", user "app")`},
		{"libpq keyword/value, several hosts", "host=h1,h2 port=5432,5433 user=app dbname=app target_session_attrs=read-write", "postgres", `h1:5432,h2:5433`},
		{"libpq keyword/value, spaces around =", "  host = db.example.com dbname = app user = app", "postgres", `db.example.com:5432 (database "app", user "app")`},
		{"mysql URL", "mysql://" + userinfo + "@db.example.com:3306/app?tls=true", "mysql", `db.example.com:3306 (database "app", user "app")`},
		{"mysql URL, default port", "mysql://" + userinfo + "@db.example.com/app", "mysql", `db.example.com:3306 (database "app", user "app")`},
		{"mysql URL, IPv6", "mysql://" + userinfo + "@[::1]:3307/app", "mysql", `[::1]:3307`},
		{"mysql URL, no password", "mysql://root@127.0.0.1:3306/test", "mysql", `127.0.0.1:3306 (database "test", user "root")`},
		{"mysql URL, driver address", "mysql://app:" + secret + "@tcp(db.example.com:3306)/app", "mysql", `db.example.com:3306 (database "app", user "app")`},
		{"mysql driver DSN", "app:" + secret + "@tcp(db.example.com:3306)/app?parseTime=true", "mysql", `db.example.com:3306 (database "app", user "app")`},
		{"mysql driver DSN, socket", "app:" + secret + "@unix(/run/mysqld/mysqld.sock)/app", "mysql", `/run/mysqld/mysqld.sock`},
		{"sqlite:PATH", "sqlite:/var/lib/app/app.db", "sqlite", "/var/lib/app/app.db"},
		{"sqlite://PATH", "sqlite:///var/lib/app/app.db", "sqlite", "/var/lib/app/app.db"},
		{"file:PATH?params", "file:/var/lib/app/app.db?_busy_timeout=1000", "sqlite", "/var/lib/app/app.db"},
		{"PATH.sqlite3", "/var/lib/app/app.sqlite3", "sqlite", "/var/lib/app/app.sqlite3"},
		{"sqlite::memory:", "sqlite::memory:", "sqlite", ""},
	}
	for _, c := range accepted {
		t.Run("accepts "+c.name, func(t *testing.T) {
			o, err := dialect.Open(c.dsn)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if o.Dialect.Name() != c.dialect {
				t.Errorf("dialect %s, want %s", o.Dialect.Name(), c.dialect)
			}
			if !strings.Contains(o.Target.String(), c.where) {
				t.Errorf("target %q does not say %q", o.Target, c.where)
			}
			assertNoSecret(t, "the target", o.Target.String())
		})
	}

	refused := []struct {
		name, dsn, message string
	}{
		{"empty", "", "invalid DSN: empty"},
		{"unknown scheme", "oracle://app:" + esc + "@db/app", "unrecognized form"},
		{"unknown keyword first", "server=db.example.com password=" + kvQuote(secret), "unrecognized form"},
		{"NUL byte", "postgres://app@db/app\x00", "NUL byte"},
		{"postgres URL, bad sslmode", "postgres://" + userinfo + "@db.example.com/app?sslmode=bogus", "sslmode is invalid"},
		{"postgres URL, bad port", "postgres://" + userinfo + "@db.example.com:99999/app", "invalid port"},
		{"postgres URL, unescaped password", "postgres://app:" + secret + "@db.example.com/app", "postgres URL does not parse"},
		{"libpq keyword/value, bad sslmode", "host=db.example.com password=" + kvQuote(secret) + " sslmode=bogus", "sslmode is invalid"},
		{"libpq keyword/value, bad port", "host=db.example.com port=x password=" + kvQuote(secret), "invalid port"},
		{"libpq keyword/value, unterminated quote", "host=db.example.com password='" + url.PathEscape(secret), "unterminated quoted string"},
		{"mysql URL, bad parameter", "mysql://" + userinfo + "@db.example.com:3306/app?parseTime=maybe", "invalid bool value: maybe"},
		{"mysql URL, bad port", "mysql://" + userinfo + "@db.example.com:port/app", `invalid port ":port"`},
		{"mysql URL, unescaped '#' in the password", "mysql://app:" + secret + "@db.example.com/app", "mysql URL"},
		{"mysql driver DSN, unterminated address", "mysql://app:" + secret + "@tcp(db.example.com:3306/app", "network address not terminated"},
		{"mysql driver DSN, bad parameter", "app:" + secret + "@tcp(db.example.com)/app?parseTime=maybe", "invalid bool value: maybe"},
		{"sqlite without a path", "sqlite:", "sqlite needs a file path"},
	}
	for _, c := range refused {
		t.Run("refuses "+c.name, func(t *testing.T) {
			o, err := dialect.Open(c.dsn)
			if err == nil {
				t.Fatalf("accepted as %s at %s", o.Dialect.Name(), o.Target)
			}
			if !errors.Is(err, dialect.ErrDSN) {
				t.Errorf("%v does not wrap ErrDSN", err)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Errorf("message %q does not say %q", err, c.message)
			}
			assertErrorClean(t, "the error", err)
			t.Log(err)
		})
	}
}

// TestScrubOnlyThePassword: a password whose text is also the database's
// (or user's) name is hidden where it is the password, and the names stay
// readable everywhere else in the message.
func TestScrubOnlyThePassword(t *testing.T) {
	closed := closedPort(t)
	host, port, _ := net.SplitHostPort(closed)
	for _, dsn := range []string{
		"postgres://test:test@" + closed + "/test?sslmode=disable",
		fmt.Sprintf("host=%s port=%s user=test password=test dbname=test sslmode=disable", host, port),
		"mysql://test:test@" + closed + "/test",
		"test:test@tcp(" + closed + ")/test",
	} {
		t.Run(dsn, func(t *testing.T) {
			o, err := dialect.Open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			if want := `database "test", user "test"`; !strings.Contains(o.Target.String(), want) {
				t.Errorf("target %q does not say %s", o.Target, want)
			}
			for _, c := range []struct{ in, want string }{
				{`failed to connect to user=test database=test: dial error`, `failed to connect to user=test database=test: dial error`},
				{"cannot parse postgres://test:test@h/test", "cannot parse postgres://test:xxxxx@h/test"},
				{"cannot parse host=h user=test password=test dbname=test", "cannot parse host=h user=test password=xxxxx dbname=test"},
				{"cannot parse host=h password='test' dbname=test", "cannot parse host=h password=xxxxx dbname=test"},
			} {
				if got := o.Target.Scrub(c.in); got != c.want {
					t.Errorf("Scrub(%q) = %q, want %q", c.in, got, c.want)
				}
			}
			db, err := session.Open(dsn)
			if err == nil {
				testdb.Close(db)
				t.Fatal("Open succeeded on a closed port")
			}
			if !errors.Is(err, session.ErrUnreachable) {
				t.Errorf("got %v, want ErrUnreachable", err)
			}
			if !strings.Contains(err.Error(), `database "test"`) {
				t.Errorf("error %q does not name the database", err)
			}
			t.Log(err)
		})
	}
}

// TestOpenPastedForms: the forms providers print reach the configured
// servers: libpq keyword/value strings and mysql:// URLs with host:port,
// with a password whose text is also the database's name (PostgreSQL here
// trusts loopback connections and ignores it).
func TestOpenPastedForms(t *testing.T) {
	t.Run("libpq keyword/value", func(t *testing.T) {
		cfg, err := pgconn.ParseConfig(serverDSN(t, testdb.PostgresEnv))
		if err != nil {
			t.Fatal(err)
		}
		dsn := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
			cfg.Host, cfg.Port, cfg.User, kvQuote(cfg.Database), cfg.Database)
		works(t, open(t, dsn), "postgres")
	})
	t.Run("mysql URL with host:port", func(t *testing.T) {
		cfg, err := drv.ParseDSN(strings.TrimPrefix(serverDSN(t, testdb.MySQLEnv), "mysql://"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Net != "tcp" {
			t.Skipf("the configured MySQL is reached over %s", cfg.Net)
		}
		u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
		u.User = url.User(cfg.User)
		if cfg.Passwd != "" {
			u.User = url.UserPassword(cfg.User, cfg.Passwd)
		}
		works(t, open(t, u.String()), "mysql")
	})
	t.Run("sqlite path", func(t *testing.T) {
		works(t, open(t, filepath.Join(t.TempDir(), "pasted.sqlite")), "sqlite")
	})
}
