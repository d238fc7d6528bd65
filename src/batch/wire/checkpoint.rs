//! Where each batch payload kind meets the checkpoint envelope: its kind, its versions, and
//! the wire record it is written as.

use crate::checkpoint::{self, Checkpoint, CheckpointError, sealed};

impl sealed::Sealed for crate::batch::evidence::EvidenceEvent {}

/// One journal record: a batch evidence event, encoded as its own record
/// (`batch::wire::event::EvidenceEventV2`). Version 2 added the closure events (fix drawn,
/// closure settled) as new variants after the old ones, so a version-1 payload decodes as
/// the same record and is refused if it holds one of them; a build that reads only
/// version 1 refuses version-2 events by number.
impl Checkpoint for crate::batch::evidence::EvidenceEvent {
    const KIND: [u8; 4] = *b"BEVT";
    const VERSION: u16 = 2;
    const MIN_VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::encode_payload_into(&super::event::EvidenceEventV2::from(self), out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        let record: super::event::EvidenceEventV2<'_> = checkpoint::decode_payload(payload)?;
        Ok(record.into())
    }

    fn migrate(_version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        let record: super::event::EvidenceEventV2<'_> = checkpoint::decode_payload(payload)?;
        Ok(record
            .of_version_one()
            .map_err(checkpoint::invalid::<Self>)?
            .into())
    }
}

impl sealed::Sealed for crate::batch::BatchEvidence {}

/// A journal snapshot: folded batch evidence, encoded as its own record
/// (`batch::wire::snapshot::BatchEvidenceV2`) and checked before it is trusted. Version 2 added
/// the closures of the calls; a version-1 snapshot is migrated with none.
impl Checkpoint for crate::batch::BatchEvidence {
    const KIND: [u8; 4] = *b"EVID";
    const VERSION: u16 = 2;
    const MIN_VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::encode_payload_into(&super::snapshot::BatchEvidenceV2::from(self), out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        let record: super::snapshot::BatchEvidenceV2<'_> = checkpoint::decode_payload(payload)?;
        Self::try_from(record).map_err(checkpoint::invalid::<Self>)
    }

    fn migrate(_version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        let v1: super::snapshot::BatchEvidenceV1<'_> = checkpoint::decode_payload(payload)?;
        Self::try_from(super::snapshot::BatchEvidenceV2::from(v1))
            .map_err(checkpoint::invalid::<Self>)
    }
}
