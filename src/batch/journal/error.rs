//! Why a journal could not be loaded, appended to, repaired or compacted, and what is wrong
//! with a damaged record.

use std::io;
use std::path::PathBuf;

use super::TornTail;
use crate::batch::evidence::FoldError;
use crate::batch::journal::backend::BackendError;
use crate::checkpoint::CheckpointError;
use crate::id::ChannelId;

/// What is wrong with a damaged journal record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordDamage {
    /// The bytes do not start like a journal record of any version.
    #[error("it does not start like a journal record")]
    NotARecord,
    /// The header's own check does not match: its length or kind cannot be trusted.
    #[error("its header checksum does not match")]
    HeaderChecksum,
    /// The plain checksum over the record does not match.
    #[error("its checksum does not match")]
    Checksum,
    /// The keyed MAC does not verify under the configured key.
    #[error("its MAC does not verify with the configured journal key")]
    Mac,
    /// The header passed its check but names a record format or seal this build cannot read.
    #[error(
        "its header declares record format version {version} with seal kind {seal}, which this build cannot read"
    )]
    Unsupported {
        /// The record format version.
        version: u16,
        /// The seal kind.
        seal: u8,
    },
    /// The header passed its check but declares a body beyond [`checkpoint::MAX_PAYLOAD_LEN`](crate::checkpoint::MAX_PAYLOAD_LEN).
    #[error("its header declares a {declared}-byte body, more than the {max} allowed")]
    TooLarge {
        /// The declared body length.
        declared: u64,
        /// The bound.
        max: u64,
    },
    /// A record of format version 1 (a bare checkpoint envelope) does not open.
    #[error(transparent)]
    Envelope(CheckpointError),
}

/// Why a journal could not be loaded, appended to, repaired or compacted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// An I/O operation on `path` failed.
    #[error("access journal at {}", .path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// An event or snapshot did not encode.
    #[error("encode journal record for channel {channel}")]
    Encode {
        /// The channel.
        channel: ChannelId,
        /// The codec's error.
        #[source]
        source: CheckpointError,
    },
    /// A record passed its checks but is not an event (or a snapshot anywhere but first):
    /// the journal was written by something else, and cutting it would lose data.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} holds a foreign entry"
    )]
    Foreign {
        /// The channel.
        channel: ChannelId,
        /// The record's number, counting from 1.
        record: u64,
        /// Where the record starts.
        offset: u64,
        /// Why it was refused.
        #[source]
        source: CheckpointError,
    },
    /// A record is damaged and is not an incomplete final record: corruption, not a torn
    /// write. Nothing was changed.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} is damaged ({damage}) and is not an interrupted final write; nothing was changed: restore the journal file from a copy, or move it aside and start the run again"
    )]
    Corrupt {
        /// The channel.
        channel: ChannelId,
        /// The damaged record's number, counting from 1.
        record: u64,
        /// Where the damaged record starts.
        offset: u64,
        /// What is wrong with it.
        damage: RecordDamage,
    },
    /// A journal key is configured but a record carries only a plain checksum.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} carries no MAC, but a journal key is configured, so it cannot be trusted; nothing was changed: read the journal without the key only if you trust the directory, or start a new run with the key"
    )]
    Unkeyed {
        /// The channel.
        channel: ChannelId,
        /// The record's number, counting from 1.
        record: u64,
        /// Where the record starts.
        offset: u64,
    },
    /// A record is sealed with a journal key, but none is configured.
    #[error(
        "read journal of channel {channel}: record {record} at byte {offset} is sealed with a journal key, but none is configured: configure the key the journal was written with"
    )]
    KeyRequired {
        /// The channel.
        channel: ChannelId,
        /// The record's number, counting from 1.
        record: u64,
        /// Where the record starts.
        offset: u64,
    },
    /// A journal opened with [`FileJournal::open_read_only`] was asked to write.
    ///
    /// [`FileJournal::open_read_only`]: super::FileJournal::open_read_only
    #[error(
        "write journal of channel {channel}: it was opened read-only; open it with FileJournal::open to write"
    )]
    ReadOnly {
        /// The channel.
        channel: ChannelId,
    },
    /// An append found the journal ending in an incomplete record.
    #[error(
        "append to journal of channel {channel}: it ends in an incomplete record at byte {} ({} bytes); cut it first with repair_torn_tail",
        .torn.offset, .torn.discarded
    )]
    TornTailNotRepaired {
        /// The channel.
        channel: ChannelId,
        /// The incomplete tail.
        torn: TornTail,
    },
    /// A store that is not a file system (a database, an engine) refused.
    #[error("access journal store for channel {channel}: {detail}")]
    Store {
        /// The channel.
        channel: ChannelId,
        /// What the store said.
        detail: String,
        /// The store's own error, when it has one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The journaled events do not fold into evidence.
    #[error("fold journal of channel {channel}")]
    Fold {
        /// The channel.
        channel: ChannelId,
        /// The fold's error.
        #[source]
        source: FoldError,
    },
}

impl JournalError {
    pub(super) fn from_backend(e: BackendError) -> Self {
        match e {
            BackendError::Io { path, source } => JournalError::Io { path, source },
            BackendError::Store {
                channel,
                detail,
                source,
            } => JournalError::Store {
                channel,
                detail,
                source,
            },
        }
    }

    /// True when the journal holds damaged, unkeyed or foreign records: its bytes, not the
    /// environment, are at fault.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            JournalError::Corrupt { .. }
                | JournalError::Unkeyed { .. }
                | JournalError::KeyRequired { .. }
                | JournalError::Foreign { .. }
        )
    }

    /// The byte offset of the record at fault, if the error names one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            JournalError::Corrupt { offset, .. }
            | JournalError::Unkeyed { offset, .. }
            | JournalError::KeyRequired { offset, .. }
            | JournalError::Foreign { offset, .. } => Some(*offset),
            JournalError::TornTailNotRepaired { torn, .. } => Some(torn.offset),
            _ => None,
        }
    }

    /// The number (counting from 1) of the record at fault, if the error names one.
    pub fn record(&self) -> Option<u64> {
        match self {
            JournalError::Corrupt { record, .. }
            | JournalError::Unkeyed { record, .. }
            | JournalError::KeyRequired { record, .. }
            | JournalError::Foreign { record, .. } => Some(*record),
            _ => None,
        }
    }
}
