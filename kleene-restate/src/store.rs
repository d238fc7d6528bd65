//! Large values kept outside Restate: a content-addressed directory that the workers (and
//! the channel they serve) and the client share, each value named by the blake3 of its bytes.
//!
//! Restate carries a call's reply, a state value and a journal entry as one message, inside
//! the server's per-invocation memory; a call that writes 100 MiB cannot travel that way.
//! With a store, any such value larger than [`INLINE_LIMIT`] is written to the store and only
//! its [`StoredRef`] (hash and length) travels; whoever reads it checks the bytes against both.
//! Without a store, values travel inline as before, and a worker caps a call's output at
//! 4 MiB ([`MAX_CALL_OUTPUT_BYTES`](crate::worker::MAX_CALL_OUTPUT_BYTES)).
//!
//! ```
//! use kleene_restate::store::{Carried, ContentStore};
//!
//! let dir = tempfile::tempdir()?;
//! let store = ContentStore::open(dir.path())?;
//! let big = vec![7u8; 2 * 1024 * 1024];
//! let carried = Carried::of(big.clone(), Some(&store))?;
//! assert!(matches!(carried, Carried::Stored { .. })); // only the reference travels
//! assert_eq!(carried.into_value(Some(&store))?, big);
//! let small = Carried::of(vec![1u8, 2, 3], Some(&store))?;
//! assert!(matches!(small, Carried::Inline(_)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Several machines share a store through a shared mount; on one machine it is a directory.
//! Writes are atomic (a temporary file renamed into place, synced first), so a value a
//! journal entry names is whole on disk before the entry is.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The largest encoded value that travels inline when a store is given (1 MiB): well inside
/// Restate's message limits, and large enough that a plan of small outputs never touches
/// the store.
pub const INLINE_LIMIT: usize = 1024 * 1024;

/// The largest value the store reads back (2 GiB): a call's output is capped at 1 GiB, as
/// `kleene run`'s is, and its encoding (base64 in a reply, numbers in an evidence commit)
/// is larger than its bytes.
pub const MAX_STORED_BYTES: u64 = 2 << 30;

/// Why a value could not be kept in, or read from, the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The value is kept in a content store, and none was given.
    #[error(
        "read a value of {len} bytes kept in the content store (blake3 {blake3}): no store was \
         given; pass --store DIR (or KLEENE_RESTATE_STORE), the directory the workers use"
    )]
    NotConfigured {
        /// The value's blake3, hex.
        blake3: String,
        /// Its length.
        len: u64,
    },
    /// The store has no value with this hash.
    #[error("find value {blake3} ({len} bytes) in the content store {dir}")]
    Missing {
        /// The store's directory.
        dir: PathBuf,
        /// The value's blake3, hex.
        blake3: String,
        /// Its expected length.
        len: u64,
    },
    /// The bytes on disk are not the value the reference names.
    #[error(
        "read value {blake3} from the content store {dir}: the file holds other bytes \
         ({found_len} bytes, blake3 {found}); it was changed after it was written"
    )]
    Corrupt {
        /// The store's directory.
        dir: PathBuf,
        /// The value's blake3, hex.
        blake3: String,
        /// The hash of what the file holds.
        found: String,
        /// Its length.
        found_len: u64,
    },
    /// A reference names a value larger than the store reads back.
    #[error(
        "read value {blake3} of {len} bytes: larger than the {MAX_STORED_BYTES} bytes a stored value may be"
    )]
    TooLarge {
        /// The value's blake3, hex.
        blake3: String,
        /// Its claimed length.
        len: u64,
    },
    /// A reference's hash is not 64 hex digits.
    #[error("use {blake3:?} as a content-store reference: not a blake3 hash in hex")]
    BadReference {
        /// What the reference held.
        blake3: String,
    },
    /// The store's directory could not be used.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A value did not encode, or the stored bytes do not decode as the value expected.
    #[error("{action} a value in the content store")]
    Json {
        /// Encode or decode.
        action: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A content-addressed directory: `objects/<first two hex digits>/<blake3 hex>`.
#[derive(Debug, Clone)]
pub struct ContentStore {
    dir: PathBuf,
}

/// A value in the store: the blake3 of its bytes (hex) and their length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRef {
    /// The blake3 of the bytes, 64 hex digits.
    pub blake3: String,
    /// The number of bytes.
    pub len: u64,
}

