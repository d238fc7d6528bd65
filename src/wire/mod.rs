//! Wire types: the versioned records kleene persists, kept apart from the domain types so
//! that refactoring a domain type is never a silent format change.
//!
//! Each persisted payload has one record type per format version. Encoding converts a
//! domain value into the newest record (borrowing where it can, so hot paths do not clone);
//! decoding reads the record of the version the bytes declare, migrates an older one
//! forward, and validates it into the domain type with a typed error. `FORMATS.md` lists
//! every format and what each version changed.

pub(crate) mod acceptance;
pub(crate) mod evidence;
