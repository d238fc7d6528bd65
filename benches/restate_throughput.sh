#!/usr/bin/env bash
# Throughput of the Restate adapter against kleene's local driver, in one sitting: a plan of
# TASKS independent no-op tasks (`"run": "true"`, no depends_on) through
# `kleene-restate run -j JOBS` with one, two and four workers, and through
# `kleene run -j JOBS` with its state on /dev/shm and on the work disk. Beside each
# configuration's times, the share of the machine's CPU that was busy while it ran: where
# one worker already keeps every core busy, more workers on the same machine cannot add
# throughput (they would on more machines). TASK_CMD replaces the no-op (`TASK_CMD="sleep
# 0.2" WORKER_JOBS=2`: calls that wait, not compute, where each worker's slots bound it).
#
# Builds release binaries, starts its own Restate server with scripts/restate-server.sh (a
# fresh data directory and its own ports, so a server already running elsewhere is left
# alone), starts seven worker processes (`kleene-restate worker`), a balancer over two of
# them and one over four others, and per round registers the lone worker or a balancer as
# the deployment (as kleene-restate/README.md does), submits the plan to a fresh channel and
# times the whole `kleene-restate run` (client start, submission, the pass, its report). The
# five configurations are interleaved round by round (the machine is shared: noise only ever
# adds) and the table gives min / median / max wall time and tasks/s at the median, then
# the server's resident memory. Everything it started is stopped and its directories
# removed on exit.
#
# Usage: bash benches/restate_throughput.sh [TASKS] [JOBS]   (ROUNDS=7 by default)
# Environment: ROUNDS, BINDIR (use the kleene and kleene-restate binaries there, unbuilt),
#   WORKER_JOBS (calls each worker runs at once, default JOBS), TASK_CMD (default `true`),
#   CALLS_PER_INVOCATION (`run --calls-per-invocation`, default 1),
#   BENCH_PORT_BASE (default 18000: ingress +80, admin +70, node +22, workers +91..+97,
#   balancers +89 (four workers) and +90 (two)).
set -euo pipefail
tasks=${1:-100}
jobs=${2:-8}
rounds=${ROUNDS:-7}
worker_jobs=${WORKER_JOBS:-$jobs}
task_cmd=${TASK_CMD:-true}
per_invocation=${CALLS_PER_INVOCATION:-1}
base=${BENCH_PORT_BASE:-18000}
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ -n "${BINDIR:-}" ]]; then
    # Binaries built elsewhere (an earlier commit's, to compare in the same sitting).
    kleene="$BINDIR/kleene" kr="$BINDIR/kleene-restate"
else
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p kleene-cli -p kleene-restate
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
        echo " \"spec\": {\"intent\": \"no-op $i\"}, \"run\": \"$task_cmd\"}$sep"
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
# Worker 1 serves alone; workers 2 and 3 behind one balancer, 4 to 7 behind another.
for w in 1 2 3 4 5 6 7; do
    mkdir -p "$work/w$w"
    (cd "$work/w$w" && exec "$kr" worker --listen "127.0.0.1:$((base + 90 + w))" \
        --jobs "$worker_jobs" --dir "$work/w$w" 2>/dev/null) &
    pids+=($!)
done
"$kr" balance --listen "127.0.0.1:$((base + 90))" \
    --backend "http://127.0.0.1:$((base + 92))" --backend "http://127.0.0.1:$((base + 93))" \
    2>/dev/null &
pids+=($!)
"$kr" balance --listen "127.0.0.1:$((base + 89))" \
    --backend "http://127.0.0.1:$((base + 94))" --backend "http://127.0.0.1:$((base + 95))" \
    --backend "http://127.0.0.1:$((base + 96))" --backend "http://127.0.0.1:$((base + 97))" \
    2>/dev/null &
pids+=($!)
for p in 89 90 91 92 93 94 95 96 97; do wait_port $((base + p)); done

now() { date +%s%N; }
declare -A times busy
# The machine's busy and total CPU ticks so far.
ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
# One timed run of configuration $1; prints nothing, records milliseconds and busy share.
measure() {
    local cfg=$1 round=$2 t0 t1 b0 a0 b1 a1
    read -r b0 a0 < <(ticks)
    case $cfg in
        restate1 | restate2 | restate4)
            local endpoint="http://127.0.0.1:$((base + 91))"
            [[ $cfg == restate2 ]] && endpoint="http://127.0.0.1:$((base + 90))"
            [[ $cfg == restate4 ]] && endpoint="http://127.0.0.1:$((base + 89))"
            "$kr" register --endpoint "$endpoint" 2>/dev/null
            t0=$(now)
            # No cache: every round makes every call (the plan is the same each round).
            "$kr" run "$work/plan/plan.json" --channel "bench-$cfg-$round-$$" -j "$jobs" --json --no-cache \
                --calls-per-invocation "$per_invocation" \
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
    read -r b1 a1 < <(ticks)
    busy[$cfg]+="$(((b1 - b0) * 100 / (a1 - a0 > 0 ? a1 - a0 : 1))) "
}

echo "load before: $(uptime)"
configs=(restate1 restate2 restate4 shm disk)
for ((r = 0; r < rounds; r++)); do
    for cfg in "${configs[@]}"; do measure "$cfg" "$r"; done
done
echo "load after:  $(uptime)"

label() {
    case $1 in
        restate1) echo "Restate, 1 worker (-j $jobs, worker --jobs $worker_jobs, $per_invocation a call)" ;;
        restate2) echo "Restate, 2 workers behind the balancer" ;;
        restate4) echo "Restate, 4 workers behind the balancer" ;;
        shm) echo "kleene run -j $jobs, state on /dev/shm" ;;
        disk) echo "kleene run -j $jobs, state on the work disk" ;;
    esac
}
echo
echo "$tasks independent tasks (\`$task_cmd\`), $rounds interleaved rounds, wall time of the whole run:"
printf '| %-48s | %8s | %8s | %8s | %12s | %9s |\n' configuration "min ms" "median" "max ms" "tasks/s (med)" "CPU busy"
printf '| %-48s | %8s | %8s | %8s | %12s | %9s |\n' --- ---: ---: ---: ---: ---:
for cfg in "${configs[@]}"; do
    # shellcheck disable=SC2086
    read -r min med max < <(printf '%s\n' ${times[$cfg]} | sort -n |
        awk '{ v[NR] = $1 } END { print v[1], v[int((NR + 1) / 2)], v[NR] }')
    # shellcheck disable=SC2086
    cpu=$(printf '%s\n' ${busy[$cfg]} | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    printf '| %-48s | %8d | %8d | %8d | %12.0f | %8s%% |\n' "$(label "$cfg")" "$min" "$med" "$max" \
        "$(awk -v t="$tasks" -v m="$med" 'BEGIN { print t * 1000 / m }')" "$cpu"
done
echo
# Which worker served which channels: the lone worker the restate1 runs, the other two the
# restate2 runs (each worker keeps a directory per channel it ran calls of).
for w in 1 2 3 4 5 6 7; do
    echo "worker $w ran calls of $(find "$work/w$w/runs" -mindepth 1 -maxdepth 1 2>/dev/null |
        sed 's/.*bench-\(restate[124]\).*/\1/' | sort | uniq -c | tr '\n' ' ')"
done
echo "server resident memory after $((rounds * 2)) runs: $(($(ps -o rss= -p "$server_pid") / 1024)) MB"
