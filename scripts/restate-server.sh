#!/usr/bin/env bash
# Installs, starts and stops a single-node Restate server on loopback for kleene's Restate
# adapter (kleene-restate/): its tests, and users trying it on one machine.
#
#   scripts/restate-server.sh install   # npm install @restatedev/restate-server into the cache
#   scripts/restate-server.sh start     # start on loopback, telemetry off, wait for health
#   scripts/restate-server.sh stop      # stop the server this script started
#   scripts/restate-server.sh status    # healthy or not, and the URLs
#   scripts/restate-server.sh env       # the URLs as shell assignments (eval "$(… env)")
#   scripts/restate-server.sh cluster N # start N nodes on loopback (replicated log and
#                                       # metadata, replication 2, one partition)
#   scripts/restate-server.sh cluster-env        # the cluster's URLs, comma-separated
#   scripts/restate-server.sh node-stop I        # stop node I of the cluster (1-based)
#   scripts/restate-server.sh node-start I       # start it again on its data
#   scripts/restate-server.sh cluster-stop       # stop every node of the cluster
#
# Environment (all optional):
#   KLEENE_RESTATE_CACHE   install directory     (default ~/.cache/kleene-restate)
#   KLEENE_RESTATE_DATA    server data directory (default $KLEENE_RESTATE_CACHE/data); a
#                          restart on the same directory keeps every invocation and state
#   KLEENE_RESTATE_INGRESS ingress port (8080), KLEENE_RESTATE_ADMIN admin port (9070),
#   KLEENE_RESTATE_NODE    node-to-node port (5122)
#   KLEENE_RESTATE_PARTITIONS  partitions of a new data directory (1)
#
# Cluster nodes keep their data under $KLEENE_RESTATE_DATA-cluster/nI and listen on
# ingress 28080+I, admin 29070+I, node 25122+I (KLEENE_RESTATE_CLUSTER_PORTS shifts all three).
#
# The server is BSL 1.1 (see node_modules/@restatedev/restate-server-linux-x64/LICENSE).
set -euo pipefail

VERSION=1.7.12
CACHE=${KLEENE_RESTATE_CACHE:-$HOME/.cache/kleene-restate}
DATA=${KLEENE_RESTATE_DATA:-$CACHE/data}
INGRESS_PORT=${KLEENE_RESTATE_INGRESS:-8080}
ADMIN_PORT=${KLEENE_RESTATE_ADMIN:-9070}
NODE_PORT=${KLEENE_RESTATE_NODE:-5122}
INGRESS_URL="http://127.0.0.1:$INGRESS_PORT"
ADMIN_URL="http://127.0.0.1:$ADMIN_PORT"
PIDFILE="$DATA/restate-server.pid"
LOG="$DATA/restate-server.log"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) PLATFORM=linux-x64 ;;
  Linux-aarch64) PLATFORM=linux-arm64 ;;
  Darwin-arm64) PLATFORM=darwin-arm64 ;;
  Darwin-x86_64) PLATFORM=darwin-x64 ;;
  *) echo "restate-server.sh: no Restate server package for $(uname -s)-$(uname -m)" >&2; exit 2 ;;
esac
BIN="$CACHE/node_modules/@restatedev/restate-server-$PLATFORM/bin/restate-server"

healthy() {
  curl -fsS -o /dev/null --max-time 2 "$ADMIN_URL/health" 2>/dev/null &&
    curl -fsS -o /dev/null --max-time 2 "$INGRESS_URL/restate/health" 2>/dev/null
}

install() {
  if [[ -x "$BIN" ]] && "$BIN" --version 2>/dev/null | grep -q "$VERSION"; then
    return 0
  fi
  command -v npm >/dev/null || { echo "restate-server.sh: npm is needed to install the server" >&2; exit 2; }
  mkdir -p "$CACHE"
  # --ignore-scripts: the package's only install script is a usage ping.
  npm install --prefix "$CACHE" --no-audit --no-fund --ignore-scripts --loglevel=error \
    "@restatedev/restate-server@$VERSION" >&2
  [[ -x "$BIN" ]] || { echo "restate-server.sh: npm installed no binary at $BIN" >&2; exit 2; }
}