impl ContentStore {
    /// The store in `dir`, made if missing.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] when the directory cannot be made.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let objects = dir.join("objects");
        std::fs::create_dir_all(&objects).map_err(|source| StoreError::Io {
            action: "make the content store",
            path: objects,
            source,
        })?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// The directory the store keeps its values in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, blake3: &str) -> Result<PathBuf, StoreError> {
        if blake3.len() != 64 || !blake3.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::BadReference {
                blake3: blake3.to_owned(),
            });
        }
        Ok(self.dir.join("objects").join(&blake3[..2]).join(blake3))
    }

    /// Keeps `bytes` and answers their reference. A value already kept is not written again.
    ///
    /// # Errors
    ///
    /// [`StoreError::Io`] when the value cannot be written and synced.
    pub fn put(&self, bytes: &[u8]) -> Result<StoredRef, StoreError> {
        let reference = StoredRef {
            blake3: blake3::hash(bytes).to_hex().to_string(),
            len: bytes.len() as u64,
        };
        let path = self.path(&reference.blake3)?;
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == reference.len) {
            return Ok(reference);
        }
        let io = |action: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| StoreError::Io {
                action,
                path,
                source,
            }
        };
        let parent = path.parent().unwrap_or(&self.dir).to_owned();
        std::fs::create_dir_all(&parent).map_err(io("make", &parent))?;
        let mut temp = tempfile::NamedTempFile::new_in(&parent)
            .map_err(io("make a temporary file in", &parent))?;
        temp.write_all(bytes).map_err(io("write", temp.path()))?;
        temp.as_file().sync_all().map_err(io("sync", temp.path()))?;
        temp.persist(&path)
            .map_err(|e| io("rename a value into", &path)(e.error))?;
        // The rename is durable only once the directory is.
        File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", &parent))?;
        Ok(reference)
    }

    /// The bytes `reference` names, checked against its hash and length.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the value is missing, too large, or other bytes than it names.
    pub fn get(&self, reference: &StoredRef) -> Result<Vec<u8>, StoreError> {
        if reference.len > MAX_STORED_BYTES {
            return Err(StoreError::TooLarge {
                blake3: reference.blake3.clone(),
                len: reference.len,
            });
        }
        let path = self.path(&reference.blake3)?;
        let file = File::open(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => StoreError::Missing {
                dir: self.dir.clone(),
                blake3: reference.blake3.clone(),
                len: reference.len,
            },
            _ => StoreError::Io {
                action: "open",
                path: path.clone(),
                source,
            },
        })?;
        // Read at most one byte past the length named, so a grown file is caught without
        // reading all of it; the allocation follows the bytes read, not the reference.
        let mut bytes = Vec::new();
        file.take(reference.len.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|source| StoreError::Io {
                action: "read",
                path: path.clone(),
                source,
            })?;
        let found = blake3::hash(&bytes).to_hex().to_string();
        if bytes.len() as u64 != reference.len || found != reference.blake3 {
            return Err(StoreError::Corrupt {
                dir: self.dir.clone(),
                blake3: reference.blake3.clone(),
                found,
                found_len: bytes.len() as u64,
            });
        }
        Ok(bytes)
    }
}

/// A value as it travels through Restate: inline, or (when large and a store is given) as
/// a reference into the [`ContentStore`]. Its JSON is the value's own when inline, so
/// messages and state written before stores existed read as [`Carried::Inline`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Carried<T> {
    /// In the content store: `{"stored": {"blake3": …, "len": …}}`.
    Stored {
        /// Where.
        stored: StoredRef,
    },
    /// The value itself.
    Inline(T),
}

impl<T: Serialize + DeserializeOwned> Carried<T> {
    /// `value` as it should travel: through `store` when one is given and its JSON is larger
    /// than [`INLINE_LIMIT`], inline otherwise.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the value does not encode or cannot be kept.
    pub fn of(value: T, store: Option<&ContentStore>) -> Result<Self, StoreError> {
        let Some(store) = store else {
            return Ok(Self::Inline(value));
        };
        let bytes = serde_json::to_vec(&value).map_err(|source| StoreError::Json {
            action: "encode",
            source,
        })?;
        if bytes.len() <= INLINE_LIMIT {
            return Ok(Self::Inline(value));
        }
        Ok(Self::Stored {
            stored: store.put(&bytes)?,
        })
    }

    /// The value, read from `store` if it was kept there.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when it is stored and no store is given, or the stored bytes are
    /// missing, changed, or not the value's JSON.
    pub fn into_value(self, store: Option<&ContentStore>) -> Result<T, StoreError> {
        match self {
            Self::Inline(value) => Ok(value),
            Self::Stored { stored } => {
                let Some(store) = store else {
                    return Err(StoreError::NotConfigured {
                        blake3: stored.blake3,
                        len: stored.len,
                    });
                };
                let bytes = store.get(&stored)?;
                serde_json::from_slice(&bytes).map_err(|source| StoreError::Json {
                    action: "decode",
                    source,
                })
            }
        }
    }
}

