package main

import (
	"strings"
	"testing"
	"time"
)

func TestStatementKind(t *testing.T) {
	for q, want := range map[string]string{
		"/* sqlelect round: 40000 namespaces */ WITH c AS (SELECT 1)":                                           "Group round",
		"SELECT   x.namespace,\n\tx.candidate_id FROM (VALUES (CAST($1 AS text)), (CAST($2 AS text))) AS a(ns)": "SELECT x.namespace, x.candidate_id FROM (VALUES (CAST($1 AS ...",
		"DELETE FROM election_members WHERE member_id = $1":                                                     "DELETE FROM election_members WHERE member_id = $1",
	} {
		if got := statementKind(q); got != want {
			t.Errorf("statementKind(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestActivityPrint(t *testing.T) {
	a := &activity{reads: 3, byWait: map[string]map[string]int{"Group round": {"CPU": 2, "IO WALSync": 1}, "SELECT 1": {"CPU": 1}}}
	var b strings.Builder
	a.print(&b, 100*time.Millisecond)
	for _, want := range []string{"3 readings, 4 statements", "| `Group round` | 75.0 % | 67 % | IO WALSync 33 % |", "| `SELECT 1` | 25.0 % | 100 % |  |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("print wrote\n%s\nwithout %q", b.String(), want)
		}
	}
}
