#!/bin/sh
# Every figure the per-call cost targets name, in one sitting, then one table of each ratio
# against its target: the command-line benches (benches/cli_all.sh: the chain in every
# containment, 200 no-ops with -j 1 and -j 2 on /dev/shm and on the work disk, one task
# writing many files, the sandbox on against off), the plan pipeline against petgraph's toposort, the async and
# sequential drivers against join_all and their floor, and the closure against the
# hand-written equivalent. Each library bench runs its own alternating or interleaved rounds
# (criterion's full measurement is skipped: `cargo bench` runs it).
# Takes about 10 minutes on 2 cores (once built). The same variables as benches/cli_all.sh apply
# (KLEENE_BASELINE, WORK, MANY, ROUNDS_RUN).
# Usage: sh benches/all.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/cli_stats.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
    # cli_all.sh says the load before it starts.
    sh "$here/cli_all.sh"
    echo "== the plan pipeline (cargo bench --bench plan -- fastest)"
    cargo bench --quiet --manifest-path "$root/Cargo.toml" --bench plan -- fastest 2>&1
    echo "== the drivers (cargo bench --features async --bench batch_async -- fastest)"
    cargo bench --quiet --manifest-path "$root/Cargo.toml" --features async \
        --bench batch_async -- fastest 2>&1
    echo "== the closure (cargo bench --bench closure -- interleaved)"
    cargo bench --quiet --manifest-path "$root/Cargo.toml" --bench closure -- interleaved 2>&1
    echo "== load after: $(uptime)"
} | tee "$out"
results_table "$out"
