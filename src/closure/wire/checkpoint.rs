//! Where each closure payload kind meets the checkpoint envelope: its kind, its versions, and
//! the wire record it is written as.

use super::delta::ClosureDeltaV1;
use super::record::ClosureRecordV1;
use super::state::{ClosureStateV1, ClosureStateV2};
use super::task::{TaskV1, TaskV2};
use crate::checkpoint::{self, Checkpoint, CheckpointError, sealed};

impl sealed::Sealed for crate::closure::task::Task {}

/// Tasks are at format version 2 (`TaskV2`, which added `root_task_ref`, `root_spec`,
/// `prior_failures`); version 1 (`TaskV1`) is the shape before them and is migrated on read.
impl Checkpoint for crate::closure::task::Task {
    const KIND: [u8; 4] = *b"TASK";
    const VERSION: u16 = 2;
    const MIN_VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::write_record::<_, TaskV2<'_>>(self, out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        checkpoint::read_record::<_, TaskV2<'static>>(payload)
    }

    fn migrate(version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        debug_assert_eq!(version, 1);
        checkpoint::read_record::<_, TaskV1<'static>>(payload)
    }
}

impl sealed::Sealed for crate::closure::ClosureRecord {}

/// Closure records, format version 1 (`ClosureRecordV1`).
impl Checkpoint for crate::closure::ClosureRecord {
    const KIND: [u8; 4] = *b"CLSR";
    const VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::write_record::<_, ClosureRecordV1<'_>>(self, out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        checkpoint::read_record::<_, ClosureRecordV1<'static>>(payload)
    }
}

impl sealed::Sealed for crate::closure::ClosureState {}

/// Persisted closure machines (see [`Closure::state`](crate::closure::Closure::state)) are at format
/// version 2 (`ClosureStateV2`), which seals the policy and budget snapshot; version 1
/// (`ClosureStateV1`, no seal) is migrated on read, its policy and budget taken as written.
impl Checkpoint for crate::closure::ClosureState {
    const KIND: [u8; 4] = *b"CLST";
    const VERSION: u16 = 2;
    const MIN_VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::write_record::<_, ClosureStateV2<'_>>(self, out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        checkpoint::read_record::<_, ClosureStateV2<'static>>(payload)
    }

    fn migrate(version: u16, payload: &[u8]) -> Result<Self, CheckpointError> {
        debug_assert_eq!(version, 1);
        checkpoint::read_record::<_, ClosureStateV1<'static>>(payload)
    }
}

impl sealed::Sealed for crate::closure::machine::ClosureDelta {}

/// One step of a closure's incremental form (see
/// [`Closure::step_delta`](crate::closure::Closure::step_delta)), format version 1
/// (`ClosureDeltaV1`), written from borrowed parts: one is encoded at every step.
impl Checkpoint for crate::closure::machine::ClosureDelta {
    const KIND: [u8; 4] = *b"CLDT";
    const VERSION: u16 = 1;

    fn write_payload(&self, out: &mut Vec<u8>) -> Result<(), CheckpointError> {
        checkpoint::write_record::<_, ClosureDeltaV1<'_>>(self, out)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CheckpointError> {
        checkpoint::read_record::<_, ClosureDeltaV1<'static>>(payload)
    }
}
