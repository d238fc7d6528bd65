//! Run a kleene plan on Restate.
#![forbid(unsafe_code)]
