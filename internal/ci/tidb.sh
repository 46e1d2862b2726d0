#!/usr/bin/env bash
# Builds, starts and stops a TiDB of our own (one process, embedded
# unistore storage) on its own port, and runs the suites against it:
#
#   internal/ci/tidb.sh build   # builds tidb-server at the pinned version, once per machine
#   internal/ci/tidb.sh start   # listens on 127.0.0.1:14000, prints the DSN
#   internal/ci/tidb.sh stop    # stops the process it started, by its PID
#   internal/ci/tidb.sh ci      # build, start, tests and a short soak, stop
#
# The server is built from its Go module at TIDB_VERSION (the module proxy
# serves explicit versions, not @latest). Its go.mod replaces the nested
# module pkg/parser with ./pkg/parser, which a module download leaves out,
# so the parser is fetched at the same commit and put in its place. The
# binary is cached under TIDB_CACHE by version: later runs on the machine
# skip the build (about 8 minutes on 2 cores).
#
# Settings (environment): TIDB_PORT (14000), TIDB_STATUS_PORT (14080),
# TIDB_DIR (a directory under $TMPDIR of its own: data, log, PID file),
# TIDB_CACHE (~/.cache/sqlelect), SOAK (45s; the soak's length, 0 for none),
# TIDB_SERVER_VERSION (unset: what VERSION() answers, TiDB's server-version
# setting; set it, e.g. to 8.0.11, to check that nothing tells TiDB by it).
set -euo pipefail
cd "$(dirname "$0")/../.."

version=${TIDB_VERSION:-v1.1.0-beta.0.20241125141335-ec8b81b98edc}
parser_version=${TIDB_PARSER_VERSION:-v0.0.0-20241125141335-ec8b81b98edc}
port=${TIDB_PORT:-14000}
status_port=${TIDB_STATUS_PORT:-14080}
dir=${TIDB_DIR:-${TMPDIR:-/tmp}/sqlelect-tidb-$port}
cache=${TIDB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sqlelect}
bin=$cache/tidb-$version/tidb-server
pidfile=$dir/tidb.pid
dsn="mysql://root@tcp(127.0.0.1:$port)/test"

build() {
  if [ -x "$bin" ]; then
    echo "tidb-server $version: cached at $bin"
    return 0
  fi
  local work src pdir
  work=$(mktemp -d)
  src=$(GOFLAGS=-mod=mod go mod download -json "github.com/pingcap/tidb@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  pdir=$(GOFLAGS=-mod=mod go mod download -json "github.com/pingcap/tidb/pkg/parser@$parser_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$src" ] || [ -z "$pdir" ]; then
    echo "FAIL: could not download the TiDB module $version or its parser $parser_version" >&2
    exit 1
  fi
  cp -r "$src" "$work/tidb"
  chmod -R u+w "$work/tidb"
  cp -r "$pdir" "$work/tidb/pkg/parser"
  chmod -R u+w "$work/tidb/pkg/parser"
  mkdir -p "$(dirname "$bin")"
  echo "building tidb-server $version (once per machine; cached at $bin)"
  (cd "$work/tidb" && go build -o "$bin.tmp" ./cmd/tidb-server)
  mv "$bin.tmp" "$bin"
  rm -rf "$work"
}

running() {
  [ -s "$pidfile" ] || return 1
  local pid state
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo "")
  [ "$state" != Z ]
}

ready() {
  mysql --protocol=tcp -h 127.0.0.1 -P "$port" -uroot --connect-timeout=2 -e "SELECT 1" >/dev/null 2>&1
}

start() {
  [ -x "$bin" ] || build
  if running; then
    echo "tidb-server already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  local config=()
  if [ -n "${TIDB_SERVER_VERSION:-}" ]; then
    printf 'server-version = "%s"\n' "$TIDB_SERVER_VERSION" >"$dir/tidb.toml"
    config=(-config "$dir/tidb.toml")
  fi
  "$bin" ${config[@]+"${config[@]}"} -store unistore -path "$dir/data" -host 127.0.0.1 -P "$port" -status "$status_port" \
    -log-file "$dir/tidb.log" -log-slow-query "$dir/tidb-slow.log" >"$dir/stdout.log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if ! running; then break; fi
    if ready; then
      mysql --protocol=tcp -h 127.0.0.1 -P "$port" -uroot -e "CREATE DATABASE IF NOT EXISTS test"
      echo "tidb-server (pid $(cat "$pidfile")) on 127.0.0.1:$port"
      echo "DSN: $dsn"
      return 0
    fi
    sleep 0.5
  done
  echo "FAIL: tidb-server did not start; the end of its log:" >&2
  tail -n 30 "$dir/tidb.log" "$dir/stdout.log" >&2 || true
  exit 1
}

# stop fails when the process it started had exited already.
stop() {
  if [ ! -s "$pidfile" ]; then
    echo "tidb-server is not running (no $pidfile)"
    return 0
  fi
  if ! running; then
    echo "FAIL: tidb-server (pid $(cat "$pidfile")) had already exited; the end of its log:" >&2
    tail -n 30 "$dir/tidb.log" >&2 || true
    rm -f "$pidfile"
    exit 1
  fi
  local pid
  pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 100); do
    running || { echo "tidb-server (pid $pid) stopped"; rm -f "$pidfile"; return 0; }
    sleep 0.1
  done
  echo "tidb-server (pid $pid) did not stop on SIGTERM; sending SIGKILL" >&2
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

ci() {
  build
  # VERSION() answers like a MySQL 8.0 server, as with TiDB's server-version
  # setting: the library must tell TiDB by its own variables.
  TIDB_SERVER_VERSION=${TIDB_SERVER_VERSION-8.0.11} start
  trap 'stop || true' EXIT
  # The suites with the mysql target pointing at TiDB, and no other server;
  # SQLELECT_EXPECT_TIDB makes the TiDB tests fail, not skip, if it is not.
  SQLELECT_TEST_ONLY=mysql SQLELECT_MYSQL_DSN="$dsn" SQLELECT_POSTGRES_DSN= SQLELECT_EXPECT_TIDB=1 \
    go test -race -count=1 -timeout 15m \
      -run 'TestConformance|TestMisuse|TestNamespacesAreBoundParameters|Fuzz|TestClock|TestClassify|TestSelectLeaderShape|TestTiDB|TestMySQL|TestHandoff|TestGroup|TestConcurrentElect|TestGuard|TestHistory|TestCandidatesIdentity|TestUp|TestDown' \
      ./election/ ./migrate/ ./internal/dialect/ ./session/
  if [ "${SOAK:-45s}" != 0 ]; then
    # A short chaos soak without server restarts: this TiDB is not a service.
    SQLELECT_MYSQL_DSN="$dsn" go run ./internal/cmd/sqlelect-chaos -db mysql -duration "${SOAK:-45s}" -restart-server=false
  fi
  trap - EXIT
  stop
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  ci) ci ;;
  *) echo "usage: $0 build|start|stop|ci" >&2; exit 2 ;;
esac
