#!/bin/sh
# Every command-line bench in one sitting, so their ratios share one machine state: the chain
# (overhead per task at N = 50 / 200 / 1000 in every containment), 200 no-op tasks sequential
# and with -j 2 (state on /dev/shm and on the work disk), one task writing many files, and
# what the sandbox costs a call.
# Each prints its own lines, then a table of every ratio against its target; uptime before
# and after says how loaded the machine was.
# Usage: sh benches/cli_all.sh   (KLEENE_BASELINE=/old/kleene adds it to every bench's rounds;
# WORK=DIR puts the chain's state on DIR instead of /dev/shm; MANY=N files, default 100000)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cli_stats.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
    echo "== load before: $(uptime)"
    echo "== chain (sh benches/cli_chain.sh)"
    sh "$here/cli_chain.sh" 50 200 1000
    echo "== 200 no-op tasks, -j 1 (sh benches/cli_run.sh)"
    ROUNDS=${ROUNDS_RUN:-11} sh "$here/cli_run.sh" 200
    echo "== 200 no-op tasks, -j 2 (sh benches/cli_parallel.sh)"
    ROUNDS=${ROUNDS_RUN:-11} sh "$here/cli_parallel.sh" 200 2
    echo "== one task writing ${MANY:-100000} files (sh benches/cli_many_files.sh)"
    sh "$here/cli_many_files.sh" "${MANY:-100000}"
    echo "== the sandbox on against off (sh benches/cli_sandbox.sh)"
    ROUNDS=${ROUNDS_RUN:-11} sh "$here/cli_sandbox.sh" 200
    echo "== load after: $(uptime)"
} | tee "$out"
results_table "$out"
