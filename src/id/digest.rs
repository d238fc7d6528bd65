//! Domain-separated blake3 digests over a canonical, length-prefixed encoding.
//!
//! Every digest in kleene is made by a [`CanonicalHasher`] created for one purpose
//! (`"kleene <purpose> v1"` as blake3's derive-key context), fed with the one canonical
//! encoding of a value: its [`Canonical`] implementation, written once per digested type.
//! Two different purposes never collide, and `("ab", "c")` never digests like
//! `("a", "bc")`. Encodings are a persisted format (journals, checkpoints and acceptance
//! records carry the digests), so they never change without a new purpose version.
//!
//! ```
//! use kleene::id::Digest;
//!
//! let d: Digest = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262".parse()?;
//! assert_eq!(d.to_string().len(), 64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use blake3::hazmat::HasherExt;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 32-byte blake3 digest, shown and serialised as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

/// Why a string was refused as a [`Digest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestParseError {
    /// The string was not 64 characters long.
    #[error("parse digest: it must be 64 hex characters, got {len}")]
    Length {
        /// The length that was found.
        len: usize,
    },
    /// A character was not a lowercase hex digit.
    #[error("parse digest: non-hex character at byte {index}")]
    NotHex {
        /// Its byte offset.
        index: usize,
    },
}

impl Digest {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Wraps raw bytes (for example a digest read from a foreign record).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl From<blake3::Hash> for Digest {
    fn from(h: blake3::Hash) -> Self {
        Self(*h.as_bytes())
    }
}

impl Digest {
    /// The lower-case hex text, on the stack: every journaled event and closure record shows
    /// digests, so they are written in one piece, never formatted byte by byte.
    fn hex(&self) -> HexText {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 64];
        for (pair, b) in text.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0xf)];
        }
        HexText(text)
    }
}

/// The 64 hex digits of a digest.
struct HexText([u8; 64]);

impl HexText {
    fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into it.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl std::str::FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 64 {
            return Err(DigestParseError::Length { len: s.len() });
        }
        let mut out = [0u8; 32];
        let bytes = s.as_bytes();
        for (i, slot) in out.iter_mut().enumerate() {
            let hi = hex_val(bytes[2 * i]).ok_or(DigestParseError::NotHex { index: 2 * i })?;
            let lo =
                hex_val(bytes[2 * i + 1]).ok_or(DigestParseError::NotHex { index: 2 * i + 1 })?;
            *slot = (hi << 4) | lo;
        }
        Ok(Self(out))
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            // A string in one piece: `collect_str` would pass it through a formatter.
            s.serialize_str(self.hex().as_str())
        } else {
            self.0.serialize(s)
        }
    }
}

/// The 32 raw bytes, exactly as the serde form above writes them to bincode (a tuple of 32
/// `u8`), in one write: checkpoints are encoded with bincode's own encoder.
#[doc(hidden)]
impl bincode::Encode for Digest {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        bincode::enc::write::Writer::write(encoder.writer(), &self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            s.parse().map_err(serde::de::Error::custom)
        } else {
            <[u8; 32]>::deserialize(d).map(Self)
        }
    }
}

/// A blake3 hasher for one purpose, fed with [`Canonical`] values so the encoding is
/// canonical: the same logical value gives the same digest on every machine.
///
/// The encoding arrives in many small pieces (an eight-byte length, a short id), and each
/// `blake3::Hasher::update` call has a fixed cost larger than hashing a few bytes, so the
/// pieces are gathered in a small buffer and handed to blake3 together. The digest is that
/// of the bytes in order, however they were split.
///
/// blake3's own state (2 KiB) is made only once more than a buffer's worth was fed, and
/// boxed: most digests (a call's input, an empty candidate) fit the buffer whole, and such
/// a hasher is cloned from a template and moved by value for each of them, which copied
/// those 2 KiB two or three times per digest. A digest that fits is made like a one-shot
/// `blake3` hash of the buffer: the same bytes, so the same digest.
#[derive(Clone)]
pub(crate) struct CanonicalHasher {
    key: [u8; 32],
    hasher: Option<Box<blake3::Hasher>>,
    pending: usize,
    buffer: [u8; BUFFER_LEN],
}

