//! Ed25519 signatures in DSSE envelopes: what a key kept outside the state directory adds to
//! kleene's checksums.
//!
//! A checksum or digest catches accidental damage, but anyone who can write the state
//! directory can recompute one over forged content. A signature cannot be recomputed
//! without the secret key, so with the key outside the state directory a forged record
//! fails verification against the public key. The threat model in `SECURITY.md` says what
//! each defence does and does not cover.
//!
//! ```
//! use kleene::signing::{Envelope, SigningKey};
//!
//! let key = SigningKey::from_seed([7; 32]);
//! let envelope = key.sign("application/vnd.in-toto+json", br#"{"_type":"x"}"#);
//! let public = key.public_key();
//!
//! // The envelope travels as JSON; the verifier holds only the public key.
//! let read = Envelope::from_json(&envelope.to_json())?;
//! assert_eq!(public.verify(&read)?, br#"{"_type":"x"}"#);
//!
//! // Another key's public half refuses it.
//! let other = SigningKey::from_seed([8; 32]).public_key();
//! assert!(other.verify(&read).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Formats
//!
//! - **Envelope** (DSSE v1, what in-toto and SLSA verifiers read): a JSON object
//!   `{"payload": B64, "payloadType": TYPE, "signatures": [{"keyid": ID, "sig": B64}]}`,
//!   standard base64 with padding. The signature is ed25519 over the DSSE pre-authentication
//!   encoding `"DSSEv1" SP len(TYPE) SP TYPE SP len(payload) SP payload`, lengths in decimal
//!   ASCII, payload as raw bytes (see [`pae`]).
//! - **Key id**: lowercase hex of sha256 over the 32-byte raw public key.
//! - **Secret key file**: PEM `PRIVATE KEY`, the PKCS#8 v1 form of an ed25519 seed (the 16
//!   DER bytes `302e020100300506032b657004220420` then the 32-byte seed), what
//!   `openssl genpkey -algorithm ed25519` writes.
//! - **Public key file**: PEM `PUBLIC KEY`, the SubjectPublicKeyInfo form (the 12 DER
//!   bytes `302a300506032b6570032100` then the 32-byte key), what `openssl pkey -pubout`
//!   writes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::Signer as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The DER prefix of a PKCS#8 v1 ed25519 private key; the 32-byte seed follows.
const PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// The DER prefix of an ed25519 SubjectPublicKeyInfo; the 32-byte key follows.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

const PRIVATE_LABEL: &str = "PRIVATE KEY";
const PUBLIC_LABEL: &str = "PUBLIC KEY";

/// The blake3 derive-key context of [`SigningKey::journal_mac_key`].
pub const JOURNAL_MAC_CONTEXT: &str = "kleene journal mac v1";

/// Why a key file was refused, or a key could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text is not one PEM block with the expected label.
    #[error(
        "read {label} file: it is not a PEM block \"-----BEGIN {label}-----\"; use a file \
         written by kleene keygen or openssl"
    )]
    NotPem {
        /// The label expected (`PRIVATE KEY` or `PUBLIC KEY`).
        label: &'static str,
    },
    /// The PEM body is not base64.
    #[error("read {label} file: its body is not base64 ({message}); the file is damaged")]
    Base64 {
        /// The label expected.
        label: &'static str,
        /// What the decoder reported.
        message: String,
    },
    /// The DER is not the one ed25519 form kleene reads.
    #[error(
        "read {label} file: it is not an ed25519 key in the form kleene reads ({len} DER \
         bytes); make one with kleene keygen or openssl genpkey -algorithm ed25519"
    )]
    NotEd25519 {
        /// The label expected.
        label: &'static str,
        /// The DER length found.
        len: usize,
    },
    /// The 32 bytes are not a point of the curve.
    #[error(
        "read PUBLIC KEY file: its 32 bytes are not an ed25519 public key; the file is damaged"
    )]
    BadPoint,
    /// The operating system's random generator failed.
    #[error("generate signing key: the system random generator failed: {message}; try again")]
    Random {
        /// What it reported.
        message: String,
    },
}

