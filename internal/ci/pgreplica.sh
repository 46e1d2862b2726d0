#!/usr/bin/env bash
# A PostgreSQL primary with a streaming replica, and a MariaDB, all of our own,
# for the failover and read-only tests (internal/replicatest). Every server
# runs from a data directory under $TMPDIR and is stopped by its PID; the
# shared test servers are never touched.
#
#   internal/ci/pgreplica.sh start        primary on 15432, replica on 15433 (pg_basebackup -R),
#                                         MariaDB on 13307 with a user without SUPER; prints the DSNs
#   internal/ci/pgreplica.sh stop         stops every server it started (resuming a frozen one first)
#   internal/ci/pgreplica.sh reset        stop, then start afresh (after a promotion)
#   internal/ci/pgreplica.sh promote      promotes the replica to primary
#   internal/ci/pgreplica.sh hang         freezes the primary (SIGSTOP to all its processes):
#                                         it accepts TCP connections and never answers
#   internal/ci/pgreplica.sh resume       SIGCONT to the frozen primary
#   internal/ci/pgreplica.sh kill         kills the primary at once (SIGKILL), as a crash would
#   internal/ci/pgreplica.sh stop-primary stops the primary (fast shutdown), as an operator would
#   internal/ci/pgreplica.sh sync on|off  synchronous replication to the replica (synchronous_standby_names)
#   internal/ci/pgreplica.sh readonly on|off|reset  the primary's database test read-only and back:
#                                         on: every session, open or new, is read-only
#                                         (default_transaction_read_only for the database, and
#                                         server-wide with a reload, which reaches open sessions);
#                                         off: new sessions are writable, open ones stay read-only
#                                         (no reload), as after a switch back they did in the field;
#                                         reset: every setting back to the server's default, reloaded
#   internal/ci/pgreplica.sh maria-readonly on|off|reset  the MariaDB read-only and back:
#                                         on: read_only, tx_read_only for new sessions, and the
#                                         app user's connections killed, so that every session it
#                                         opens from then on is read-only;
#                                         off: both off; sessions opened while on stay read-only
#                                         (a session's tx_read_only is taken at connect);
#                                         reset: the same as off
#   internal/ci/pgreplica.sh env          prints the environment the tests read
#   internal/ci/pgreplica.sh ci           start, run the tests, stop (even on failure)
#
# Settings (environment): PGREPLICA_DIR (${TMPDIR:-/tmp}/sqlelect-pgreplica),
# PGREPLICA_PRIMARY_PORT (15432), PGREPLICA_STANDBY_PORT (15433),
# PGREPLICA_MARIA_PORT (13307), PG_BIN (/usr/lib/postgresql/15/bin).
set -euo pipefail

dir=${PGREPLICA_DIR:-${TMPDIR:-/tmp}/sqlelect-pgreplica}
pport=${PGREPLICA_PRIMARY_PORT:-15432}
sport=${PGREPLICA_STANDBY_PORT:-15433}
mport=${PGREPLICA_MARIA_PORT:-13307}
pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
primary=$dir/primary
standby=$dir/standby
maria=$dir/maria
maria_pid=$maria/mariadbd.pid