/// Bytes gathered before they are handed to blake3: most digested values (an audit entry,
/// a token) fit whole, and a larger piece (a 4 KiB test output) bypasses the buffer.
const BUFFER_LEN: usize = 256;

impl CanonicalHasher {
    /// A hasher whose derive-key context is `"kleene {purpose} v1"`.
    ///
    /// Deriving a purpose's key costs a blake3 compression and a formatted string; each
    /// thread derives it once per purpose and keeps it (see [`context_key`]).
    pub(crate) fn new(purpose: &'static str) -> Self {
        Self::with_key(context_key(purpose))
    }

    fn with_key(key: [u8; 32]) -> Self {
        Self {
            key,
            hasher: None,
            pending: 0,
            buffer: [0; BUFFER_LEN],
        }
    }

    /// Feeds `value`'s canonical encoding.
    pub(crate) fn put<T: Canonical + ?Sized>(&mut self, value: &T) -> &mut Self {
        value.encode(self);
        self
    }

    /// Feeds a sequence as a list: its length, then each item, so a sequence encodes as a
    /// `Vec` of the same items does, without collecting one.
    pub(crate) fn seq<I>(&mut self, items: I) -> &mut Self
    where
        I: ExactSizeIterator,
        I::Item: Canonical,
    {
        self.fixed(&(items.len() as u64).to_le_bytes());
        for item in items {
            item.encode(self);
        }
        self
    }

    pub(crate) fn finish(&mut self) -> Digest {
        let pending = &self.buffer[..self.pending];
        let hash = match self.hasher.as_deref_mut() {
            Some(hasher) => {
                hasher.update(pending);
                self.pending = 0;
                hasher.finalize()
            }
            // Made in place and dropped here: nothing of it is copied.
            None => blake3::Hasher::new_from_context_key(&self.key)
                .update(pending)
                .finalize(),
        };
        Digest::from(hash)
    }

    /// Raw bytes of a fixed width (integers, digests, tags): no length prefix.
    fn fixed(&mut self, bytes: &[u8]) {
        if let Some(room) = self
            .buffer
            .get_mut(self.pending..self.pending + bytes.len())
        {
            room.copy_from_slice(bytes);
            self.pending += bytes.len();
            return;
        }
        self.flush();
        match self.buffer.get_mut(..bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.pending = bytes.len();
            }
            None => {
                self.blake3().update(bytes);
            }
        }
    }

    /// A variable-length field: its length, then its bytes.
    fn field(&mut self, bytes: &[u8]) {
        self.fixed(&(bytes.len() as u64).to_le_bytes());
        self.fixed(bytes);
    }

    /// Hands the gathered bytes to blake3.
    fn flush(&mut self) {
        let Self {
            key,
            hasher,
            pending,
            buffer,
        } = self;
        state(hasher, key).update(&buffer[..*pending]);
        *pending = 0;
    }

    /// blake3's state, made (from the purpose's key) the first time it is needed.
    fn blake3(&mut self) -> &mut blake3::Hasher {
        state(&mut self.hasher, &self.key)
    }
}

/// The state in `hasher`, made from `key` if there is none yet (taking the two fields, so a
/// caller may read the buffer beside it).
fn state<'h>(
    hasher: &'h mut Option<Box<blake3::Hasher>>,
    key: &[u8; 32],
) -> &'h mut blake3::Hasher {
    hasher.get_or_insert_with(|| Box::new(blake3::Hasher::new_from_context_key(key)))
}

/// A purpose whose context key is derived once per process and kept in place: for the
/// hottest digests (an audit entry per closure step), where even the per-thread lookup of
/// [`CanonicalHasher::new`] shows. Declare it as a `static`.
pub(crate) struct Purpose {
    name: &'static str,
    key: std::sync::OnceLock<[u8; 32]>,
}

impl Purpose {
    /// The purpose `name` (the digests are those of [`CanonicalHasher::new`]`(name)`).
    pub(crate) const fn new(name: &'static str) -> Self {
        Self {
            name,
            key: std::sync::OnceLock::new(),
        }
    }