/// Why an envelope was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The text is not a DSSE envelope.
    #[error("read signature envelope: it is not a DSSE envelope: {message}")]
    Unreadable {
        /// What the reader reported.
        message: String,
    },
    /// No signature carries the key id of the public key given: signed by another key, or
    /// the key id was altered.
    #[error(
        "check signature: no signature by key {key_id} (the envelope has {}); verify with the \
         public key of the key that signed it",
        found_list(.found)
    )]
    NotSignedBy {
        /// The key id of the public key given.
        key_id: String,
        /// The key ids the envelope carries.
        found: Vec<String>,
    },
    /// A signature by the key is there but does not verify: the payload, its type or the
    /// signature was altered after signing.
    #[error(
        "check signature: the signature by key {key_id} does not match the payload; the \
         payload, its type or the signature was altered after signing"
    )]
    Invalid {
        /// The key id.
        key_id: String,
    },
}

fn found_list(found: &[String]) -> String {
    if found.is_empty() {
        "no signatures".to_owned()
    } else {
        format!("signatures by {}", found.join(", "))
    }
}

/// The DSSE pre-authentication encoding of `payload` of type `payload_type`: what is signed.
///
/// `"DSSEv1" SP len(type) SP type SP len(payload) SP payload`, lengths as decimal ASCII.
///
/// ```
/// assert_eq!(kleene::signing::pae("t", b"hi"), b"DSSEv1 1 t 2 hi");
/// ```
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// An ed25519 secret key (its 32-byte seed). The seed is wiped from memory when the key is
/// dropped, and `Debug` shows only the key id.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.public_key().key_id())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key from the operating system's random generator.
    ///
    /// # Errors
    ///
    /// [`KeyError::Random`] if the generator fails.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random {
            message: e.to_string(),
        })?;
        let key = Self::from_seed(seed);
        seed.fill(0);
        Ok(key)
    }

    /// The key with this 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// Reads a secret key file (PEM `PRIVATE KEY`, PKCS#8 v1; see the module docs).
    ///
    /// # Errors
    ///
    /// [`KeyError`] naming what is wrong with the file.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let mut der = pem_body(text, PRIVATE_LABEL)?;
        let seed = der
            .strip_prefix(&PKCS8_PREFIX[..])
            .and_then(|s| <[u8; 32]>::try_from(s).ok());
        let len = der.len();
        der.fill(0);
        let mut seed = seed.ok_or(KeyError::NotEd25519 {
            label: PRIVATE_LABEL,
            len,
        })?;
        let key = Self::from_seed(seed);
        seed.fill(0);
        Ok(key)
    }

    /// The secret key file text (PEM `PRIVATE KEY`). Keep it outside the state directory,
    /// readable only by its owner.
    pub fn to_pem(&self) -> String {
        let mut der = PKCS8_PREFIX.to_vec();
        der.extend_from_slice(self.0.as_bytes());
        let text = pem(PRIVATE_LABEL, &der);
        der.fill(0);
        text
    }

    /// The public half, for verifiers.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// `payload` of `payload_type` in a DSSE envelope signed by this key.
    pub fn sign(&self, payload_type: &str, payload: &[u8]) -> Envelope {
        let signature = self.0.sign(&pae(payload_type, payload));
        Envelope {
            payload_type: payload_type.to_owned(),
            payload: payload.to_vec(),
            signatures: vec![EnvelopeSignature {
                keyid: self.public_key().key_id(),
                sig: signature.to_bytes().to_vec(),
            }],
        }
    }

    /// The 32-byte key for a keyed MAC over journal records, derived from this key's seed:
    /// `blake3::derive_key("kleene journal mac v1", seed)`. One secret then protects both
    /// the journal and the signed acceptance, and the MAC key reveals nothing about the
    /// signing key.
    pub fn journal_mac_key(&self) -> [u8; 32] {
        blake3::derive_key(JOURNAL_MAC_CONTEXT, self.0.as_bytes())
    }

    /// The 32-byte key for the MAC that seals each entry of a cache of accepted results
    /// ([`FileCache::with_mac_key`](crate::batch::cache::FileCache::with_mac_key)), derived
    /// from this key's seed as the journal's is, under its own context: an entry sealed by
    /// one key is refused under another, and the MAC key reveals nothing about this one.
    pub fn cache_mac_key(&self) -> [u8; 32] {
        blake3::derive_key(CACHE_MAC_CONTEXT, self.0.as_bytes())
    }
}

/// The derive-key context of [`SigningKey::cache_mac_key`].
const CACHE_MAC_CONTEXT: &str = "kleene cache entry mac v1";