/// The prefix of a state value or answer that holds a [`StoredRef`] to raw bytes (an
/// evidence checkpoint) instead of the bytes: a kleene checkpoint starts with its own magic,
/// never with this.
const STORED_BYTES_PREFIX: &[u8] = b"kleene-restate-stored:";

/// `bytes` as they should travel: a reference into `store` when one is given and they are
/// larger than [`INLINE_LIMIT`], themselves otherwise.
///
/// # Errors
///
/// [`StoreError`] when they cannot be kept.
pub fn carry_bytes(bytes: Vec<u8>, store: Option<&ContentStore>) -> Result<Vec<u8>, StoreError> {
    match store {
        Some(store) if bytes.len() > INLINE_LIMIT || bytes.starts_with(STORED_BYTES_PREFIX) => {
            let stored = store.put(&bytes)?;
            let mut carried = STORED_BYTES_PREFIX.to_vec();
            carried.extend(
                serde_json::to_vec(&stored).map_err(|source| StoreError::Json {
                    action: "encode",
                    source,
                })?,
            );
            Ok(carried)
        }
        _ => Ok(bytes),
    }
}

/// The bytes [`carry_bytes`] made travel, read from `store` if they were kept there.
///
/// # Errors
///
/// [`StoreError`] when they are stored and no store is given, or the stored bytes are
/// missing or changed.
pub fn carried_bytes(bytes: Vec<u8>, store: Option<&ContentStore>) -> Result<Vec<u8>, StoreError> {
    let Some(reference) = bytes.strip_prefix(STORED_BYTES_PREFIX) else {
        return Ok(bytes);
    };
    let stored: StoredRef =
        serde_json::from_slice(reference).map_err(|source| StoreError::Json {
            action: "decode",
            source,
        })?;
    match store {
        Some(store) => store.get(&stored),
        None => Err(StoreError::NotConfigured {
            blake3: stored.blake3,
            len: stored.len,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_changed_or_missing_value_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = ContentStore::open(dir.path()).unwrap();
        let reference = store.put(b"the bytes").unwrap();
        let path = store.path(&reference.blake3).unwrap();
        std::fs::write(&path, b"the bytez").unwrap();
        assert!(matches!(
            store.get(&reference),
            Err(StoreError::Corrupt { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            store.get(&reference),
            Err(StoreError::Missing { .. })
        ));
        let hostile = StoredRef {
            blake3: "../../etc/passwd".into(),
            len: 1,
        };
        assert!(matches!(
            store.get(&hostile),
            Err(StoreError::BadReference { .. })
        ));
        let huge = StoredRef {
            blake3: reference.blake3.clone(),
            len: u64::MAX,
        };
        assert!(matches!(store.get(&huge), Err(StoreError::TooLarge { .. })));
    }

    #[test]
    fn a_stored_value_read_without_a_store_names_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let store = ContentStore::open(dir.path()).unwrap();
        let big = vec![1u8; INLINE_LIMIT + 1];
        let carried = carry_bytes(big, Some(&store)).unwrap();
        let e = carried_bytes(carried, None).unwrap_err();
        assert!(e.to_string().contains("--store"), "{e}");
    }

    proptest! {
        // Values up to 2.5 MB, some past the inline limit: a few dozen cases suffice.
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_value_reads_back_as_it_went(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            repeat in 0usize..40_000,
            with_store in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = ContentStore::open(dir.path()).unwrap();
            let store = with_store.then_some(&store);
            let value: Vec<u8> = bytes.iter().copied().cycle().take(bytes.len() * repeat).collect();
            let carried = Carried::of(value.clone(), store).unwrap();
            let json = serde_json::to_string(&carried).unwrap();
            let back: Carried<Vec<u8>> = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back.into_value(store).unwrap(), value.clone());
            // Raw bytes too, including ones that look like a reference.
            let mut raw = STORED_BYTES_PREFIX.to_vec();
            raw.extend(&value);
            for raw in [value, raw] {
                let carried = carry_bytes(raw.clone(), store).unwrap();
                // Without a store, bytes that begin as a reference does cannot be told from
                // one; kleene's checkpoints never do.
                if store.is_some() || !raw.starts_with(STORED_BYTES_PREFIX) {
                    prop_assert_eq!(carried_bytes(carried, store).unwrap(), raw);
                }
            }
        }
    }
}
