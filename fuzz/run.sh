#!/usr/bin/env bash
# Runs fuzz targets one after another, each for SECONDS (default 60), under the allocation
# rule: no single allocation over 64 MiB from an input of at most 1 KiB.
#
#   fuzz/run.sh [SECONDS] [TARGET...]      (all targets when none is named)
#
# MAX_LEN overrides the input cap (default 1024); a larger cap lets verify_archive keep whole
# archives. KEEP_GOING=1 runs in fork mode and keeps fuzzing past crashes, out-of-memory
# findings and timeouts (each still saved), to collect every finding in one run. Findings land in fuzz/artifacts/<target>/; the new corpus in fuzz/corpus/<target>/
# (both ignored by git). Needs cargo-fuzz (fuzz/build.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
max_len=${MAX_LEN:-1024}
if [ $# -eq 0 ]; then
    set -- $(RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi
export RUSTC_BOOTSTRAP=1
keep_going=()
if [ "${KEEP_GOING:-0}" = 1 ]; then
    keep_going=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
fi
for target in "$@"; do
    # journal_file reads the same input format as journal_image and shares its seeds.
    seeds=fuzz/seeds/${target/journal_file/journal_image}
    mkdir -p "fuzz/corpus/$target"
    echo "== $target for ${seconds}s"
    cargo fuzz run "$target" "fuzz/corpus/$target" "$seeds" -- \
        -max_total_time="$seconds" -malloc_limit_mb=64 -rss_limit_mb=512 -max_len="$max_len" \
        -print_final_stats=1 "${keep_going[@]}"
done