/// An ed25519 public key: what a verifier of signed acceptance holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// Reads a public key file (PEM `PUBLIC KEY`, SubjectPublicKeyInfo; see the module docs).
    ///
    /// # Errors
    ///
    /// [`KeyError`] naming what is wrong with the file.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let der = pem_body(text, PUBLIC_LABEL)?;
        let raw = der
            .strip_prefix(&SPKI_PREFIX[..])
            .and_then(|s| <[u8; 32]>::try_from(s).ok())
            .ok_or(KeyError::NotEd25519 {
                label: PUBLIC_LABEL,
                len: der.len(),
            })?;
        ed25519_dalek::VerifyingKey::from_bytes(&raw)
            .map(Self)
            .map_err(|_| KeyError::BadPoint)
    }

    /// The public key file text (PEM `PUBLIC KEY`).
    pub fn to_pem(&self) -> String {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.0.as_bytes());
        pem(PUBLIC_LABEL, &der)
    }

    /// The key id written into signatures: lowercase hex of sha256 over the raw key.
    pub fn key_id(&self) -> String {
        Sha256::digest(self.0.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Checks that `envelope` carries a valid signature by this key over its payload and
    /// payload type, and returns the payload.
    ///
    /// # Errors
    ///
    /// [`SignatureError::NotSignedBy`] when no signature carries this key's id,
    /// [`SignatureError::Invalid`] when one does but does not verify.
    pub fn verify<'e>(&self, envelope: &'e Envelope) -> Result<&'e [u8], SignatureError> {
        let key_id = self.key_id();
        let mine: Vec<_> = envelope
            .signatures
            .iter()
            .filter(|s| s.keyid == key_id)
            .collect();
        if mine.is_empty() {
            return Err(SignatureError::NotSignedBy {
                key_id,
                found: envelope
                    .signatures
                    .iter()
                    .map(|s| s.keyid.clone())
                    .collect(),
            });
        }
        let message = pae(&envelope.payload_type, &envelope.payload);
        let valid = mine.iter().any(|s| {
            <[u8; 64]>::try_from(s.sig.as_slice()).is_ok_and(|bytes| {
                self.0
                    .verify_strict(&message, &ed25519_dalek::Signature::from_bytes(&bytes))
                    .is_ok()
            })
        });
        if valid {
            Ok(&envelope.payload)
        } else {
            Err(SignatureError::Invalid { key_id })
        }
    }
}

/// A DSSE envelope: a payload, its type, and signatures over both (see the module docs for
/// the JSON form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    payload_type: String,
    payload: Vec<u8>,
    signatures: Vec<EnvelopeSignature>,
}

/// One signature of an [`Envelope`]: the signer's key id and the raw signature bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeSignature {
    keyid: String,
    sig: Vec<u8>,
}

impl EnvelopeSignature {
    /// The key id of the signer.
    pub fn key_id(&self) -> &str {
        &self.keyid
    }

