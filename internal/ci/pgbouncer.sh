#!/usr/bin/env bash
# Starts or stops a PgBouncer of our own in transaction pooling mode in front
# of the test PostgreSQL, so the suites can run through it:
#
#   internal/ci/pgbouncer.sh start   # listens on 127.0.0.1:6432, prints the DSN
#   internal/ci/pgbouncer.sh stop    # stops the process it started, by its PID
#
# Settings (environment): PGBOUNCER_PORT (6432), PGBOUNCER_DIR (a directory
# under $TMPDIR of its own, holding the configuration, log and PID file),
# PG_HOST (127.0.0.1), PG_PORT (5432), PG_USER (postgres, trusted), PG_DB (test).
# It never touches the PostgreSQL server's own configuration.
set -euo pipefail

port=${PGBOUNCER_PORT:-6432}
dir=${PGBOUNCER_DIR:-${TMPDIR:-/tmp}/sqlelect-pgbouncer-$port}
pg_host=${PG_HOST:-127.0.0.1}
pg_port=${PG_PORT:-5432}
pg_user=${PG_USER:-postgres}
pg_db=${PG_DB:-test}
pidfile=$dir/pgbouncer.pid

# running: the recorded process exists and is not a zombie (a daemon whose
# parent does not reap it stays one after it died).
running() {
  [ -s "$pidfile" ] || return 1
  local pid state
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo "")
  [ "$state" != Z ]
}

start() {
  command -v pgbouncer >/dev/null || { echo "pgbouncer is not installed (Debian: apt-get install -y pgbouncer)" >&2; exit 1; }
  if running; then
    echo "pgbouncer already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  printf '"%s" ""\n' "$pg_user" >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$pg_host port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $pg_user
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 40
reserve_pool_size = 10
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $pidfile
INI
  # PgBouncer refuses to run as root; run it as the user that owns it.
  local as=()
  if [ "$(id -u)" = 0 ]; then
    local user=postgres
    id "$user" >/dev/null 2>&1 || user=nobody
    chown -R "$user" "$dir"
    as=(-u "$user")
  fi
  pgbouncer -d "${as[@]}" "$dir/pgbouncer.ini"
  for _ in $(seq 1 50); do
    if running && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "pgbouncer (pid $(cat "$pidfile")) on 127.0.0.1:$port, transaction pooling, in front of $pg_host:$pg_port"
      echo "DSN: postgres://$pg_user@127.0.0.1:$port/$pg_db?sslmode=disable"
      return 0
    fi
    sleep 0.1
  done
  echo "pgbouncer did not start; its log:" >&2
  cat "$dir/pgbouncer.log" >&2 || true
  exit 1
}

# stop fails when the process it started is gone already: PgBouncer exited
# or crashed under the tests (its log is printed).
stop() {
  if [ ! -s "$pidfile" ]; then
    echo "pgbouncer is not running (no $pidfile)"
    return 0
  fi
  if ! running; then
    echo "FAIL: pgbouncer (pid $(cat "$pidfile")) had already exited; the end of its log:" >&2
    tail -n 30 "$dir/pgbouncer.log" >&2 || true
    rm -f "$pidfile"
    exit 1
  fi
  local pid
  pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 50); do
    running || { echo "pgbouncer (pid $pid) stopped"; return 0; }
    sleep 0.1
  done
  echo "pgbouncer (pid $pid) did not stop on SIGTERM; sending SIGKILL" >&2
  kill -9 "$pid" 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
