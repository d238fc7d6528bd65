#!/usr/bin/env bash
# Builds every fuzz target exactly as fuzz/run.sh runs them (cargo-fuzz: address sanitizer,
# coverage instrumentation, release profile), on the stable toolchain: RUSTC_BOOTSTRAP=1
# unlocks the sanitizer flags. Installs cargo-fuzz when it is missing. Then runs the input
# formats' own tests and builds the seed generator. CI calls this; see fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
echo "== cargo fuzz build (every target)"
cargo fuzz build
echo "== input formats' tests and the seed generator"
# Lib and doc tests; the bins are test = false, and examples are built, not run.
cargo test --manifest-path fuzz/Cargo.toml
