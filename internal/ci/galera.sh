#!/usr/bin/env bash
# Starts or stops a three-node MariaDB Galera cluster of our own, each node a
# mariadbd process with its own data directory and ports, and runs the
# suites against it:
#
#   internal/ci/galera.sh start   # nodes on 127.0.0.1:13311, 13312, 13313
#   internal/ci/galera.sh stop    # stops the processes it started, by PID
#   internal/ci/galera.sh ci      # start, tests, stop
#
# Node 1 bootstraps the cluster; nodes 2 and 3 join it by rsync state
# transfer. The shared MariaDB on 3306 and its configuration are never
# touched: the nodes read only the option files written here.
#
# Settings (environment): GALERA_DIR (a directory under $TMPDIR of its
# own), GALERA_BASE_PORT (13310: node n listens on base+n, its group
# communication on 14560+n, its state transfers on 14570+n and 14580+n).
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=${GALERA_DIR:-${TMPDIR:-/tmp}/sqlelect-galera}
base=${GALERA_BASE_PORT:-13310}
provider=/usr/lib/galera/libgalera_smm.so
nodes=(1 2 3)

port() { echo $((base + $1)); }

dsns() {
  local out=() n
  for n in "${nodes[@]}"; do out+=("mysql://root@tcp(127.0.0.1:$(port "$n"))/test"); done
  (IFS=,; echo "${out[*]}")
}

running() {
  local pidfile=$dir/node$1/mariadbd.pid pid state
  [ -s "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo "")
  [ "$state" != Z ]
}

sql() {
  mariadb --protocol=tcp -h 127.0.0.1 -P "$(port "$1")" -uroot --connect-timeout=2 -N -B -e "$2"
}

# synced waits until node n (process pid) reports itself Synced in a
# primary component.
synced() {
  local n=$1 pid=$2 i state
  for i in $(seq 1 600); do
    state=$(sql "$n" "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | awk '{print $2}' || true)
    if [ "$state" = Synced ]; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  echo "galera node $n did not reach Synced (state: ${state:-none}); its log:" >&2
  tail -40 "$dir/node$n/error.log" >&2 || true
  return 1
}

install() {
  if [ ! -f "$provider" ] || ! command -v mariadbd >/dev/null || ! command -v rsync >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq galera-4 rsync >/dev/null
  fi
}

start_node() {
  local n=$1 d=$dir/node$1 addrs="" m bootstrap=()
  for m in "${nodes[@]}"; do addrs+="127.0.0.1:$((14560 + m)),"; done
  mkdir -p "$d/data" "$d/tmp"
  cat >"$d/my.cnf" <<CNF
[mariadbd]
datadir=$d/data
tmpdir=$d/tmp
socket=$d/mariadbd.sock
pid-file=$d/mariadbd.pid
log-error=$d/error.log
bind-address=127.0.0.1
port=$(port "$n")
skip-name-resolve
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=64M
innodb_log_file_size=48M
innodb_flush_log_at_trx_commit=2
performance_schema=OFF
max_connections=400
wsrep_on=ON
wsrep_provider=$provider
wsrep_cluster_name=sqlelect
wsrep_cluster_address=gcomm://${addrs%,}
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$((14560 + n))
wsrep_provider_options=base_port=$((14560 + n));ist.recv_addr=127.0.0.1:$((14570 + n));gcache.size=64M
wsrep_sst_receive_address=127.0.0.1:$((14580 + n))
wsrep_sst_method=rsync
wsrep_slave_threads=2
CNF
  chown -R mysql "$d"
  if [ ! -d "$d/data/mysql" ]; then
    mariadb-install-db --defaults-file="$d/my.cnf" --user=mysql --auth-root-authentication-method=normal \
      --skip-test-db >"$d/install.log" 2>&1 || { cat "$d/install.log" >&2; return 1; }
  fi
  [ "$n" = 1 ] && bootstrap=(--wsrep-new-cluster)
  # Started in the background; the PID file is the server's own.
  mariadbd --defaults-file="$d/my.cnf" --user=mysql "${bootstrap[@]}" >>"$d/stdout.log" 2>&1 &
  synced "$n" $!
}

start() {
  install
  local n all=1
  for n in "${nodes[@]}"; do running "$n" || all=0; done
  if [ "$all" = 1 ]; then
    echo "galera cluster already running on ports $(port 1)-$(port 3)"
    echo "DSNs: $(dsns)"
    return 0
  fi
  stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  mkdir -p "$dir"
  chmod 755 "$dir"
  for n in "${nodes[@]}"; do start_node "$n"; done
  sql 1 "CREATE DATABASE IF NOT EXISTS test"
  echo "galera cluster of 3 nodes on 127.0.0.1:$(port 1)-$(port 3), size $(sql 1 "SHOW STATUS LIKE 'wsrep_cluster_size'" | awk '{print $2}')"
  echo "DSNs: $(dsns)"
}

stop() {
  local n pid i stopped=0
  # Joiners first, the bootstrap node last.
  for n in 3 2 1; do
    running "$n" || continue
    pid=$(cat "$dir/node$n/mariadbd.pid")
    kill "$pid"
    for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    stopped=$((stopped + 1))
  done
  echo "galera: stopped $stopped node(s)"
}

# watch_memory appends each node's resident memory (kB) to $dir/rss.log
# every two seconds until killed. Until schema version 6 a node could grow
# by 100-300 MB a second (an InnoDB purge worker looping in
# open_purge_table on the index of a virtual column) until the kernel
# killed it, and the machine's other servers with it: a node passing
# 1.5 GB has what it does recorded (record_growth) and is then killed, so
# that the suite fails on it, saying why, and nothing else does.
watch_memory() {
  local n pid rss
  while sleep 2; do
    for n in 1 2 3; do
      pid=$(cat "$dir/node$n/mariadbd.pid" 2>/dev/null) || continue
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo gone)
      echo "$(date +%T) node$n $rss" >>"$dir/rss.log"
      if [[ $rss =~ ^[0-9]+$ ]] && [ "$rss" -gt 1500000 ]; then
        record_growth "$n" >>"$dir/growth.log" 2>&1 || true
        kill -9 "$pid" 2>/dev/null || true
        echo "galera: node$n killed at $rss kB" >>"$dir/growth.log"
      fi
    done
  done
}

# record_growth writes what the nodes were doing when node $1 passed
# 1.5 GB: two backtraces of every thread of that node a second apart (gdb,
# when the machine has it), each node's threads and statements, its
# replication queues and certification index, and how much of its memory
# is anonymous (the heap) or file-backed (the gcache's mapped pages).
record_growth() {
  local n pid
  echo "galera: node$1 passed 1.5 GB of resident memory at $(date +%T)"
  pid=$(cat "$dir/node$1/mariadbd.pid" 2>/dev/null) || true
  if [ -n "$pid" ] && command -v gdb >/dev/null; then
    for n in 1 2; do
      echo "--- node$1 backtraces, $n of 2 (threads not waiting)"
      timeout 60 gdb -p "$pid" -batch -ex 'set pagination off' -ex 'thread apply all bt 12' 2>/dev/null |
        awk '/^Thread /{if (t != "" && !w) print t; t=$0; w=0; next} /futex|pthread_cond|epoll|poll \(|nanosleep|sigtimedwait|io_getevents/{w=1} {t=t "\n" $0} END {if (t != "" && !w) print t}'
      sleep 1
    done
  fi
  for n in 1 2 3; do
    pid=$(cat "$dir/node$n/mariadbd.pid" 2>/dev/null) || continue
    echo "--- node$n (pid $pid)"
    grep -E '^(Rss|Anonymous|Private_Dirty|Shared_Clean)' "/proc/$pid/smaps_rollup" 2>/dev/null || true
    timeout 5 mariadb --protocol=tcp -h 127.0.0.1 -P "$(port "$n")" -uroot --connect-timeout=2 -B -e \
      "SELECT id, user, command, time, state, LEFT(info, 300) AS info, memory_used FROM information_schema.processlist ORDER BY memory_used DESC;
       SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cert_index_size', 'wsrep_local_recv_queue', 'wsrep_local_send_queue',
         'wsrep_flow_control_paused', 'wsrep_last_committed', 'wsrep_replicated_bytes', 'wsrep_received_bytes', 'wsrep_local_state_comment',
         'Memory_used', 'Memory_used_initial');" || echo "node$n did not answer"
    ls -la "$dir/node$n/data" | grep -i gcache || true
  done
  tail -n 20 "$dir/node$1/error.log" || true
}

