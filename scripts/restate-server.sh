#!/usr/bin/env bash
# Installs, starts and stops a single-node Restate server on loopback for kleene's Restate
# adapter (kleene-restate/): its tests, and users trying it on one machine.
#
#   scripts/restate-server.sh install   # npm install @restatedev/restate-server into the cache
#   scripts/restate-server.sh start     # start on loopback, telemetry off, wait for health
#   scripts/restate-server.sh stop      # stop the server this script started
#   scripts/restate-server.sh status    # healthy or not, and the URLs
#   scripts/restate-server.sh env       # the URLs as shell assignments (eval "$(… env)")
#
# Environment (all optional):
#   KLEENE_RESTATE_CACHE   install directory     (default ~/.cache/kleene-restate)
#   KLEENE_RESTATE_DATA    server data directory (default $KLEENE_RESTATE_CACHE/data); a
#                          restart on the same directory keeps every invocation and state
#   KLEENE_RESTATE_INGRESS ingress port (8080), KLEENE_RESTATE_ADMIN admin port (9070),
#   KLEENE_RESTATE_NODE    node-to-node port (5122)
#   KLEENE_RESTATE_PARTITIONS  partitions of a new data directory (1)
#
# The server is BSL 1.1 (see node_modules/@restatedev/restate-server-linux-x64/LICENSE).
# This is one node with a local log; several nodes need a replicated log (at least 3 nodes).
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
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
