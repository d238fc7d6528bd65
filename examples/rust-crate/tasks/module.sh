#!/bin/sh
# Module lane: the crate's manifest and root module.
set -eu
mkdir -p src
cat > Cargo.toml <<'END'
[package]
name = "tally"
version = "0.1.0"
edition = "2021"

[dependencies]
END
cat > src/lib.rs <<'END'
//! Counting things in text.
pub mod words;
END
