//! `kleene`: run plan files of shell commands through bounded, auditable recovery.

// The binary keeps the library's promise: no unsafe code anywhere.
#![forbid(unsafe_code)]

mod cli;
mod planfile;
mod report;
mod runner;
mod state;

fn main() {}
