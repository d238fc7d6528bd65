//! The records of what crosses a process boundary as JSON: a reserved call handed to a
//! worker elsewhere ([`Dispatch`]), and what the worker answers with (a [`Candidate`], a
//! [`Rejection`], an [`InfrastructureFailure`], a settled closure). A durable-execution
//! engine journals these (kleene-restate does), so they are formats like any other: the
//! domain types' serde forms are written by hand through these records and pinned by
//! `tests/fixtures/json/`.
//!
//! ```text
//! let json = serde_json::to_string(&dispatch)?;       // through DispatchV1
//! let back: Dispatch = serde_json::from_str(&json)?;
//! ```
//!
//! Version 1 carries no version field; a later version adds one, and a record without it
//! reads as version 1.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::event::{CandidateV1, ClosureSettlementV1, InfrastructureFailureV1, RejectionV1};
use crate::batch::candidate::{Candidate, Rejection};
use crate::batch::evidence::event::ClosureSettlement;
use crate::batch::machine::Dispatch;
use crate::batch::worker::InfrastructureFailure;
use crate::{id::TaskId, id::digest::Digest};

/// A reserved call, as a worker elsewhere receives it.
#[derive(Serialize, Deserialize)]
struct DispatchV1<'a> {
    task: Cow<'a, TaskId>,
    position: usize,
    attempt: u32,
    input_digest: Digest,
    fix_attempts_used: u32,
    prerequisites: Cow<'a, [(TaskId, Digest)]>,
    correction: Option<CorrectionV1<'a>>,
}

/// The refused candidate a corrective call must fix, and why it was refused.
#[derive(Serialize, Deserialize)]
struct CorrectionV1<'a> {
    rejection: RejectionV1<'a>,
    candidate: CandidateV1<'a>,
}

impl<'a> From<&'a Dispatch> for DispatchV1<'a> {
    fn from(d: &'a Dispatch) -> Self {
        Self {
            task: Cow::Borrowed(d.task()),
            position: d.position(),
            attempt: d.attempt(),
            input_digest: d.input_digest(),
            fix_attempts_used: d.fix_attempts_used(),
            prerequisites: Cow::Borrowed(d.prerequisites()),
            correction: d.correction().map(|c| CorrectionV1 {
                rejection: c.rejection.into(),
                candidate: c.candidate.into(),
            }),
        }
    }
}

impl From<DispatchV1<'_>> for Dispatch {
    fn from(w: DispatchV1<'_>) -> Self {
        Dispatch::from_parts(
            w.task.into_owned(),
            w.position,
            w.attempt,
            w.input_digest,
            w.fix_attempts_used,
            w.prerequisites.into_owned(),
            w.correction
                .map(|c| (c.rejection.into(), c.candidate.into())),
        )
    }
}

/// Implements serde for a domain type through its record: `Serialize` writes the record of
/// a borrowed value, `Deserialize` reads the record and converts it.
macro_rules! through_record {
    ($($ty:ty => $record:ident),+ $(,)?) => {
        $(
            impl Serialize for $ty {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    $record::from(self).serialize(s)
                }
            }

            impl<'de> Deserialize<'de> for $ty {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    $record::deserialize(d).map(Into::into)
                }
            }
        )+
    };
}

through_record!(
    Dispatch => DispatchV1,
    Candidate => CandidateV1,
    Rejection => RejectionV1,
    InfrastructureFailure => InfrastructureFailureV1,
    ClosureSettlement => ClosureSettlementV1,
);
