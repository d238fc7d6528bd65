//! `kleene`: run plan files of shell commands through bounded, auditable recovery.

// The binary keeps the library's promise: no unsafe code anywhere.
#![forbid(unsafe_code)]

mod planfile;
mod report;
mod runner;

fn main() {}
