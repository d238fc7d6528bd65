#!/bin/sh
# Wall time of `kleene run` on a 200-task plan of no-op commands against a shell script that
# runs the same 200 commands in order (`sh -c true`, as kleene runs each command).
# kleene runs three times: with its state directory on the work disk (one fdatasync per task,
# the journal's durability), on /dev/shm (the same work without the disk's sync latency), and
# on /dev/shm with KLEENE_CONTAINMENT=process-group (what the PID namespace costs on top).
# The disk's floor is the script plus one synchronous write per task (dd oflag=dsync), timed
# in the same rounds: a call's reservation is durable before its command runs.
# Needs a POSIX shell and GNU date (%N); shows hyperfine's statistics too when it is installed.
# A run of one no-op task against one `sh -c true`, in the same rounds, gives the fixed cost
# of a run (starting kleene and its contained host, the state directory, the closing records).
# KLEENE_BASELINE=/path/to/an/older/kleene also times that binary on /dev/shm in the same
# rounds, so a change is measured against what it replaced under the same load.
# Usage: sh benches/cli_run.sh [TASKS]   (ROUNDS=21 by default)
set -eu
tasks=${1:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
. "$root/benches/cli_stats.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    echo '{"inputs": [], "tasks": ['
    i=0
    while [ "$i" -lt "$tasks" ]; do
        after=''
        [ "$i" -gt 0 ] && after="\"t$((i - 1))\""
        sep=','
        [ "$i" -eq $((tasks - 1)) ] && sep=''
        echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\","
        echo " \"spec\": {\"intent\": \"no-op $i\"}, \"depends_on\": [$after], \"run\": \"true\"}$sep"
        i=$((i + 1))
    done
    echo ']}'
} > "$work/plan.json"
{
    i=0
    while [ "$i" -lt "$tasks" ]; do
        echo "sh -c true"
        i=$((i + 1))
    done
} > "$work/script.sh"
echo '{"inputs": [], "tasks": [{"id": "t0", "kind": {"lane": "config"}, "owner": "shell",
 "spec": {"intent": "no-op"}, "depends_on": [], "run": "true"}]}' > "$work/one.json"
