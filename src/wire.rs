//! Wire types: the versioned records kleene persists, kept apart from the domain types so
//! that refactoring a domain type is never a silent format change.
//!
//! Each persisted payload has one record type per format version. Encoding converts a
//! domain value into the newest record (borrowing where it can, so hot paths do not clone);
//! decoding reads the record of the version the bytes declare, migrates an older one
//! forward, and validates it into the domain type with a typed error. `FORMATS.md` lists
//! every format and what each version changed.
//!
//! A record has two encoders that write the same bytes: its serde form (JSON, and how
//! checkpoints are read back) and bincode's native `Encode`, which writes checkpoint payloads
//! at a fraction of serde's cost. They agree because the records map one to one onto
//! bincode's data model (fields in order, a variant by its index, an option as `0`/`1`, a
//! sequence or string by its length) and none uses a serde attribute that changes what is
//! written (`skip`, `flatten`, `tag`, `untagged`); the hand-written impls below and in the
//! record modules mirror their serde twins. `tests/formats/wire_native_encode.rs` checks the
//! agreement on random closures and batches.

use bincode::Encode as _;
use serde::{Deserialize, Serialize};

/// A wire record written from a borrowed domain value: encoding never clones what it
/// writes.
pub(crate) trait Record<'a, D: ?Sized + 'a>: Serialize + bincode::Encode {
    /// The record of `value`.
    fn of(value: &'a D) -> Self;
}

/// Ids and digests have their own hand-written stable encoding and are written as they are.
impl<'a, T: Clone + Serialize + bincode::Encode + 'a> Record<'a, T> for std::borrow::Cow<'a, T> {
    fn of(value: &'a T) -> Self {
        std::borrow::Cow::Borrowed(value)
    }
}

impl<'a> Record<'a, String> for std::borrow::Cow<'a, str> {
    fn of(value: &'a String) -> Self {
        std::borrow::Cow::Borrowed(value)
    }
}

/// A sequence of records: written straight from a borrowed slice of domain values (each
/// turned into its record as it is written, so nothing is collected), read into owned
/// records.
#[derive(Debug)]
pub(crate) enum Seq<'a, D, W> {
    /// The domain values being written.
    Borrowed(&'a [D]),
    /// The records read.
    Owned(Vec<W>),
}

impl<D, W> Default for Seq<'_, D, W> {
    fn default() -> Self {
        Seq::Owned(Vec::new())
    }
}

impl<'a, D, W: Record<'a, D>> Serialize for Seq<'a, D, W> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Seq::Borrowed(values) => s.collect_seq(values.iter().map(W::of)),
            Seq::Owned(records) => s.collect_seq(records),
        }
    }
}

/// The length (a `u64`), then each record: what serde's `collect_seq` writes to bincode.
impl<'a, D, W: Record<'a, D>> bincode::Encode for Seq<'a, D, W> {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        match self {
            Seq::Borrowed(values) => {
                let values: &'a [D] = values;
                encode_seq(encoder, values.iter().map(W::of))
            }
            Seq::Owned(records) => records.as_slice().encode(encoder),
        }
    }
}

/// Writes `items` as bincode writes a sequence: its length as a `u64`, then each item.
pub(crate) fn encode_seq<E: bincode::enc::Encoder, T: bincode::Encode>(
    encoder: &mut E,
    items: impl ExactSizeIterator<Item = T>,
) -> Result<(), bincode::error::EncodeError> {
    (items.len() as u64).encode(encoder)?;
    for item in items {
        item.encode(encoder)?;
    }
    Ok(())
}

impl<'de, D, W: Deserialize<'de>> Deserialize<'de> for Seq<'_, D, W> {
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> Result<Self, De::Error> {
        Vec::deserialize(d).map(Seq::Owned)
    }
}

impl<'a, D: Clone, W> Seq<'a, D, W> {
    /// The domain values, each record checked by `check`.
    pub(crate) fn try_into_values<E>(
        self,
        check: impl FnMut(W) -> Result<D, E>,
    ) -> Result<Vec<D>, E> {
        match self {
            Seq::Borrowed(values) => Ok(values.to_vec()),
            Seq::Owned(records) => records.into_iter().map(check).collect(),
        }
    }

    /// The domain values of records that need no check.
    pub(crate) fn into_values(self, convert: impl FnMut(W) -> D) -> Vec<D> {
        match self {
            Seq::Borrowed(values) => values.to_vec(),
            Seq::Owned(records) => records.into_iter().map(convert).collect(),
        }
    }
}

/// A record read from bytes or text was refused: why, in words that name the field.
pub(crate) type Invalid = String;