start() {
  install
  if healthy; then
    echo "restate-server.sh: a server already answers on $ADMIN_URL" >&2
    print_env
    return 0
  fi
  mkdir -p "$DATA" "$DATA/tmp"
  # Loopback only, telemetry off, its own data directory, one partition and a small
  # RocksDB budget: a test server on a shared machine. One partition, not four: on two
  # cores the server spent about a quarter less CPU per task call and 100 no-op tasks ran
  # about a quarter faster (each call crosses partitions otherwise, every partition a
  # thread of its own). Only a new data directory takes a new count. Its temporary files
  # (an invoker-ID directory at every start and leadership change) go under its data, not
  # into the machine's $TMPDIR, where nothing removed them.
  RESTATE_DISABLE_TELEMETRY=true \
  RESTATE_INGRESS__BIND_ADDRESS="127.0.0.1:$INGRESS_PORT" \
  RESTATE_ADMIN__BIND_ADDRESS="127.0.0.1:$ADMIN_PORT" \
  RESTATE_ADVERTISED_ADDRESS="http://127.0.0.1:$NODE_PORT/" \
  RESTATE_DEFAULT_NUM_PARTITIONS=${KLEENE_RESTATE_PARTITIONS:-1} \
  RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE=256MiB \
  RESTATE_NODE_NAME=kleene-local RESTATE_LOG_DISABLE_ANSI_CODES=true \
  TMPDIR="$DATA/tmp" \
  nohup "$BIN" --no-logo --listen-mode tcp --base-dir "$DATA" \
    --bind-address "127.0.0.1:$NODE_PORT" >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 150); do
    if healthy; then print_env; return 0; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "restate-server.sh: the server exited; its log ($LOG) ends:" >&2
      tail -20 "$LOG" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "restate-server.sh: the server did not become healthy in 30 s; see $LOG" >&2
  exit 1
}