# PostgreSQL refuses to run as root: run its tools as the postgres user.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_pid() { [ -s "$1/postmaster.pid" ] && head -n 1 "$1/postmaster.pid"; }
alive() { local pid=$1 state; kill -0 "$pid" 2>/dev/null || return 1; state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo ""); [ "$state" != Z ]; }
# psql_at PORT ARGS: psql on database postgres, in a session that can write
# whatever default_transaction_read_only the server has (readonly on).
psql_at() { local port=$1; shift; as_pg "$pg_bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 \
  -d "dbname=postgres options='-c default_transaction_read_only=off'" "$@"; }

pg_start() {
  local data=$1 port=$2
  as_pg "$pg_bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 -o "-p $port -k $dir" start >/dev/null
}

# pg_stop DATA: fast shutdown of the server of DATA by its PID (resumed first
# if frozen), SIGKILL after 20 s. Then it clears what a killed server leaves
# behind: a postmaster killed with SIGKILL (the kill command) keeps its
# socket's lock file, and while it is a zombie not yet reaped its PID still
# answers kill -0, so the next server on the port would refuse to start.
pg_stop() {
  local data=$1 pid port
  pid=$(pg_pid "$data" || true)
  [ -n "$pid" ] || return 0
  port=$(sed -n 4p "$data/postmaster.pid" 2>/dev/null || true)
  if alive "$pid"; then
    pg_group "$data" | xargs -r kill -CONT 2>/dev/null || true
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      echo "postgres (pid $pid) did not stop; killing it" >&2
      pg_group "$data" | xargs -r kill -9 2>/dev/null || true
    fi
  fi
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if [ -n "$port" ]; then rm -f "$dir/.s.PGSQL.$port" "$dir/.s.PGSQL.$port.lock"; fi
}

# pg_group DATA: the postmaster of DATA and its children.
pg_group() {
  local pid
  pid=$(pg_pid "$1" || true)
  [ -n "$pid" ] || return 0
  echo "$pid"
  pgrep -P "$pid" || true
}

start_pg() {
  mkdir -p "$dir"
  chown postgres "$dir" 2>/dev/null || true
  if [ -n "$(pg_pid "$primary" || true)" ] && alive "$(pg_pid "$primary")"; then
    echo "primary already running on 127.0.0.1:$pport"
  else
    pg_stop "$standby"
    pg_stop "$primary"
    rm -rf "$primary" "$standby"
    mkdir -p "$primary" && chown postgres "$primary" 2>/dev/null || true
    as_pg "$pg_bin/initdb" -D "$primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >>"$primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
max_connections = 60
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 5
hot_standby = on
fsync = off
full_page_writes = off
log_min_messages = warning
CONF
    echo "host replication postgres 127.0.0.1/32 trust" >>"$primary/pg_hba.conf"
    pg_start "$primary" "$pport"
    psql_at "$pport" -c "CREATE DATABASE test"
  fi
  if [ -n "$(pg_pid "$standby" || true)" ] && alive "$(pg_pid "$standby")"; then
    echo "replica already running on 127.0.0.1:$sport"
  else
    pg_stop "$standby"
    rm -rf "$standby"
    as_pg "$pg_bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$standby" -R -X stream -c fast
    # The replica's own port; primary_conninfo (written by -R) names the primary's.
    pg_start "$standby" "$sport"
  fi
  for _ in $(seq 1 100); do
    if [ "$(psql_at "$sport" -tAc 'SELECT pg_is_in_recovery()')" = t ] &&
       [ "$(psql_at "$pport" -tAc 'SELECT count(*) FROM pg_stat_replication')" -ge 1 ]; then
      echo "postgres primary (pid $(pg_pid "$primary")) on 127.0.0.1:$pport, replica (pid $(pg_pid "$standby")) on 127.0.0.1:$sport, streaming"
      return 0
    fi
    sleep 0.1
  done
  echo "the replica is not streaming from the primary; the logs:" >&2
  tail -n 20 "$primary/server.log" "$standby/server.log" >&2 || true
  exit 1
}

start_maria() {
  if [ -s "$maria_pid" ] && alive "$(cat "$maria_pid")"; then
    echo "mariadb already running on 127.0.0.1:$mport"
    return 0
  fi
  rm -rf "$maria"
  mkdir -p "$maria/data"
  chown -R mysql "$maria" 2>/dev/null || true
  mariadb-install-db --no-defaults --user=mysql --datadir="$maria/data" --auth-root-authentication-method=normal \
    --skip-test-db >"$maria/install.log" 2>&1 || { cat "$maria/install.log" >&2; exit 1; }
  local as=()
  [ "$(id -u)" = 0 ] && as=(--user=mysql)
  /usr/sbin/mariadbd --no-defaults "${as[@]}" --datadir="$maria/data" --port="$mport" --bind-address=127.0.0.1 \
    --socket="$maria/mariadbd.sock" --pid-file="$maria_pid" --skip-name-resolve --log-error="$maria/error.log" \
    --innodb-buffer-pool-size=32M --innodb-flush-log-at-trx-commit=2 >/dev/null 2>&1 &
  for _ in $(seq 1 300); do
    if mysql_root -e "SELECT 1" >/dev/null 2>&1; then
      # Root has SUPER (READ ONLY ADMIN), which ignores read_only: the tests
      # connect as a user without it.
      mysql_root -e "CREATE DATABASE IF NOT EXISTS test;
        CREATE USER IF NOT EXISTS 'app'@'127.0.0.1';
        GRANT ALL PRIVILEGES ON test.* TO 'app'@'127.0.0.1'"
      echo "mariadb (pid $(cat "$maria_pid")) on 127.0.0.1:$mport, user app without SUPER"
      return 0
    fi
    sleep 0.1
  done
  echo "mariadb did not start; its log:" >&2
  tail -n 30 "$maria/error.log" >&2 || true
  exit 1
}

mysql_root() { mysql --no-defaults --protocol=tcp -h 127.0.0.1 -P "$mport" -uroot "$@"; }

stop_maria() {
  [ -s "$maria_pid" ] || return 0
  local pid
  pid=$(cat "$maria_pid")
  alive "$pid" || { rm -f "$maria_pid"; return 0; }
  kill "$pid"
  for _ in $(seq 1 200); do alive "$pid" || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

stop_all() {
  pg_stop "$standby"
  pg_stop "$primary"
  stop_maria
  echo "replica test servers stopped"
}

print_env() {
  echo "SQLELECT_REPLICA_DSN='postgres://postgres@127.0.0.1:$pport,127.0.0.1:$sport/test?sslmode=disable&target_session_attrs=read-write'"
  echo "SQLELECT_REPLICA_PRIMARY_DSN='postgres://postgres@127.0.0.1:$pport/test?sslmode=disable'"
  echo "SQLELECT_REPLICA_STANDBY_DSN='postgres://postgres@127.0.0.1:$sport/test?sslmode=disable'"
  echo "SQLELECT_READONLY_MYSQL_DSN='mysql://app@tcp(127.0.0.1:$mport)/test'"
  echo "SQLELECT_REPLICA_CTL='$(cd "$(dirname "$0")" && pwd)/$(basename "$0")'"
}

on_off() { case "${1:-}" in on) echo on ;; off) echo off ;; *) echo "want on or off" >&2; exit 2 ;; esac; }

