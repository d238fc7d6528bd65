#!/bin/sh
# Incremental runs against ninja, timed in the same rounds on the same plans: N independent
# tasks, each writing one file (`touch out/tI`, ninja's rule the same), with the state (and
# ninja's build directory) on /dev/shm. For each N:
#   first   `kleene run -j 2` of a fresh project (empty cache) / `ninja -j 2` from clean
#   null    the same again with nothing changed: kleene reuses every result / ninja has no
#           work to do
#   leaf    (N = the first size only) one task's command edited, then run: kleene calls it
#           alone, measured against one such call plus kleene's own null run
# ninja: NINJA=/path/to/ninja, else `ninja` on PATH. The peer named by the issue is the
# distribution's ninja 1.11 (`apt-get install ninja-build`); where its mirror is unreachable,
# `pip install ninja` gives a release build (1.13) whose binary is
# `$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))')` (call that
# binary, not a shim that starts a Python first).
# Usage: sh benches/cli_incremental.sh [N ...]   (default 1000 10000; ROUNDS=5)
set -eu
[ "$#" -gt 0 ] || set -- 1000 10000
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
kleene="$root/target/release/kleene"
ninja=${NINJA:-ninja}
"$ninja" --version > /dev/null
. "$root/benches/cli_stats.sh"
shm=$(mktemp -d /dev/shm/kleene-incr.XXXXXX)
trap 'rm -rf "$shm"' EXIT
now() { date +%s%N; }
ms() { echo "$1" | awk '{ printf "%.1f", $1 / 1e6 }'; }

# A plan of N tasks (task 0's command is `$2`) and its build.ninja, in directory $3.
make_project() {
    n=$1 first=$2 dir=$3
    mkdir -p "$dir"
    {
        echo '{"inputs": [], "tasks": ['
        i=0
        while [ "$i" -lt "$n" ]; do
            sep=','
            [ "$i" -eq $((n - 1)) ] && sep=''
            cmd="mkdir -p out && touch out/t$i"
            [ "$i" -eq 0 ] && cmd=$first
            echo "{\"id\": \"t$i\", \"owner\": \"shell\", \"spec\": {\"intent\": \"t$i\"},"
            echo " \"owned_paths\": [\"out/t$i\"], \"run\": \"$cmd\"}$sep"
            i=$((i + 1))
        done
        echo ']}'
    } > "$dir/plan.json"
    {
        echo 'rule touch'
        echo '  command = touch $out'
        i=0
        while [ "$i" -lt "$n" ]; do
            echo "build out/t$i: touch"
            i=$((i + 1))
        done
    } > "$dir/build.ninja"
}

for n in "$@"; do
    first_k='' first_n='' first_c='' null_k='' null_n='' leaf_k='' leaf_one=''
    best_first_k=0 best_first_n=0 best_null_k=0 best_null_n=0
    round=0
    while [ "$round" -lt "${ROUNDS:-5}" ]; do
        round=$((round + 1))
        dir="$shm/p$n"
        rm -rf "$dir"
        make_project "$n" "mkdir -p out && touch out/t0" "$dir"
        cd "$dir"
        # Without the cache first: what the stores add is the difference.
        t0=$(now); "$kleene" run plan.json -j 2 --no-cache --state nc > /dev/null; t1=$(now)
        kc=$((t1 - t0))
        rm -rf nc
        t0=$(now); "$kleene" run plan.json -j 2 > /dev/null; t1=$(now)
        k=$((t1 - t0))
        mkdir -p nb && cp build.ninja nb/
        t0=$(now); (cd nb && "$ninja" -j 2 > /dev/null); t1=$(now)
        g=$((t1 - t0))
        first_k="$first_k $k" first_n="$first_n $g" first_c="$first_c $kc"
        t0=$(now); "$kleene" run plan.json -j 2 > /dev/null; t1=$(now)
        kn=$((t1 - t0))
        t0=$(now); (cd nb && "$ninja" -j 2 > /dev/null); t1=$(now)
        gn=$((t1 - t0))
        null_k="$null_k $kn" null_n="$null_n $gn"
        if [ "$n" = "$1" ]; then
            # One leaf edited: its command writes the same file another way.
            sed -i 's|"run": "mkdir -p out \&\& touch out/t0"|"run": "mkdir -p out; touch out/t0"|' plan.json
            t0=$(now); "$kleene" run plan.json -j 2 > /dev/null; t1=$(now)
            kl=$((t1 - t0))
            # What that one call costs on its own: a one-task plan, run from nothing.
            mkdir -p one && echo '{"inputs": [], "tasks": [{"id": "t0", "owner": "shell", "spec": {"intent": "t0"}, "owned_paths": ["out/t0"], "run": "mkdir -p out; touch out/t0"}]}' > one/plan.json
            rm -rf one/.kleene one/.kleene-cache
            t0=$(now); (cd one && "$kleene" run plan.json --no-cache > /dev/null); t1=$(now)
            one=$((t1 - t0))
            leaf_k="$leaf_k $kl" leaf_one="$leaf_one $((one + kn))"
        fi
        cd "$root"
    done
    # Medians, in ms; ratios of the medians.
    med() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
    fk=$(med $first_k) fn=$(med $first_n) fc=$(med $first_c) nk=$(med $null_k) nn=$(med $null_n)
    echo "result: N=$n first run -j 2: kleene $(ms "$fk") ms, ninja $(ms "$fn") ms, ratio $(ratio "$fk" "$fn")"
    echo "result: N=$n first run -j 2 --no-cache: kleene $(ms "$fc") ms, ratio $(ratio "$fc" "$fn") to ninja"
    echo "result: N=$n null run: kleene $(ms "$nk") ms, ninja $(ms "$nn") ms, ratio $(ratio "$nk" "$nn")"
    if [ -n "$leaf_k" ]; then
        lk=$(med $leaf_k) lo=$(med $leaf_one)
        echo "result: N=$n one leaf edited: kleene $(ms "$lk") ms, one call + null run $(ms "$lo") ms, ratio $(ratio "$lk" "$lo")"
    fi
done
