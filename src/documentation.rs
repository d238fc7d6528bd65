//! The project's own documents, so the crate's documentation is the one map: how the code
//! is laid out, every persisted format, and the threat model.
//!
//! ```text
//! kleene::documentation::readme         the README: its Rust blocks compile and run as tests
//! kleene::documentation::architecture   layers, modules and how data flows
//! kleene::documentation::formats        every persisted byte and its versions
//! kleene::documentation::security       what checksums cover, what a key adds
//! ```

#[doc = include_str!("../README.md")]
pub mod readme {}

#[doc = include_str!("../ARCHITECTURE.md")]
pub mod architecture {}

#[doc = include_str!("../FORMATS.md")]
pub mod formats {}

#[doc = include_str!("../SECURITY.md")]
pub mod security {}