stop() {
  [[ -f "$PIDFILE" ]] || { echo "restate-server.sh: no server started from $DATA" >&2; return 0; }
  local pid; pid=$(cat "$PIDFILE")
  # SIGKILL_SERVER=1 kills it outright (the crash tests); otherwise a clean shutdown.
  if [[ "${SIGKILL_SERVER:-0}" == 1 ]]; then kill -9 "$pid" 2>/dev/null || true
  else kill "$pid" 2>/dev/null || true; fi
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

# --- a cluster on loopback ---------------------------------------------------------------
CDATA="$DATA-cluster"
SHIFT=${KLEENE_RESTATE_CLUSTER_PORTS:-0}
c_ingress() { echo $((28080 + SHIFT + $1)); }
c_admin() { echo $((29070 + SHIFT + $1)); }
c_node() { echo $((25122 + SHIFT + $1)); }
c_count() { cat "$CDATA/nodes" 2>/dev/null || echo 0; }

c_healthy() {
  curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$(c_admin "$1")/health" 2>/dev/null
}

# Starts node $1 of a cluster of $2 nodes on its data directory (made on first start).
node_start() {
  local i=$1 n=$2 dir="$CDATA/n$1" addresses="" k
  for k in $(seq 1 "$n"); do
    addresses="$addresses${addresses:+,}\"http://127.0.0.1:$(c_node "$k")\""
  done
  mkdir -p "$dir/tmp"
  # Only the first node provisions the cluster, once; the others join it.
  local provision=false
  [[ "$i" == 1 ]] && provision=true
  RESTATE_DISABLE_TELEMETRY=true \
  RESTATE_CLUSTER_NAME=kleene-cluster \
  RESTATE_NODE_NAME="n$i" \
  RESTATE_AUTO_PROVISION=$provision \
  RESTATE_METADATA_CLIENT__ADDRESSES="[$addresses]" \
  RESTATE_DEFAULT_REPLICATION=2 \
  RESTATE_BIFROST__DEFAULT_PROVIDER=replicated \
  RESTATE_INGRESS__BIND_ADDRESS="127.0.0.1:$(c_ingress "$i")" \
  RESTATE_ADMIN__BIND_ADDRESS="127.0.0.1:$(c_admin "$i")" \
  RESTATE_ADVERTISED_ADDRESS="http://127.0.0.1:$(c_node "$i")/" \
  RESTATE_DEFAULT_NUM_PARTITIONS=1 \
  RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE=128MiB \
  RESTATE_LOG_DISABLE_ANSI_CODES=true \
  TMPDIR="$dir/tmp" \
  nohup "$BIN" --no-logo --listen-mode tcp --base-dir "$dir" \
    --bind-address "127.0.0.1:$(c_node "$i")" >>"$dir/restate-server.log" 2>&1 &
  echo $! >"$dir/restate-server.pid"
}

# Waits until every running node's admin answers and the cluster's ingress serves.
cluster_wait() {
  local n; n=$(c_count)
  for _ in $(seq 1 300); do
    local ok=1 k
    for k in $(seq 1 "$n"); do
      [[ -f "$CDATA/n$k/restate-server.pid" ]] || continue
      c_healthy "$k" || ok=0
    done
    # The ingress answers once a partition has a leader.
    if [[ $ok == 1 ]] && curl -fsS -o /dev/null --max-time 2 \
      "http://127.0.0.1:$(c_ingress 1)/restate/health" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "restate-server.sh: the cluster did not become healthy in 60 s; see $CDATA/n*/restate-server.log" >&2
  exit 1
}

cluster() {
  local n=${1:-3}
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 ]] || { echo "restate-server.sh: cluster N: N is a count of nodes" >&2; exit 2; }
  install
  mkdir -p "$CDATA"
  echo "$n" >"$CDATA/nodes"
  local k
  for k in $(seq 1 "$n"); do
    c_healthy "$k" || node_start "$k" "$n"
  done
  # Every node must be up to serve: the first waits for the others to provision.
  for _ in $(seq 1 300); do
    local up=0
    for k in $(seq 1 "$n"); do c_healthy "$k" && up=$((up + 1)); done
    [[ $up == "$n" ]] && break
    sleep 0.2
  done
  cluster_wait
  cluster_env
}

node_stop() {
  local pidfile="$CDATA/n$1/restate-server.pid"
  [[ -f "$pidfile" ]] || return 0
  local pid; pid=$(cat "$pidfile")
  if [[ "${SIGKILL_SERVER:-0}" == 1 ]]; then kill -9 "$pid" 2>/dev/null || true
  else kill "$pid" 2>/dev/null || true; fi
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

cluster_stop() {
  local k
  for k in $(seq 1 "$(c_count)"); do node_stop "$k"; done
}

cluster_env() {
  local n ingress="" admin="" k
  n=$(c_count)
  for k in $(seq 1 "$n"); do
    ingress="$ingress${ingress:+,}http://127.0.0.1:$(c_ingress "$k")"
    admin="$admin${admin:+,}http://127.0.0.1:$(c_admin "$k")"
  done
  echo "RESTATE_INGRESS_URL=$ingress"
  echo "RESTATE_ADMIN_URL=$admin"
}

print_env() {
  echo "RESTATE_INGRESS_URL=$INGRESS_URL"
  echo "RESTATE_ADMIN_URL=$ADMIN_URL"
}

case "${1:-}" in
  install) install; echo "$BIN" ;;
  start) start ;;
  stop) stop ;;
  status) if healthy; then echo "healthy"; print_env; else echo "not running"; exit 1; fi ;;
  env) print_env ;;
  cluster) cluster "${2:-3}" ;;
  cluster-env) cluster_env ;;
  cluster-stop) cluster_stop ;;
  node-stop) node_stop "${2:?node-stop I}" ;;
  node-start) install; node_start "${2:?node-start I}" "$(c_count)"; cluster_wait ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
