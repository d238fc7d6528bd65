#!/bin/sh
# kleene's overhead per task on a chain of N tasks that each write one 16 KiB file, against a
# shell script running the same commands in order. Each call's stage holds every earlier
# task's file (its transitive prerequisites), so this measures how staging grows with the
# number of files in a stage: it must grow with their number, never with their bytes.
# Each file starts with its task number, so no two share content (and one object).
# Usage: sh benches/cli_chain.sh [N ...]   (default 50 200 1000; ROUNDS=5; SIZE=16384 bytes)
# KLEENE_BASELINE=/path/to/an/older/kleene also times that binary in the same rounds, so a
# change is measured against what it replaces in one sitting; kleene also runs without its PID
# namespace twice: KLEENE_CONTAINMENT=process-group (a fresh stage per call, since a command
# can outlive it), KLEENE_CONTAINMENT=cgroup (each command's cgroup killed when it ends, so
# stages are reused; the same run as process-group where cgroup v2 is not writable) and
# KLEENE_CONTAINMENT=subreaper (the host as a subreaper that kills what a command left, so
# stages are reused); WORK=DIR puts the plans and state directories under DIR (default
# /dev/shm) to measure on a disk.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
. "$root/benches/cli_stats.sh"
work=$(mktemp -d "${WORK:-/dev/shm}/kleene-chain.XXXXXX")
trap 'rm -rf "$work"' EXIT
now() { date +%s%N; }
[ $# -gt 0 ] || set -- 50 200 1000
for n in "$@"; do
    dir="$work/$n"
    mkdir -p "$dir"
    {
        echo '{"inputs": [], "tasks": ['
        i=0
        while [ "$i" -lt "$n" ]; do
            after=''
            [ "$i" -gt 0 ] && after="\"t$((i - 1))\""
            sep=','
            [ "$i" -eq $((n - 1)) ] && sep=''
            echo "{\"id\": \"t$i\", \"kind\": {\"lane\": \"config\"}, \"owner\": \"shell\", \"owned_paths\": [\"out/f$i\"],"
            echo " \"spec\": {\"intent\": \"write f$i\"}, \"depends_on\": [$after],"
            echo " \"run\": \"mkdir -p out && { echo $i; head -c $(( ${SIZE:-16384} - 4 )) /dev/zero; } > out/f$i\"}$sep"
            i=$((i + 1))
        done
        echo ']}'
    } > "$dir/plan.json"
    {
        echo 'mkdir -p ws && cd ws'
        i=0
        while [ "$i" -lt "$n" ]; do
            echo "sh -c 'mkdir -p out && { echo $i; head -c $(( ${SIZE:-16384} - 4 )) /dev/zero; } > out/f$i'"
            i=$((i + 1))
        done
    } > "$dir/script.sh"
    cd "$dir"
    best_script=0 best_kleene=0 best_pg=0 best_cg=0 best_sr=0 best_base=0 round=0
    rounds_ratio='' rounds_over='' rounds_pg='' rounds_base=''
    while [ "$round" -lt "${ROUNDS:-5}" ]; do
        rm -rf ws; t0=$(now); sh script.sh; t1=$(now)
        # Each run's clock starts after the last run's state is removed: the removal (an
        # `rm` process and its unlinks) is not part of a run.
        # The run's cache (STATE-cache) goes with its state: these time calls, not reuse.
        rm -rf st st-cache; t2=$(now); "$kleene" run plan.json --state st > /dev/null; t3=$(now)
        k=$((t3 - t2))
        rm -rf st st-cache; t2=$(now)
        KLEENE_CONTAINMENT=process-group "$kleene" run plan.json --state st > /dev/null
        t3=$(now)
        g=$((t3 - t2))
        rm -rf st st-cache; t2=$(now)
        KLEENE_CONTAINMENT=cgroup "$kleene" run plan.json --state st > /dev/null
        t3=$(now)
        c=$((t3 - t2))
        best_cg=$(best "$best_cg" "$c")
        rm -rf st st-cache; t2=$(now)
        KLEENE_CONTAINMENT=subreaper "$kleene" run plan.json --state st > /dev/null
        t3=$(now)
        r=$((t3 - t2))
        best_sr=$(best "$best_sr" "$r")
        b=0
        if [ -n "${KLEENE_BASELINE:-}" ]; then
            rm -rf st st-cache; t2=$(now); "$KLEENE_BASELINE" run plan.json --state st > /dev/null; t3=$(now)
            b=$((t3 - t2))
            best_base=$(best "$best_base" "$b")
        fi
        s=$((t1 - t0))
        # Each round's kleene against the same round's script.
        over() { echo "$1 $s $n" | awk '{ printf "%.3f", ($1 - $2) / $3 / 1e6 }'; }
        rounds_ratio="$rounds_ratio $(ratio "$k" "$s")"
        rounds_over="$rounds_over $(over "$k")"
        rounds_pg="$rounds_pg $(over "$g")"
        [ "$b" -eq 0 ] || rounds_base="$rounds_base $(over "$b")"
        best_script=$(best "$best_script" "$s")
        best_kleene=$(best "$best_kleene" "$k")
        best_pg=$(best "$best_pg" "$g")
        round=$((round + 1))
    done
    echo "N=$n: script $((best_script / 1000000)) ms, kleene $((best_kleene / 1000000)) ms," \
        "overhead per task $(echo "$best_kleene $best_script $n" | awk '{ printf "%.2f", ($1 - $2) / $3 / 1e6 }') ms" \
        "(process groups: $(echo "$best_pg $best_script $n" | awk '{ printf "%.2f", ($1 - $2) / $3 / 1e6 }') ms;" \
        "a cgroup per command: $(echo "$best_cg $best_script $n" | awk '{ printf "%.2f", ($1 - $2) / $3 / 1e6 }') ms;" \
        "a subreaper host: $(echo "$best_sr $best_script $n" | awk '{ printf "%.2f", ($1 - $2) / $3 / 1e6 }') ms)" \
        "(best of ${ROUNDS:-5}, state in ${WORK:-/dev/shm})"
    echo "N=$n: paired rounds (min / median / max): overhead per task $(spread "$rounds_over") ms" \
        "(process groups: $(spread "$rounds_pg") ms), kleene / script $(spread "$rounds_ratio")"
    per_task() { echo "$1 $best_script $n" | awk '{ printf "%.2f", ($1 - $2) / $3 / 1e6 }'; }
    echo "result: chain N=$n, overhead per task (ms), default|$(per_task "$best_kleene") (rounds $(spread "$rounds_over"))|1.2"
    echo "result: chain N=$n, overhead per task (ms), subreaper|$(per_task "$best_sr")|1.2"
    echo "result: chain N=$n, overhead per task (ms), cgroup|$(per_task "$best_cg")|1.2"
    echo "result: chain N=$n, overhead per task (ms), process groups only|$(per_task "$best_pg") (rounds $(spread "$rounds_pg"))|1.2"
    echo "result: chain N=$n, kleene / script|$(ratio "$best_kleene" "$best_script") (rounds $(spread "$rounds_ratio"))|1.3"
    if [ -n "${KLEENE_BASELINE:-}" ]; then
        echo "N=$n: baseline $((best_base / 1000000)) ms, overhead per task" \
            "$(echo "$best_base $best_script $n" | awk '{ printf "%.2f", ($1 - $2) / $3 / 1e6 }') ms" \
            "(kleene / script $(echo "$best_kleene $best_script" | awk '{ printf "%.2f", $1 / $2 }')," \
            "baseline / script $(echo "$best_base $best_script" | awk '{ printf "%.2f", $1 / $2 }'));" \
            "paired rounds, baseline overhead per task $(spread "$rounds_base") ms"
    fi
done
