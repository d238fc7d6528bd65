#!/usr/bin/env bash
# Throughput of the Restate adapter against kleene's local driver, in one sitting: a plan of
# TASKS independent no-op tasks (`"run": "true"`, no depends_on) through
# `kleene-restate run -j JOBS` with one worker and with two workers, and through
# `kleene run -j JOBS` with its state on /dev/shm and on the work disk.
#
# Builds release binaries, starts its own Restate server with scripts/restate-server.sh (a
# fresh data directory and its own ports, so a server already running elsewhere is left
# alone), starts three worker processes (`kleene-restate worker`) and a balancer over two of
# them, and per round registers either the lone worker or the balancer as the deployment
# (as kleene-restate/README.md does), submits the plan to a fresh channel and times the
# whole `kleene-restate run` (client start, submission, the pass, its report). The four
# configurations are interleaved round by round (the machine is shared: noise only ever
# adds) and the table gives min / median / max wall time and tasks/s at the median, then
# the server's resident memory. Everything it started is stopped and its directories
# removed on exit.
#
# Usage: bash benches/restate_throughput.sh [TASKS] [JOBS]   (ROUNDS=7 by default)
# Environment: ROUNDS, BINDIR (use the kleene and kleene-restate binaries there, unbuilt), WORKER_JOBS (calls each worker runs at once, default JOBS),
#   BENCH_PORT_BASE (default 18000: ingress +80, admin +70, node +22, workers +91..+93,
#   balancer +90).
set -euo pipefail
tasks=${1:-100}
jobs=${2:-8}
rounds=${ROUNDS:-7}
worker_jobs=${WORKER_JOBS:-$jobs}
base=${BENCH_PORT_BASE:-18000}
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ -n "${BINDIR:-}" ]]; then
    # Binaries built elsewhere (an earlier commit's, to compare in the same sitting).
    kleene="$BINDIR/kleene" kr="$BINDIR/kleene-restate"
else
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p kleene -p kleene-restate
    target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    kleene="$target/release/kleene" kr="$target/release/kleene-restate"
fi

work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/kleene-restate-bench.XXXXXX)
export KLEENE_RESTATE_DATA="$work/server"
export KLEENE_RESTATE_INGRESS=$((base + 80)) KLEENE_RESTATE_ADMIN=$((base + 70))
export KLEENE_RESTATE_NODE=$((base + 22))
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    "$root/scripts/restate-server.sh" stop >/dev/null 2>&1 || true
    rm -rf "$work" "$shm"
}
trap cleanup EXIT

# In a directory of its own: a plan carries the files beside it (at most 8 MiB).
mkdir -p "$work/plan"
{
    echo '{"tasks": ['
    for ((i = 0; i < tasks; i++)); do
        sep=','
        ((i == tasks - 1)) && sep=''
        echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\","
        echo " \"spec\": {\"intent\": \"no-op $i\"}, \"run\": \"true\"}$sep"
    done
    echo ']}'
} >"$work/plan/plan.json"

"$root/scripts/restate-server.sh" start >/dev/null
eval "$("$root/scripts/restate-server.sh" env)"
export RESTATE_INGRESS_URL RESTATE_ADMIN_URL
server_pid=$(cat "$KLEENE_RESTATE_DATA/restate-server.pid")

wait_port() {
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "restate_throughput.sh: nothing listens on port $1" >&2
    exit 1
}
# Worker 1 serves alone; workers 2 and 3 serve behind the balancer.
for w in 1 2 3; do
    mkdir -p "$work/w$w"
    (cd "$work/w$w" && exec "$kr" worker --listen "127.0.0.1:$((base + 90 + w))" \
        --jobs "$worker_jobs" --dir "$work/w$w" 2>/dev/null) &
    pids+=($!)
done
"$kr" balance --listen "127.0.0.1:$((base + 90))" \
    --backend "http://127.0.0.1:$((base + 92))" --backend "http://127.0.0.1:$((base + 93))" \
    2>/dev/null &
pids+=($!)
for p in 90 91 92 93; do wait_port $((base + p)); done

now() { date +%s%N; }
declare -A times
# One timed run of configuration $1; prints nothing, records milliseconds.
measure() {
    local cfg=$1 round=$2 t0 t1
    case $cfg in
        restate1 | restate2)
            local endpoint="http://127.0.0.1:$((base + 91))"
            [[ $cfg == restate2 ]] && endpoint="http://127.0.0.1:$((base + 90))"
            "$kr" register --endpoint "$endpoint" 2>/dev/null
            t0=$(now)
            # No cache: every round makes every call (the plan is the same each round).
            "$kr" run "$work/plan/plan.json" --channel "bench-$cfg-$round-$$" -j "$jobs" --json --no-cache \
                >"$work/out.json" || {
                echo "restate_throughput.sh: $cfg round $round did not accept every task:" >&2
                cat "$work/out.json" >&2
                exit 1
            }
            t1=$(now)
            ;;
        disk | shm)
            local state="$work/st"
            [[ $cfg == shm ]] && state="$shm/st"
            rm -rf "$state" "$state-cache"
            t0=$(now)
            (cd "$work/plan" && "$kleene" run plan.json --state "$state" -j "$jobs" >/dev/null)
            t1=$(now)
            ;;
    esac
    times[$cfg]+="$(((t1 - t0) / 1000000)) "
}

echo "load before: $(uptime)"
configs=(restate1 restate2 shm disk)
for ((r = 0; r < rounds; r++)); do
    for cfg in "${configs[@]}"; do measure "$cfg" "$r"; done
done
echo "load after:  $(uptime)"

label() {
    case $1 in
        restate1) echo "Restate, 1 worker (-j $jobs, worker --jobs $worker_jobs)" ;;
        restate2) echo "Restate, 2 workers behind the balancer" ;;
        shm) echo "kleene run -j $jobs, state on /dev/shm" ;;
        disk) echo "kleene run -j $jobs, state on the work disk" ;;
    esac
}
echo
echo "$tasks independent no-op tasks, $rounds interleaved rounds, wall time of the whole run:"
printf '| %-48s | %8s | %8s | %8s | %12s |\n' configuration "min ms" "median" "max ms" "tasks/s (med)"
printf '| %-48s | %8s | %8s | %8s | %12s |\n' --- ---: ---: ---: ---:
for cfg in "${configs[@]}"; do
    # shellcheck disable=SC2086
    read -r min med max < <(printf '%s\n' ${times[$cfg]} | sort -n |
        awk '{ v[NR] = $1 } END { print v[1], v[int((NR + 1) / 2)], v[NR] }')
    printf '| %-48s | %8d | %8d | %8d | %12.0f |\n' "$(label "$cfg")" "$min" "$med" "$max" \
        "$(awk -v t="$tasks" -v m="$med" 'BEGIN { print t * 1000 / m }')"
done
echo
# Which worker served which channels: the lone worker the restate1 runs, the other two the
# restate2 runs (each worker keeps a directory per channel it ran calls of).
for w in 1 2 3; do
    echo "worker $w ran calls of $(find "$work/w$w/runs" -mindepth 1 -maxdepth 1 2>/dev/null |
        sed 's/.*bench-\(restate[12]\).*/\1/' | sort | uniq -c | tr '\n' ' ')"
done
echo "server resident memory after $((rounds * 2)) runs: $(($(ps -o rss= -p "$server_pid") / 1024)) MB"
