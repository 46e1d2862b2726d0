package election_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/sqlelect/sqlelect/election"
	"github.com/sqlelect/sqlelect/internal/testdb"
)

// BenchmarkNewGroup measures NewGroup for a Group of many namespaces: the
// work each process of a fleet does for every namespace it joins before
// its first round, all of them at once at a cold start. It runs on SQLite,
// since the one statement NewGroup sends (the settings check) is the same
// whatever the count; ns/op and allocs/op are per Group.
//
//	go test -run '^$' -bench NewGroup -benchmem ./election/
func BenchmarkNewGroup(b *testing.B) {
	db := testdb.Open(b, testdb.Only(b, "sqlite"))
	for _, n := range []int{1000, 5000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("bench.newgroup.%05d", i)
		}
		b.Run(fmt.Sprintf("namespaces=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := election.NewGroup(context.Background(), db, uuid.New(),
					election.GroupConfig{Namespaces: names}, election.WithLogger(quiet)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
