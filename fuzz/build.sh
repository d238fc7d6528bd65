#!/usr/bin/env bash
# Builds every fuzz target; CI calls this (see fuzz/README.md).
#
#   fuzz/build.sh          the targets exactly as fuzz/run.sh runs them: cargo-fuzz (address
#                          sanitizer, coverage instrumentation, release profile), installed
#                          first when `cargo fuzz` is missing
#   fuzz/build.sh --quick  a plain cargo build of the same targets (they compile and link
#                          against libFuzzer; no sanitizer, no cargo-fuzz needed)
#
# Both then run the input formats' own tests and build the seed generator. Stable toolchain:
# RUSTC_BOOTSTRAP=1 unlocks the sanitizer flags cargo-fuzz passes.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
if [ "${1:-}" = --quick ]; then
    echo "== cargo build of every fuzz target (no sanitizer)"
    cargo build --manifest-path fuzz/Cargo.toml --bins
else
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "== installing cargo-fuzz"
        cargo install cargo-fuzz --version 0.13.2 --locked
    fi
    echo "== cargo fuzz build (every target)"
    cargo fuzz build
fi
echo "== input formats' tests and the seed generator"
# Lib and doc tests; the bins are test = false, and examples are built, not run.
cargo test --manifest-path fuzz/Cargo.toml
