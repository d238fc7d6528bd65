//! The command runner the CLI's worker calls: the library's [`kleene::process`].

pub use kleene::process::*;
