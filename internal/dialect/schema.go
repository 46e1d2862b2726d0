package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// MaxSchemaLen is the longest schema name PostgreSQL keeps: longer
// identifiers are silently truncated to 63 bytes (NAMEDATALEN - 1), which
// would put two applications with long, similar names in one schema.
const MaxSchemaLen = 63

// ErrSchema is wrapped by the errors of InSchema and ValidSchema.
var ErrSchema = errors.New("schema")

// ValidSchema checks a schema name: 1 to MaxSchemaLen bytes of UTF-8
// without NUL bytes. Any other character is allowed: the name is always
// quoted.
func ValidSchema(schema string) error {
	switch {
	case schema == "":
		return fmt.Errorf("%w: the schema name is empty", ErrSchema)
	case len(schema) > MaxSchemaLen:
		return fmt.Errorf("%w: the schema name is %d bytes; PostgreSQL keeps at most %d", ErrSchema, len(schema), MaxSchemaLen)
	case !utf8.ValidString(schema):
		return fmt.Errorf("%w: the schema name is not valid UTF-8", ErrSchema)
	}
	for i := 0; i < len(schema); i++ {
		if schema[i] == 0 {
			return fmt.Errorf("%w: the schema name contains a NUL byte", ErrSchema)
		}
	}
	return nil
}

// InSchema returns d with the election tables in schema: its statements
// name every table qualified by the quoted schema. Only PostgreSQL has
// schemas within a database; on MySQL a schema is a database, named in the
// DSN, and SQLite has none, so both are refused.
func InSchema(d Dialect, schema string) (Dialect, error) {
	if err := ValidSchema(schema); err != nil {
		return nil, err
	}
	if _, ok := d.(postgres); !ok {
		return nil, fmt.Errorf("%w: schemas are a PostgreSQL option; on %s keep the tables apart with another database in the DSN", ErrSchema, d.Name())
	}
	return postgres{schema: schema}, nil
}

// Schema returns the schema d's statements name, or "" for the connection's
// search path.
func Schema(d Dialect) string {
	if p, ok := d.(postgres); ok {
		return p.schema
	}
	return ""
}

// QuoteSchema returns schema quoted as a PostgreSQL identifier.
func QuoteSchema(schema string) string { return pgx.Identifier{schema}.Sanitize() }

// schemaStatements are the PostgreSQL statements of one schema.
type schemaStatements struct {
	statements *Statements
	renew      string
}

var schemas sync.Map // schema name -> *schemaStatements

// electionTable matches the name of an election table where a statement
// names one: after a space or an opening parenthesis, never already
// qualified.
var electionTable = regexp.MustCompile(`([\s(])(election_[a-z_]+)\b`)

// qualify names every election table in q with the quoted schema.
func qualify(q, quoted string) string {
	return electionTable.ReplaceAllStringFunc(q, func(m string) string {
		// m is the separator (one byte: a space or "(") and the table.
		return m[:1] + quoted + "." + m[1:]
	})
}

// qualifyAll qualifies every statement in v, a Statements struct: each
// string field and each string of an array field, so that a statement added
// to Statements is never left naming the search path's tables.
func qualifyAll(v reflect.Value, quoted string) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(qualify(f.String(), quoted))
		case reflect.Array, reflect.Slice:
			for j := 0; j < f.Len(); j++ {
				if e := f.Index(j); e.Kind() == reflect.String {
					e.SetString(qualify(e.String(), quoted))
				}
			}
		}
	}
}

// inSchema builds, once per schema, the statements that name its tables.
func inSchema(schema string) *schemaStatements {
	if v, ok := schemas.Load(schema); ok {
		return v.(*schemaStatements)
	}
	quoted := QuoteSchema(schema)
	s := *pgStatements
	qualifyAll(reflect.ValueOf(&s).Elem(), quoted)
	v, _ := schemas.LoadOrStore(schema, &schemaStatements{statements: &s, renew: qualify(pgRenew, quoted)})
	return v.(*schemaStatements)
}

// UseSchema creates schema if it does not exist and makes it the search
// path of the transaction open on conn (SET LOCAL: the connection goes back
// to the pool with its own search path when the transaction ends), so that
// the shipped SQL files, which name the tables unqualified, create them
// there. PostgreSQL only: InSchema refuses a schema elsewhere.
func UseSchema(ctx context.Context, conn *sql.Conn, schema string) error {
	q := QuoteSchema(schema)
	if _, err := conn.ExecContext(ctx, pgCreateSchema+q); err != nil {
		return fmt.Errorf("creating schema %s: %w", q, err)
	}
	if _, err := conn.ExecContext(ctx, pgLocalPath+q); err != nil {
		return fmt.Errorf("using schema %s: %w", q, err)
	}
	return nil
}
