#!/bin/sh
# Wall time of `kleene run -j 2` on a plan of 200 independent no-op tasks against
# `xargs -P 2` running the same 200 commands two at a time (`sh -c true`, as kleene runs each
# command). kleene runs with its state directory on the work disk (one fdatasync per group
# commit, the journal's durability) and on /dev/shm (the same work without the sync latency).
# The disk's floor, timed in the same rounds, is `xargs -P` with one synchronous write per task
# running beside it on the same disk (dd oflag=dsync): every call's reservation is made
# durable before its command runs, and no design with one durable commit per call can do
# better than running those commits wholly alongside the commands.
# Needs a POSIX shell, xargs and GNU date (%N).
# Usage: sh benches/cli_parallel.sh [TASKS] [JOBS]   (ROUNDS=21 by default)
set -eu
tasks=${1:-200}
jobs=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
. "$root/benches/cli_stats.sh"
work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/kleene-bench.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
{
    echo '{"inputs": [], "tasks": ['
    i=0
    while [ "$i" -lt "$tasks" ]; do
        sep=','
        [ "$i" -eq $((tasks - 1)) ] && sep=''
        echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\","
        echo " \"spec\": {\"intent\": \"no-op $i\"}, \"run\": \"true\"}$sep"
        i=$((i + 1))
    done
    echo ']}'
} > "$work/plan.json"
i=0
while [ "$i" -lt "$tasks" ]; do echo true; i=$((i + 1)); done > "$work/commands"
"$kleene" validate "$work/plan.json" | head -n 1
cd "$work"
# The machine is shared and noisy: interleave the commands round by round and compare their
# best times (noise only ever adds).
now() { date +%s%N; }
best_xargs=0 best_disk=0 best_shm=0 best_base=0 best_floor=0
rounds_shm='' rounds_disk='' rounds_base='' rounds_floor='' rounds_floor_xargs=''
round=0
while [ "$round" -lt "${ROUNDS:-21}" ]; do
    t0=$(now); xargs -P "$jobs" -I CMD sh -c CMD < commands; t1=$(now)
    x=$((t1 - t0))
    # Each run's clock starts after the last run's state is removed: the removal (an `rm`
    # process and its unlinks) is not part of a run.
    # The run's cache (STATE-cache) goes with its state: these time calls, not reuse.
    rm -rf st st-cache; t0=$(now); "$kleene" run plan.json --state st -j "$jobs" > /dev/null; t1=$(now)
    d=$((t1 - t0))
    rm -rf "$shm/st" "$shm/st-cache"; t0=$(now)
    "$kleene" run plan.json --state "$shm/st" -j "$jobs" > /dev/null; t1=$(now)
    m=$((t1 - t0))
    rm -f sync.probe; tf=$(now)
    dd if=/dev/zero of=sync.probe bs=400 count="$tasks" oflag=dsync status=none &
    xargs -P "$jobs" -I CMD sh -c CMD < commands
    wait
    tg=$(now)
    f=$((tg - tf))
    rounds_shm="$rounds_shm $(ratio "$m" "$x")"
    rounds_disk="$rounds_disk $(ratio "$d" "$x")"
    rounds_floor="$rounds_floor $(ratio "$d" "$f")"
    rounds_floor_xargs="$rounds_floor_xargs $(ratio "$f" "$x")"
    best_floor=$(best "$best_floor" "$f")
    # KLEENE_BASELINE=/path/to/an/older/kleene: that binary on /dev/shm in the same rounds.
    if [ -n "${KLEENE_BASELINE:-}" ]; then
        rm -rf "$shm/st" "$shm/st-cache"; t4=$(now)
        "$KLEENE_BASELINE" run plan.json --state "$shm/st" -j "$jobs" > /dev/null; t5=$(now)
        b=$((t5 - t4))
        best_base=$(best "$best_base" "$b")
        rounds_base="$rounds_base $(ratio "$b" "$x")"
    fi
    best_xargs=$(best "$best_xargs" "$x")
    best_disk=$(best "$best_disk" "$d")
    best_shm=$(best "$best_shm" "$m")
    round=$((round + 1))
done
echo "best of ${ROUNDS:-21} interleaved rounds, $tasks tasks, $jobs jobs:" \
    "xargs -P $jobs $((best_xargs / 1000000)) ms," \
    "kleene -j $jobs (state on disk) $((best_disk / 1000000)) ms," \
    "kleene -j $jobs (state on /dev/shm) $((best_shm / 1000000)) ms"
echo "ratio kleene/xargs: $(echo "$best_disk $best_xargs" | awk '{ printf "%.2f", $1 / $2 }') (disk)," \
    "$(echo "$best_shm $best_xargs" | awk '{ printf "%.2f", $1 / $2 }') (/dev/shm)"
echo "paired rounds, kleene / xargs (min / median / max): /dev/shm $(spread "$rounds_shm")," \
    "disk $(spread "$rounds_disk")"
if [ -n "${KLEENE_BASELINE:-}" ]; then
    echo "baseline $KLEENE_BASELINE (/dev/shm): $((best_base / 1000000)) ms (paired rounds $(spread "$rounds_base"))," \
        "ratio $(echo "$best_base $best_xargs" | awk '{ printf "%.2f", $1 / $2 }')"
fi
echo "the disk's floor: xargs -P $jobs with $tasks synchronous writes beside it" \
    "$((best_floor / 1000000)) ms, $(ratio "$best_floor" "$best_xargs") x xargs alone" \
    "(paired rounds $(spread "$rounds_floor_xargs")); kleene (state on disk) / floor:" \
    "$(ratio "$best_disk" "$best_floor") (paired rounds $(spread "$rounds_floor"))"
echo "result: $tasks no-ops -j $jobs / xargs -P $jobs, /dev/shm|$(ratio "$best_shm" "$best_xargs") (rounds $(spread "$rounds_shm"))|1.2"
echo "result: $tasks no-ops -j $jobs / xargs -P $jobs, state on ${DISK_NAME:-the work disk}|$(ratio "$best_disk" "$best_xargs") (rounds $(spread "$rounds_disk"))|1.2"
echo "result: $tasks no-ops -j $jobs / (xargs -P $jobs with one fdatasync per task beside it), state on ${DISK_NAME:-the work disk}|$(ratio "$best_disk" "$best_floor") (rounds $(spread "$rounds_floor"))|1.2"
echo "result: the disk's floor itself: (xargs -P $jobs with one fdatasync per task beside it) / xargs -P $jobs|$(ratio "$best_floor" "$best_xargs") (rounds $(spread "$rounds_floor_xargs"))|-"
