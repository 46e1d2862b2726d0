package dialect

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestInSchemaQualifiesEveryStatement: every statement of a schema's
// PostgreSQL dialect that names an election table names it qualified, and
// none is left naming the search path's tables, whatever fields Statements
// gains.
func TestInSchemaQualifiesEveryStatement(t *testing.T) {
	d, err := InSchema(postgres{}, `Ap"p $1`)
	if err != nil {
		t.Fatal(err)
	}
	const quoted = `"Ap""p $1".`
	s := d.Statements()
	var all []string
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			all = append(all, f.String())
		case reflect.Array, reflect.Slice:
			for j := 0; j < f.Len(); j++ {
				all = append(all, f.Index(j).String())
			}
		}
	}
	renew := d.(postgres).renewSQL()
	prune, _, _ := BatchPrune(d, []string{"a", "b"}, -time.Second)
	history, _ := BatchPruneHistory(d, []string{"a", "b"}, -time.Hour)
	all = append(all, renew, BatchRenew(d, 2), BatchUnregister(d, 2), BatchExpired(d, 2), prune, history, MembersExpired(d), PruneMember(d),
		MemberGone(d), pgRound(d, 2))
	m := reflect.ValueOf(Migrations(d)).Elem()
	for i := 0; i < m.NumField(); i++ {
		all = append(all, m.Field(i).String())
	}
	for _, q := range all {
		for _, m := range electionTable.FindAllStringSubmatchIndex(q, -1) {
			start := m[4] // the table name
			if !strings.HasSuffix(q[:start], quoted) {
				t.Errorf("unqualified table in %q", q)
			}
		}
	}
	if !strings.Contains(renew, quoted+"election_leaders") || !strings.Contains(renew, quoted+"election_candidates") {
		t.Errorf("renewal not qualified: %s", renew)
	}
	if pgStatements.Grant == s.Grant {
		t.Error("the shared statements were changed or not qualified")
	}
	if strings.Contains(pgStatements.Grant, quoted) || strings.Contains(Migrations(postgres{}).Versions, quoted) {
		t.Error("the search path's statements were qualified")
	}
	for _, other := range []Dialect{mysql{}, sqlite{}} {
		if _, err := InSchema(other, "app"); err == nil {
			t.Errorf("InSchema on %s: no error", other.Name())
		}
	}
}

// TestGroupRoundNamespaces: the count of a round's namespaces is read back
// from the statement, with or without a schema; other statements are not
// rounds.
func TestGroupRoundNamespaces(t *testing.T) {
	d, err := InSchema(postgres{}, "app")
	if err != nil {
		t.Fatal(err)
	}
	for _, dd := range []Dialect{postgres{}, d} {
		for _, n := range []int{1, 2, 7} {
			if got, ok := GroupRoundNamespaces(pgRound(dd, n)); !ok || got != n {
				t.Errorf("%d namespaces: GroupRoundNamespaces = %d, %v", n, got, ok)
			}
		}
	}
	for _, n := range []int{1, 2, 7} {
		if got, ok := GroupRoundNamespaces(mariaRound(n)); !ok || got != n {
			t.Errorf("MariaDB, %d namespaces: GroupRoundNamespaces = %d, %v", n, got, ok)
		}
	}
	for _, q := range []string{BatchUnregister(postgres{}, 3), mariaTake, "/* sqlelect round: x namespaces */ SELECT 1",
		"/* sqlelect round: 0 namespaces */ SELECT 1", "/* sqlelect round: 3 */ SELECT 1"} {
		if n, ok := GroupRoundNamespaces(q); ok {
			t.Errorf("%q counted as a round of %d namespaces", q, n)
		}
	}
}
