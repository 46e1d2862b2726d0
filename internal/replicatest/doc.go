// Package replicatest holds the tests of elections across a PostgreSQL
// failover and on read-only servers. They need servers of their own, which
// internal/ci/pgreplica.sh starts (a primary with a streaming replica, and a
// MariaDB with a user without SUPER) and which the tests freeze, promote and
// switch read-only:
//
//	internal/ci/pgreplica.sh ci                      # start, run these tests, stop
//	internal/ci/pgreplica.sh start                   # or by hand:
//	eval "$(internal/ci/pgreplica.sh env | sed "s/^/export /")"
//	go test -race ./internal/replicatest/
//
// Without SQLELECT_REPLICA_DSN the tests skip (the ordinary suite never
// runs them: they restart the servers they use); with it, every other
// variable the script prints must be set too.
package replicatest
