#!/usr/bin/env bash
# Whether the Restate adapter's cost per task grows with the plan: plans of SIZES independent
# no-op tasks (`"run": "true"`), each through one `kleene-restate worker` (`-j JOBS`), one
# after the other in one sitting, each on a fresh channel. Prints the wall time of each whole
# `kleene-restate run`, its time per task, the CPU time the server and the worker (which also
# serves the channel object) spent on it per task, the ratio of the largest plan's time per
# task to the smallest's, and the server's peak resident memory (VmHWM) after each run.
#
# Builds release binaries, starts its own Restate server with scripts/restate-server.sh (a
# fresh data directory and its own ports) and one worker; stops both and removes their
# directories on exit.
#
# Usage: bash benches/restate_scaling.sh            (SIZES="1000 3000 8000", JOBS=8)
# Environment: SIZES, JOBS, BINDIR (use the kleene-restate binary there, unbuilt; one that
#   knows `run --no-cache`),
#   BENCH_PORT_BASE (default 18100: ingress +80, admin +70, node +22, worker +91).
set -euo pipefail
sizes=${SIZES:-1000 3000 8000}
jobs=${JOBS:-8}
base=${BENCH_PORT_BASE:-18100}
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ -n "${BINDIR:-}" ]]; then
    kr="$BINDIR/kleene-restate"
else
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p kleene-restate
    target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    kr="$target/release/kleene-restate"
fi

work=$(mktemp -d)
export KLEENE_RESTATE_DATA="$work/server"
export KLEENE_RESTATE_INGRESS=$((base + 80)) KLEENE_RESTATE_ADMIN=$((base + 70))
export KLEENE_RESTATE_NODE=$((base + 22))
worker=""
cleanup() {
    [[ -n "$worker" ]] && { kill "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true; }
    "$root/scripts/restate-server.sh" stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$root/scripts/restate-server.sh" start >/dev/null
eval "$("$root/scripts/restate-server.sh" env)"
export RESTATE_INGRESS_URL RESTATE_ADMIN_URL
server_pid=$(cat "$KLEENE_RESTATE_DATA/restate-server.pid")
mkdir -p "$work/w"
(cd "$work/w" && exec "$kr" worker --listen "127.0.0.1:$((base + 91))" --jobs "$jobs" \
    --dir "$work/w" 2>/dev/null) &
worker=$!
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$((base + 91))") 2>/dev/null && break
    sleep 0.05
done
"$kr" register --endpoint "http://127.0.0.1:$((base + 91))" 2>/dev/null

echo "load before: $(uptime)"
# CPU milliseconds process $1 has spent so far (user and system).
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat"; }
printf '| %8s | %10s | %9s | %10s | %14s | %14s | %16s |\n' tasks "wall ms" "tasks/s" "ms / task" \
    "server CPU/task" "worker CPU/task" "server peak MB"
printf '| %8s | %10s | %9s | %10s | %14s | %14s | %16s |\n' ---: ---: ---: ---: ---: ---: ---:
first="" last=""
for n in $sizes; do
    # In a directory of its own: a plan carries the files beside it.
    mkdir -p "$work/p$n"
    {
        echo '{"tasks": ['
        for ((i = 0; i < n; i++)); do
            sep=','
            ((i == n - 1)) && sep=''
            echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\","
            echo " \"spec\": {\"intent\": \"no-op $i\"}, \"run\": \"true\"}$sep"
        done
        echo ']}'
    } >"$work/p$n/plan.json"
    s0=$(cpu_ms "$server_pid") w0=$(cpu_ms "$worker")
    t0=$(date +%s%N)
    # No cache: the plans share their first tasks, which a cache would reuse.
    "$kr" run "$work/p$n/plan.json" --channel "scale-$n-$$" -j "$jobs" --json --no-cache \
        >"$work/out.json" || {
        echo "restate_scaling.sh: the $n-task plan did not accept every task:" >&2
        head -c 2000 "$work/out.json" >&2
        exit 1
    }
    t1=$(date +%s%N)
    s1=$(cpu_ms "$server_pid") w1=$(cpu_ms "$worker")
    ms=$(((t1 - t0) / 1000000))
    per=$(awk -v m="$ms" -v n="$n" 'BEGIN { printf "%.2f", m / n }')
    peak=$(awk '/VmHWM/ { print int($2 / 1024) }' "/proc/$server_pid/status")
    printf '| %8d | %10d | %9.0f | %10s | %14.2f | %14.2f | %16s |\n' "$n" "$ms" \
        "$(awk -v m="$ms" -v n="$n" 'BEGIN { print n * 1000 / m }')" "$per" \
        "$(awk -v c=$((s1 - s0)) -v n="$n" 'BEGIN { print c / n }')" \
        "$(awk -v c=$((w1 - w0)) -v n="$n" 'BEGIN { print c / n }')" "$peak"
    [[ -z "$first" ]] && first=$per
    last=$per
done
echo "load after:  $(uptime)"
echo "time per task, largest plan / smallest: $(awk -v a="$last" -v b="$first" 'BEGIN { printf "%.2f", a / b }')"