# memory_peaks prints each node's largest reading in $dir/rss.log.
memory_peaks() {
  awk '$3 ~ /^[0-9]+$/ && $3 > m[$2] { m[$2] = $3 } END { for (n in m) printf "%s %d MB  ", n, m[n] / 1024; print "" }' "$dir/rss.log"
}

watcher=""

ci() {
  start
  trap '[ -n "$watcher" ] && kill "$watcher" 2>/dev/null; stop || true' EXIT
  : >"$dir/rss.log"
  rm -f "$dir/growth.log"
  watch_memory &
  watcher=$!
  export SQLELECT_GALERA_DSNS
  SQLELECT_GALERA_DSNS=$(dsns)
  # The protocol suites against one node, then the cluster's own tests
  # (concurrent migrations on every node, candidates on all three nodes)
  # with the checker; the stale-write probes (fencing under replication
  # lag, the heaviest writes of the step) last.
  local rc=0 probes='TestGaleraGuardFences'
  SQLELECT_TEST_ONLY=mysql CI=true SQLELECT_MYSQL_DSN="mysql://root@tcp(127.0.0.1:$(port 1))/test" \
    go test -race -count=1 -run 'Conformance|Misuse|Guard|ConcurrentElect|History|Up|Down|Galera|Clock|Classify|TestGroup' \
    -skip "$probes" ./election/ ./migrate/ ./internal/dialect/ || rc=$?
  if [ "$rc" = 0 ]; then
    SQLELECT_TEST_ONLY=mysql CI=true SQLELECT_MYSQL_DSN="mysql://root@tcp(127.0.0.1:$(port 1))/test" \
      go test -race -count=1 -run "$probes" ./election/ || rc=$?
  fi
  kill "$watcher" 2>/dev/null || true
  watcher=""
  echo "galera: the nodes' peak resident memory: $(memory_peaks)"
  if [ -s "$dir/growth.log" ]; then cat "$dir/growth.log"; fi
  if [ "$rc" != 0 ]; then
    echo "galera: the suite failed; the nodes' last memory readings:"
    tail -n 30 "$dir/rss.log"
    { dmesg 2>/dev/null | grep -i -E 'out of memory|killed process' | tail -n 5; } || true
    exit "$rc"
  fi
  trap - EXIT
  stop
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  ci) ci ;;
  dsns) dsns ;;
  *) echo "usage: $0 start|stop|ci|dsns" >&2; exit 2 ;;
esac