"$kleene" validate "$work/plan.json" | head -n 1
cd "$work"
shm=$(mktemp -d /dev/shm/kleene-bench.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
# The machine is shared and noisy: interleave the three commands round by round and compare
# their best times (noise only ever adds), then show hyperfine's view for the spread.
now() { date +%s%N; }
best_script=0 best_disk=0 best_shm=0 best_pg=0 best_sync=0 best_base=0 best_one=0 best_sh=0
rounds_shm='' rounds_disk='' rounds_base='' rounds_floor=''
round=0
while [ "$round" -lt "${ROUNDS:-21}" ]; do
    # The disk's floor: each call's reservation is durable before its command runs, one
    # fdatasync per call at least (here: one synchronous write of a journal record's size per
    # task, on the disk that holds the state directory).
    rm -f sync.probe; ts=$(now)
    dd if=/dev/zero of=sync.probe bs=400 count="$tasks" oflag=dsync status=none
    te=$(now); y=$((te - ts))
    best_sync=$(best "$best_sync" "$y")
    t0=$(now); sh script.sh; t1=$(now)
    s=$((t1 - t0))
    # Each run's clock starts after the last run's state is removed: the removal (an `rm`
    # process and its unlinks) is not part of a run.
    # The run's cache (STATE-cache) goes with its state: these time calls, not reuse.
    rm -rf st st-cache; t0=$(now); "$kleene" run plan.json --state st -j 1 > /dev/null; t1=$(now)
    d=$((t1 - t0))
    rm -rf "$shm/st" "$shm/st-cache"; t0=$(now)
    "$kleene" run plan.json --state "$shm/st" -j 1 > /dev/null; t1=$(now)
    m=$((t1 - t0))
    rm -rf "$shm/st" "$shm/st-cache"; t0=$(now)
    KLEENE_CONTAINMENT=process-group "$kleene" run plan.json --state "$shm/st" -j 1 > /dev/null
    t1=$(now)
    g=$((t1 - t0))
    rounds_shm="$rounds_shm $(ratio "$m" "$s")"
    rounds_disk="$rounds_disk $(ratio "$d" "$s")"
    rounds_floor="$rounds_floor $(ratio "$d" $((s + y)))"
    if [ -n "${KLEENE_BASELINE:-}" ]; then
        rm -rf "$shm/st" "$shm/st-cache"; t5=$(now)
        "$KLEENE_BASELINE" run plan.json --state "$shm/st" -j 1 > /dev/null; t6=$(now)
        b=$((t6 - t5))
        best_base=$(best "$best_base" "$b")
        rounds_base="$rounds_base $(ratio "$b" "$s")"
    fi
    # The fixed cost: one task against one command.
    rm -rf "$shm/st" "$shm/st-cache"; t7=$(now)
    "$kleene" run one.json --state "$shm/st" -j 1 > /dev/null; t8=$(now)
    sh -c true; t9=$(now)
    o=$((t8 - t7)) c=$((t9 - t8))
    best_one=$(best "$best_one" "$o")
    best_sh=$(best "$best_sh" "$c")
    best_script=$(best "$best_script" "$s")
    best_disk=$(best "$best_disk" "$d")
    best_shm=$(best "$best_shm" "$m")
    best_pg=$(best "$best_pg" "$g")
    round=$((round + 1))
done
echo "best of ${ROUNDS:-21} interleaved rounds:" \
    "script $((best_script / 1000000)) ms," \
    "kleene (state on disk) $((best_disk / 1000000)) ms," \
    "kleene (state on /dev/shm) $((best_shm / 1000000)) ms," \
    "kleene (/dev/shm, process groups) $((best_pg / 1000000)) ms"
echo "ratio kleene/script: $(echo "$best_disk $best_script" | awk '{ printf "%.2f", $1 / $2 }') (disk)," \
    "$(echo "$best_shm $best_script" | awk '{ printf "%.2f", $1 / $2 }') (/dev/shm)," \
    "$(echo "$best_pg $best_script" | awk '{ printf "%.2f", $1 / $2 }') (/dev/shm, process groups)"
echo "paired rounds, kleene / script (min / median / max): /dev/shm $(spread "$rounds_shm")," \
    "disk $(spread "$rounds_disk"), disk / its floor $(spread "$rounds_floor")"
echo "one task: kleene (/dev/shm) $((best_one / 1000)) us, sh -c true $((best_sh / 1000)) us:" \
    "a run's fixed cost is about $(((best_one - best_sh) / 1000)) us"
if [ -n "${KLEENE_BASELINE:-}" ]; then
    echo "baseline $KLEENE_BASELINE (/dev/shm): $((best_base / 1000000)) ms (paired rounds $(spread "$rounds_base"))," \
        "ratio $(echo "$best_base $best_script" | awk '{ printf "%.2f", $1 / $2 }')"
fi
floor=$((best_script + best_sync))
echo "the disk's floor: the script plus $tasks synchronous writes ($((best_sync / 1000000)) ms," \
    "$((best_sync / tasks / 1000)) us each) = $((floor / 1000000)) ms;" \
    "kleene (state on disk) / floor: $(echo "$best_disk $floor" | awk '{ printf "%.2f", $1 / $2 }')"
# One line each for benches/cli_all.sh's table: bench, ratio, target.
echo "result: $tasks no-ops -j 1 / script, /dev/shm|$(ratio "$best_shm" "$best_script") (rounds $(spread "$rounds_shm"))|1.3"
echo "result: $tasks no-ops -j 1 / script, state on ${DISK_NAME:-the work disk}|$(ratio "$best_disk" "$best_script") (rounds $(spread "$rounds_disk"))|1.3"
echo "result: $tasks no-ops -j 1 / (script + one fdatasync per task), state on ${DISK_NAME:-the work disk}|$(ratio "$best_disk" "$floor") (rounds $(spread "$rounds_floor"))|1.3"
if command -v hyperfine > /dev/null; then
    hyperfine --warmup 3 --min-runs 20 --prepare "rm -rf st st-cache $shm/st $shm/st-cache" \
        'sh script.sh' \
        "$kleene run plan.json --state st" \
        "$kleene run plan.json --state $shm/st"
fi
