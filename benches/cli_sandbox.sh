#!/bin/sh
# What the sandbox costs a call: `kleene run` with `--sandbox on` (the default) against
# `--sandbox off`, interleaved round by round in one sitting, on two plans: 200 no-op tasks in
# a chain (`true`), and a chain of N tasks each writing a 16 KiB file whose stage holds every
# earlier task's file. State on /dev/shm (WORK=DIR for a disk), `-j 1`, the cache off.
# Prints, per plan, the best and the median of the paired per-call differences in ms.
# Usage: sh benches/cli_sandbox.sh [N]   (chain length, default 200; ROUNDS=11)
set -eu
n=${1:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
. "$root/benches/cli_stats.sh"
work=$(mktemp -d "${WORK:-/dev/shm}/kleene-sandbox.XXXXXX")
trap 'rm -rf "$work"' EXIT
now() { date +%s%N; }
plan() { # plan FILE COUNT RUN: a chain of COUNT tasks, task i running RUN with $i in it
    {
        echo '{"inputs": [], "tasks": ['
        i=0
        while [ "$i" -lt "$2" ]; do
            after=''
            [ "$i" -gt 0 ] && after="\"t$((i - 1))\""
            sep=','
            [ "$i" -eq $(($2 - 1)) ] && sep=''
            owned=''
            case "$3" in *out/*) owned="\"owned_paths\": [\"out/f$i\"]," ;; esac
            run=$(echo "$3" | sed "s/\\\$i/$i/g")
            echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\", $owned"
            echo " \"spec\": {\"intent\": \"task $i\"}, \"depends_on\": [$after], \"run\": \"$run\"}$sep"
            i=$((i + 1))
        done
        echo ']}'
    } > "$1"
}
plan "$work/noop.json" 200 "true"
plan "$work/chain.json" "$n" "mkdir -p out && { echo \$i; head -c 16380 /dev/zero; } > out/f\$i"
"$kleene" validate "$work/chain.json" | head -n 1
cd "$work"
time_run() { # time_run PLAN MODE: nanoseconds of one run
    rm -rf st
    t0=$(now)
    "$kleene" run "$1" --state st -j 1 --no-cache --sandbox "$2" > /dev/null
    t1=$(now)
    echo $((t1 - t0))
}
for name in noop chain; do
    count=200
    [ "$name" = chain ] && count=$n
    best_on=0 best_off=0 diffs='' round=0
    while [ "$round" -lt "${ROUNDS:-11}" ]; do
        on=$(time_run "$name.json" on)
        off=$(time_run "$name.json" off)
        best_on=$(best "$best_on" "$on")
        best_off=$(best "$best_off" "$off")
        diffs="$diffs $(echo "$on $off $count" | awk '{ printf "%.3f", ($1 - $2) / $3 / 1e6 }')"
        round=$((round + 1))
    done
    per_on=$(echo "$best_on $count" | awk '{ printf "%.3f", $1 / $2 / 1e6 }')
    per_off=$(echo "$best_off $count" | awk '{ printf "%.3f", $1 / $2 / 1e6 }')
    echo "$name ($count tasks): best $per_on ms a call sandboxed, $per_off ms unconfined;" \
        "paired difference min / median / max: $(spread "$diffs") ms a call"
    echo "result: sandbox cost, $name ($count tasks), ms a call (paired, min / median / max)|$(spread "$diffs")|0.2"
done
