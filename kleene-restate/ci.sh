#!/usr/bin/env bash
# CI for the Restate adapter (called from .ci/run): installs and starts a Restate server on
# loopback with a fresh data directory, runs the adapter's lints and its tests with CI
# semantics (a missing server fails the end-to-end tests instead of skipping them), and
# stops the server. Takes about a minute once the dependencies are built.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
export CARGO_TERM_COLOR=never
KLEENE_RESTATE_DATA=${KLEENE_RESTATE_DATA:-$(mktemp -d)/data}
export KLEENE_RESTATE_DATA

echo "== kleene-restate: rustfmt, clippy, docs"
cargo fmt -p kleene-restate --check
cargo clippy -p kleene-restate --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc -p kleene-restate --no-deps

echo "== kleene-restate: a Restate server on loopback ($KLEENE_RESTATE_DATA)"
scripts/restate-server.sh start
# The tests talk to the URLs the script chose (its ports follow KLEENE_RESTATE_INGRESS/ADMIN).
eval "$(scripts/restate-server.sh env)"
export RESTATE_INGRESS_URL RESTATE_ADMIN_URL
trap 'scripts/restate-server.sh stop; rm -rf "$KLEENE_RESTATE_DATA"' EXIT

echo "== kleene-restate: unit and end-to-end tests"
cargo test -p kleene-restate