    /// A hasher for this purpose.
    pub(crate) fn hasher(&self) -> CanonicalHasher {
        let key = self.key.get_or_init(|| {
            blake3::hazmat::hash_derive_key_context(&format!("kleene {} v1", self.name))
        });
        CanonicalHasher::with_key(*key)
    }
}

/// The blake3 context key of `purpose` (the hash of `"kleene {purpose} v1"` in derive-key
/// mode), derived once per thread and purpose.
///
/// The cache is keyed by the purpose string's address and length: a `&'static str` is never
/// freed, so an address names one text for the life of the process (the same text at two
/// addresses is merely derived twice). Purposes are string literals, a few dozen at most.
fn context_key(purpose: &'static str) -> [u8; 32] {
    thread_local! {
        static KEYS: std::cell::RefCell<Vec<(usize, usize, [u8; 32])>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let at = (purpose.as_ptr() as usize, purpose.len());
    KEYS.with_borrow_mut(|keys| {
        if let Some((_, _, key)) = keys.iter().find(|(p, n, _)| (*p, *n) == at) {
            return *key;
        }
        let key = blake3::hazmat::hash_derive_key_context(&format!("kleene {purpose} v1"));
        keys.push((at.0, at.1, key));
        key
    })
}

impl Digest {
    /// The digest of `value`'s canonical encoding under `purpose`.
    pub(crate) fn of<T: Canonical + ?Sized>(purpose: &'static str, value: &T) -> Self {
        CanonicalHasher::new(purpose).put(value).finish()
    }
}

/// A value with one canonical encoding: what every digest of it covers.
///
/// Implemented once per digested type, with [`canonical_struct!`] or [`canonical_enum!`]
/// where the encoding is the fields in order; those macros destructure exhaustively, so a
/// field added to a type and not to its encoding does not compile. Enums encode a stable
/// tag (an `as_str()` code or a number) per variant, never their `Display` text. The
/// building blocks:
///
/// - strings, byte strings and ids: length, then bytes;
/// - `u32`, `u64` and `bool`: eight little-endian bytes; a digest: its 32 bytes; a
///   [`ByteTag`]: one byte;
/// - `Option<T>`: `0u64`, or `1u64` then the value; lists, sets and maps: their length, then
///   each item (a map's in key order); tuples: each element in turn.
pub(crate) trait Canonical {
    /// Feeds the encoding to `h`.
    fn encode(&self, h: &mut CanonicalHasher);
}

impl<T: Canonical + ?Sized> Canonical for &T {
    fn encode(&self, h: &mut CanonicalHasher) {
        (**self).encode(h);
    }
}

impl Canonical for str {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.field(self.as_bytes());
    }
}

impl Canonical for String {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.field(self.as_bytes());
    }
}

impl Canonical for [u8] {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.field(self);
    }
}

impl Canonical for u64 {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.fixed(&self.to_le_bytes());
    }
}

impl Canonical for u32 {
    fn encode(&self, h: &mut CanonicalHasher) {
        u64::from(*self).encode(h);
    }
}

impl Canonical for bool {
    fn encode(&self, h: &mut CanonicalHasher) {
        u64::from(*self).encode(h);
    }
}

/// A one-byte tag: what [`OptByte`] and a few two-way enums write before their value.
pub(crate) struct ByteTag(pub(crate) u8);

impl Canonical for ByteTag {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.fixed(&[self.0]);
    }
}

impl Canonical for Digest {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.fixed(&self.0);
    }
}

impl<T: Canonical> Canonical for Option<T> {
    fn encode(&self, h: &mut CanonicalHasher) {
        match self {
            None => h.put(&0u64),
            Some(v) => h.put(&1u64).put(v),
        };
    }
}

/// An optional value with a one-byte tag (`0`, or `1` then the value), as the optional
/// strings of the first digests (a plan task's module, a drained task's blocker) were
/// encoded; kept so their digests stay what they were.
pub(crate) struct OptByte<'a, T: ?Sized>(pub(crate) Option<&'a T>);

