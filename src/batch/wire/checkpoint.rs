//! Where each batch payload kind meets the checkpoint envelope: its kind, its versions, and
//! the wire record it is written as.

use crate::checkpoint::{self, Checkpoint, CheckpointError, sealed};

impl sealed::Sealed for crate::batch::evidence::EvidenceEvent {}

/// One journal record: a batch evidence event, encoded as its own record
/// (`batch::wire::event::EvidenceEventV3`). Version 2 added the closure events (fix drawn,
/// closure settled) and version 3 the reused output, each as new variants after the old
/// ones, so an older payload decodes as the same record and is refused if it holds a newer
/// variant; a build that reads only older versions refuses newer events by number.
impl Checkpoint for crate::batch::evidence::EvidenceEvent {
    const KIND: [u8; 4] = *b"BEVT";
    const VERSION: u16 = 3;
    const MIN_VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::encode_payload_into(&super::event::EvidenceEventV3::from(self), out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        let record: super::event::EvidenceEventV3<'_> = checkpoint::decode_payload(payload)?;
        Ok(record.into())
    }

    fn migrate(version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        let record: super::event::EvidenceEventV3<'_> = checkpoint::decode_payload(payload)?;
        Ok(record
            .of_version(version)
            .map_err(checkpoint::invalid::<Self>)?
            .into())
    }
}

impl sealed::Sealed for crate::batch::BatchEvidence {}

/// A journal snapshot: folded batch evidence, encoded as its own record
/// (`batch::wire::snapshot::BatchEvidenceV3`) and checked before it is trusted. Version 2 added
/// the closures of the calls, version 3 the reused outputs; an older snapshot is migrated
/// with none.
impl Checkpoint for crate::batch::BatchEvidence {
    const KIND: [u8; 4] = *b"EVID";
    const VERSION: u16 = 3;
    const MIN_VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::encode_payload_into(&super::snapshot::BatchEvidenceV3::from(self), out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        let record: super::snapshot::BatchEvidenceV3<'_> = checkpoint::decode_payload(payload)?;
        Self::try_from(record).map_err(checkpoint::invalid::<Self>)
    }

    fn migrate(version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        use super::snapshot::{BatchEvidenceV1, BatchEvidenceV2, BatchEvidenceV3};
        let v2 = if version == 1 {
            BatchEvidenceV2::from(checkpoint::decode_payload::<BatchEvidenceV1<'_>>(payload)?)
        } else {
            checkpoint::decode_payload::<BatchEvidenceV2<'_>>(payload)?
        };
        Self::try_from(BatchEvidenceV3::from(v2)).map_err(checkpoint::invalid::<Self>)
    }
}
