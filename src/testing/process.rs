//! The contained host's socket decoders, exposed for fuzzing (features `testing` and
//! `process`): what arrives on the socket is read by the same code kleene and the host use.
//!
//! ```
//! use kleene::testing::process::decode_host_frames;
//!
//! // A frame that claims 4 GiB is refused before anything is allocated for it.
//! assert_eq!(decode_host_frames(&[0xff, 0xff, 0xff, 0xff, b'{']), (0, 0));
//! // A hello frame decodes at kleene's end; the host's end refuses it as a request.
//! let hello = br#"{"protocol":"x","pid":7,"reaper":false}"#;
//! let mut frame = (hello.len() as u32).to_le_bytes().to_vec();
//! frame.extend_from_slice(hello);
//! assert_eq!(decode_host_frames(&frame), (1, 0));
//! ```

/// Reads `bytes` as both ends of the contained host's socket would: kleene's end (the
/// host's hello, then its answers) and the host's end (requests, each maybe followed by a
/// frame of stdin). Returns how many frames each end decoded, `(kleene's, the host's)`,
/// before the bytes ran out or a frame was refused. It never panics, and memory grows with
/// the bytes given, never with what a length field claims.
pub fn decode_host_frames(bytes: &[u8]) -> (usize, usize) {
    crate::process::decode_both_ends(bytes)
}