impl<T: Canonical + ?Sized> Canonical for OptByte<'_, T> {
    fn encode(&self, h: &mut CanonicalHasher) {
        match self.0 {
            None => h.put(&ByteTag(0)),
            Some(v) => h.put(&ByteTag(1)).put(v),
        };
    }
}

impl<T: Canonical> Canonical for [T] {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.seq(self.iter());
    }
}

impl<T: Canonical> Canonical for Vec<T> {
    fn encode(&self, h: &mut CanonicalHasher) {
        self.as_slice().encode(h);
    }
}

impl<T: Canonical> Canonical for std::collections::BTreeSet<T> {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.seq(self.iter());
    }
}

impl<K: Canonical, V: Canonical> Canonical for std::collections::BTreeMap<K, V> {
    fn encode(&self, h: &mut CanonicalHasher) {
        h.seq(self.iter());
    }
}

/// A list whose order carries no meaning: encoded sorted (and, for a set, without
/// duplicates), so the same members in any order give the same digest.
pub(crate) struct Unordered<'a, T> {
    items: &'a [T],
    dedup: bool,
}

impl<'a, T: Ord> Unordered<'a, T> {
    /// The members of `items` as a set: sorted, each once.
    pub(crate) fn set(items: &'a [T]) -> Self {
        Self { items, dedup: true }
    }

    /// The members of `items` sorted, repeats kept.
    pub(crate) fn sorted(items: &'a [T]) -> Self {
        Self {
            items,
            dedup: false,
        }
    }
}

impl<T: Canonical + Ord> Canonical for Unordered<'_, T> {
    fn encode(&self, h: &mut CanonicalHasher) {
        // Lists are usually in order already; only an unsorted one pays for a sorted copy.
        let ordered = self.items.windows(2).all(|w| match self.dedup {
            true => w[0] < w[1],
            false => w[0] <= w[1],
        });
        if ordered {
            h.seq(self.items.iter());
            return;
        }
        let mut sorted: Vec<&T> = self.items.iter().collect();
        sorted.sort_unstable();
        if self.dedup {
            sorted.dedup();
        }
        h.seq(sorted.into_iter());
    }
}

macro_rules! canonical_tuple {
    ($($name:ident),+) => {
        impl<$($name: Canonical),+> Canonical for ($($name,)+) {
            #[allow(non_snake_case, reason = "the bindings are named after their types")]
            fn encode(&self, h: &mut CanonicalHasher) {
                let ($($name,)+) = self;
                $( $name.encode(h); )+
            }
        }
    };
}

canonical_tuple!(A, B);
canonical_tuple!(A, B, C);
canonical_tuple!(A, B, C, D);
canonical_tuple!(A, B, C, D, E);
canonical_tuple!(A, B, C, D, E, F);

/// Ids and admitted paths enter a digest as their text, and the enums that have a stable
/// snake-case code (`as_str()`) as that code.
macro_rules! canonical_text {
    ($($ty:ty),+ $(,)?) => {
        $(impl $crate::id::digest::Canonical for $ty {
            fn encode(&self, h: &mut $crate::id::digest::CanonicalHasher) {
                $crate::id::digest::Canonical::encode(self.as_str(), h);
            }
        })+
    };
}

canonical_text!(
    crate::id::TaskId,
    crate::id::ValidatorId,
    crate::id::AgentId,
    crate::id::ChannelId,
    crate::id::SessionMode,
    crate::id::ProjectId,
);

/// Implements [`Canonical`] for a struct: the listed fields, in the order listed. A field
/// may be given as `field => expression` to encode what the expression makes of it (a
/// large value by its digest, say), and fields a digest deliberately leaves out are named
/// after `skip`. The fields are destructured without `..`, so a field added to the struct
/// and listed nowhere does not compile.
macro_rules! canonical_struct {
    (
        $ty:ident { $($field:ident $(=> $value:expr)?),* $(,)? }
        $(skip { $($skipped:ident),* $(,)? })?
    ) => {
        impl $crate::id::digest::Canonical for $ty {
            fn encode(&self, h: &mut $crate::id::digest::CanonicalHasher) {
                let $ty { $($field,)* $($($skipped: _,)*)? } = self;
                $( $crate::id::digest::canonical_struct!(@field h, $field $(, $value)?); )*
            }
        }
    };
    (@field $h:ident, $field:ident) => {
        $crate::id::digest::Canonical::encode($field, $h);
    };
    (@field $h:ident, $field:ident, $value:expr) => {
        $crate::id::digest::Canonical::encode(&$value, $h);
    };
}

