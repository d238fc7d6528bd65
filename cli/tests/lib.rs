//! End-to-end tests of the `kleene` binary: one test binary, one module per area.

mod cli;