    /// The raw signature bytes (64 for ed25519).
    pub fn signature(&self) -> &[u8] {
        &self.sig
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeWire {
    payload: String,
    #[serde(rename = "payloadType")]
    payload_type: String,
    signatures: Vec<SignatureWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureWire {
    keyid: String,
    sig: String,
}

impl Envelope {
    /// The payload type (a media type such as `application/vnd.in-toto+json`).
    pub fn payload_type(&self) -> &str {
        &self.payload_type
    }

    /// The payload bytes, not yet verified: check them with [`PublicKey::verify`].
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The signatures.
    pub fn signatures(&self) -> &[EnvelopeSignature] {
        &self.signatures
    }

    /// The envelope as one line of JSON (the form of a line of an in-toto `.intoto.jsonl`
    /// bundle).
    pub fn to_json(&self) -> String {
        let wire = EnvelopeWire {
            payload: BASE64.encode(&self.payload),
            payload_type: self.payload_type.clone(),
            signatures: self
                .signatures
                .iter()
                .map(|s| SignatureWire {
                    keyid: s.keyid.clone(),
                    sig: BASE64.encode(&s.sig),
                })
                .collect(),
        };
        // Strings and a list of string pairs always serialise.
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// Reads an envelope from its JSON form.
    ///
    /// # Errors
    ///
    /// [`SignatureError::Unreadable`] when it is not a DSSE envelope or its base64 is not
    /// standard base64.
    pub fn from_json(json: &str) -> Result<Self, SignatureError> {
        let unreadable = |message: String| SignatureError::Unreadable { message };
        let wire: EnvelopeWire =
            serde_json::from_str(json.trim_end()).map_err(|e| unreadable(e.to_string()))?;
        let payload = BASE64
            .decode(&wire.payload)
            .map_err(|e| unreadable(format!("payload: {e}")))?;
        let signatures = wire
            .signatures
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                BASE64
                    .decode(&s.sig)
                    .map(|sig| EnvelopeSignature {
                        keyid: s.keyid,
                        sig,
                    })
                    .map_err(|e| unreadable(format!("signatures[{i}].sig: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            payload_type: wire.payload_type,
            payload,
            signatures,
        })
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let body = BASE64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        // Base64 output is ASCII, so every chunk is UTF-8.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn pem_body(text: &str, label: &'static str) -> Result<Vec<u8>, KeyError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut lines = text.lines().map(str::trim).skip_while(|l| l.is_empty());
    if lines.next() != Some(begin.as_str()) {
        return Err(KeyError::NotPem { label });
    }
    let mut body = String::new();
    let mut ended = false;
    for line in lines.by_ref() {
        if line == end {
            ended = true;
            break;
        }
        body.push_str(line);
    }
    if !ended || lines.any(|l| !l.is_empty()) {
        return Err(KeyError::NotPem { label });
    }
    BASE64.decode(body).map_err(|e| KeyError::Base64 {
        label,
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_round_trip() {
        let key = SigningKey::from_seed([3; 32]);
        let again = SigningKey::from_pem(&key.to_pem()).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        let public = PublicKey::from_pem(&key.public_key().to_pem()).unwrap();
        assert_eq!(public, key.public_key());
        assert!(matches!(
            SigningKey::from_pem(&key.public_key().to_pem()),
            Err(KeyError::NotPem { .. })
        ));
        assert!(matches!(
            PublicKey::from_pem(&key.to_pem()),
            Err(KeyError::NotPem { .. })
        ));
        assert!(matches!(
            PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"),
            Err(KeyError::NotEd25519 { len: 3, .. })
        ));
    }

    #[test]
    fn openssl_key_files_are_read() {
        // Written by `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout`.
        let secret = "-----BEGIN PRIVATE KEY-----\n\
            MC4CAQAwBQYDK2VwBCIEIPcd4QpcjQRE6lzaipsdU+NyGMrzXxMYF+M63xExmZn3\n\
            -----END PRIVATE KEY-----\n";
        let public = "-----BEGIN PUBLIC KEY-----\n\
            MCowBQYDK2VwAyEA8K0HjJbaTmWTj0Kbijr8ix1HoClPPpFY/Kd8KvMWixM=\n\
            -----END PUBLIC KEY-----\n";
        let key = SigningKey::from_pem(secret).unwrap();
        assert_eq!(key.public_key(), PublicKey::from_pem(public).unwrap());
        assert_eq!(key.to_pem(), secret);
        assert_eq!(key.public_key().to_pem(), public);
    }

    #[test]
    fn the_rfc_8032_test_key_matches() {
        // RFC 8032 section 7.1, test 1: secret seed and public key.
        let seed: [u8; 32] =
            hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        let public: [u8; 32] =
            hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        let key = SigningKey::from_seed(seed);
        assert_eq!(key.public_key().0.as_bytes(), &public);
        let sig = key.0.sign(b"");
        assert_eq!(
            sig.to_bytes()[..8],
            hex::<8>("e5564300c360ac72")[..],
            "RFC 8032 signature of the empty message"
        );
    }

    fn hex<const N: usize>(s: &str) -> [u8; N] {
        let mut out = [0; N];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn the_journal_mac_key_is_derived_from_the_seed() {
        let key = SigningKey::from_seed([5; 32]);
        assert_eq!(
            key.journal_mac_key(),
            blake3::derive_key("kleene journal mac v1", &[5; 32])
        );
        assert_ne!(
            key.journal_mac_key(),
            SigningKey::from_seed([6; 32]).journal_mac_key()
        );
    }

    #[test]
    fn debug_shows_no_secret() {
        let key = SigningKey::from_seed([9; 32]);
        let shown = format!("{key:?}");
        assert!(shown.contains(&key.public_key().key_id()), "{shown}");
        assert!(!shown.contains("9, 9"), "{shown}");
    }

    #[test]
    fn generated_keys_differ() {
        let a = SigningKey::generate().unwrap();
        let b = SigningKey::generate().unwrap();
        assert_ne!(a.public_key(), b.public_key());
    }
}