/// Implements [`Canonical`] for an enum: each variant's tag (any canonical value: an
/// `as_str()` code, a number), then its fields in the order listed, written
/// `Variant { field, … } => tag`, `Variant(a, …) => tag` or `Variant => tag`. The match is
/// exhaustive and destructures without `..`, so a new variant or field does not compile
/// until it is encoded.
macro_rules! canonical_enum {
    (
        $ty:ident {
            $(
                $variant:ident
                $({ $($field:ident $(=> $value:expr)?),* $(,)? })?
                $(( $($positional:ident),* $(,)? ))?
                => $tag:expr
            ),* $(,)?
        }
    ) => {
        impl $crate::id::digest::Canonical for $ty {
            fn encode(&self, h: &mut $crate::id::digest::CanonicalHasher) {
                match self {
                    $(
                        $ty::$variant $({ $($field),* })? $(( $($positional),* ))? => {
                            $crate::id::digest::Canonical::encode(&$tag, h);
                            $($( $crate::id::digest::canonical_struct!(@field h, $field $(, $value)?); )*)?
                            $($( $crate::id::digest::Canonical::encode($positional, h); )*)?
                        }
                    )*
                }
            }
        }
    };
}

pub(crate) use {canonical_enum, canonical_struct, canonical_text};

#[cfg(test)]
mod tests {
    use super::*;

    /// Gathered in the buffer, split across it, larger than it, or cloned from a template:
    /// every way a value reaches the hasher gives blake3's derive-key digest of its bytes.
    #[test]
    fn buffered_and_direct_pieces_digest_the_same_bytes() {
        let context = "kleene t v1";
        let edges = [BUFFER_LEN - 17, BUFFER_LEN - 16, BUFFER_LEN - 8, BUFFER_LEN];
        for len in [0, 1, BUFFER_LEN + 1, 3 * BUFFER_LEN, 64 * 1024]
            .into_iter()
            .chain(edges)
        {
            let body = vec![7u8; len];
            let mut encoding = (len as u64).to_le_bytes().to_vec();
            encoding.extend_from_slice(&body);
            encoding.extend_from_slice(&5u64.to_le_bytes());
            let expected = Digest::from_bytes(blake3::derive_key(context, &encoding));
            let fed = CanonicalHasher::new("t")
                .put(body.as_slice())
                .put(&5u64)
                .finish();
            assert_eq!(fed, expected, "{len} bytes");
            let mut template = CanonicalHasher::new("t");
            template.put(body.as_slice());
            assert_eq!(
                template.clone().put(&5u64).finish(),
                expected,
                "{len} bytes, cloned"
            );
        }
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let d = Digest::of("test", "x");
        let s = d.to_string();
        assert_eq!(s.parse::<Digest>(), Ok(d));
        assert_eq!(
            "ab".parse::<Digest>(),
            Err(DigestParseError::Length { len: 2 })
        );
        let bad = format!("{}G", &s[..63]);
        assert_eq!(
            bad.parse::<Digest>(),
            Err(DigestParseError::NotHex { index: 63 })
        );
    }

    #[test]
    fn fields_are_length_prefixed_and_domain_separated() {
        let ab_c = Digest::of("t", &("ab", "c"));
        let a_bc = Digest::of("t", &("a", "bc"));
        assert_ne!(ab_c, a_bc);
        assert_ne!(ab_c, Digest::of("u", &("ab", "c")));
        let none = Digest::of("t", &OptByte::<str>(None));
        let empty = Digest::of("t", &OptByte(Some("")));
        assert_ne!(none, empty);
        assert_ne!(Digest::of("t", &None::<u32>), Digest::of("t", &Some(0u32)));
    }