case "${1:-}" in
  start) start_pg; start_maria; print_env ;;
  stop) stop_all ;;
  reset) pg_stop "$standby"; pg_stop "$primary"; rm -rf "$primary" "$standby"; start_pg ;;
  promote)
    as_pg "$pg_bin/pg_ctl" -D "$standby" -w -t 30 promote >/dev/null
    echo "replica on 127.0.0.1:$sport promoted" ;;
  hang) pg_group "$primary" | xargs -r kill -STOP; echo "primary frozen" ;;
  resume) pg_group "$primary" | xargs -r kill -CONT; echo "primary resumed" ;;
  kill) pg_group "$primary" | xargs -r kill -9 2>/dev/null || true; echo "primary killed" ;;
  stop-primary) pg_stop "$primary"; echo "primary stopped" ;;
  sync)
    if [ "$(on_off "${2:-}")" = on ]; then names="'*'"; else names="''"; fi
    psql_at "$pport" -c "ALTER SYSTEM SET synchronous_standby_names = $names" -c "SELECT pg_reload_conf()" >/dev/null
    echo "synchronous_standby_names = $names" ;;
  readonly)
    case "${2:-}" in
      on) psql_at "$pport" -c "ALTER DATABASE test SET default_transaction_read_only = on" \
            -c "ALTER SYSTEM SET default_transaction_read_only = on" -c "SELECT pg_reload_conf()" >/dev/null
          echo "primary database test read-only, open sessions included" ;;
      off) psql_at "$pport" -c "ALTER DATABASE test SET default_transaction_read_only = off" >/dev/null
          echo "primary database test writable for new sessions; open sessions stay read-only" ;;
      reset) psql_at "$pport" -c "ALTER DATABASE test RESET default_transaction_read_only" \
            -c "ALTER SYSTEM RESET default_transaction_read_only" -c "SELECT pg_reload_conf()" >/dev/null
          echo "primary default_transaction_read_only reset" ;;
      *) echo "want on, off or reset" >&2; exit 2 ;;
    esac ;;
  maria-readonly)
    case "${2:-}" in
      on) mysql_root -e "SET GLOBAL tx_read_only = ON; SET GLOBAL read_only = ON"
          for id in $(mysql_root -N -e "SELECT id FROM information_schema.processlist WHERE user = 'app'"); do
            mysql_root -e "KILL CONNECTION $id" 2>/dev/null || true
          done
          echo "mariadb read_only and tx_read_only on, the app user's connections killed" ;;
      off|reset) mysql_root -e "SET GLOBAL read_only = OFF; SET GLOBAL tx_read_only = OFF"
          echo "mariadb read_only and tx_read_only off; sessions opened while on stay read-only" ;;
      *) echo "want on, off or reset" >&2; exit 2 ;;
    esac ;;
  env) print_env ;;
  ci)
    trap stop_all EXIT
    start_pg
    start_maria
    eval "$(print_env | sed 's/^/export /')"
    cd "$(dirname "$0")/../.."
    go test -race -count=1 -timeout 10m -v ./internal/replicatest/ ;;
  *) echo "usage: $0 start|stop|reset|promote|hang|resume|kill|stop-primary|sync on|off|readonly on|off|reset|maria-readonly on|off|reset|env|ci" >&2; exit 2 ;;
esac