    #[test]
    fn a_tuple_is_its_elements_and_a_sequence_is_a_list() {
        let tuple = Digest::of("t", &(1u32, "a", true));
        let fed = CanonicalHasher::new("t")
            .put(&1u64)
            .put("a")
            .put(&1u64)
            .finish();
        assert_eq!(tuple, fed);
        let list = vec!["a".to_owned(), "b".to_owned()];
        let seq = CanonicalHasher::new("t").seq(list.iter()).finish();
        assert_eq!(seq, Digest::of("t", &list));
        assert_ne!(seq, Digest::of("t", &(&list[0], &list[1])));
    }

    #[test]
    fn a_kept_purpose_digests_as_its_name_does() {
        static KEPT: Purpose = Purpose::new("t");
        for _ in 0..2 {
            let kept = KEPT.hasher().put(&(1u32, "a")).finish();
            assert_eq!(kept, Digest::of("t", &(1u32, "a")));
        }
        assert_ne!(KEPT.hasher().finish(), CanonicalHasher::new("u").finish());
    }

    #[test]
    fn an_unordered_list_ignores_order_and_a_set_repeats() {
        let set = |items: &[u32]| Digest::of("t", &Unordered::set(items));
        let sorted = |items: &[u32]| Digest::of("t", &Unordered::sorted(items));
        assert_eq!(set(&[3, 1, 2]), set(&[1, 2, 3]));
        assert_eq!(set(&[1, 2, 2, 3]), set(&[3, 2, 1]));
        assert_eq!(set(&[1, 2, 3]), Digest::of("t", &vec![1u32, 2, 3]));
        assert_eq!(sorted(&[2, 1, 2]), Digest::of("t", &vec![1u32, 2, 2]));
        assert_ne!(sorted(&[2, 1, 2]), sorted(&[1, 2]));
    }

    struct Pair {
        name: String,
        count: u32,
        cache: u64,
    }

    canonical_struct!(Pair {
        name,
        count => count + 1,
    } skip {
        cache,
    });

    enum Shape {
        Dot,
        Line { len: u32 },
        Box(u32, u32),
    }

    canonical_enum!(Shape {
        Dot => "dot",
        Line { len } => "line",
        Box(w, h) => 7u64,
    });

    #[test]
    fn the_macros_encode_the_listed_fields_in_order_after_the_tag() {
        let pair = Pair {
            name: "a".to_owned(),
            count: 1,
            cache: 9,
        };
        assert_eq!(Digest::of("t", &pair), Digest::of("t", &("a", 2u32)));
        let cached = Pair { cache: 10, ..pair };
        assert_ne!(cached.cache, 9);
        assert_eq!(Digest::of("t", &cached), Digest::of("t", &("a", 2u32)));
        assert_eq!(Digest::of("t", &Shape::Dot), Digest::of("t", "dot"));
        let line = Shape::Line { len: 3 };
        assert_eq!(Digest::of("t", &line), Digest::of("t", &("line", 3u32)));
        let rect = Shape::Box(2, 5);
        assert_eq!(Digest::of("t", &rect), Digest::of("t", &(7u64, 2u32, 5u32)));
    }

    /// A persisted closure state seals its policy: every setting must be in the encoding.
    #[test]
    fn every_setting_of_a_recovery_policy_is_encoded() {
        use crate::closure::{RecoveryPolicy, step::RecoverOn, verdict::VerdictNormalizer};
        let base = || RecoveryPolicy::builder();
        let policies = [
            base(),
            base().max_recovery_depth(2),
            base().max_total_fix_attempts(4),
            base().max_inner_iterations(2),
            base().recover_on(RecoverOn::BlockersAndWarnings),
            base().normalizer(VerdictNormalizer::exact()),
        ];
        let digests: Vec<Digest> = policies
            .into_iter()
            .map(|p| Digest::of("t", &p.build().unwrap()))
            .collect();
        for (i, d) in digests.iter().enumerate() {
            assert!(
                !digests[i + 1..].contains(d),
                "policy {i} digests like a later one"
            );
        }
    }

    #[test]
    fn serde_forms() {
        let d = Digest::of("t", "");
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json.len(), 66);
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
    }
}
