//! The records of the closure payloads: `CLSR` (a [`ClosureRecord`], also its JSON), `CLST`
//! (a [`ClosureState`]) and `CLDT` (a [`ClosureDelta`]), and every type inside them
//! (sessions, verdicts, steps, attempts, outcomes, the policy, audit entries and events).
//!
//! | payload | version | record | change |
//! |---|---|---|---|
//! | `CLSR` | 1 | [`ClosureRecordV1`] | the closure tree: attempts, steps, audit log, outcome |
//! | `CLST` | 1 | [`ClosureStateV1`] | a running closure, no seal |
//! | | 2 | [`ClosureStateV2`] | the policy and budget snapshot sealed to the audit head |
//! | `CLDT` | 1 | [`ClosureDeltaV1`] | the audit head before the step, its events, the head after it, then the start or an execution's output |
//!
//! Every record borrows from the domain value it is written from ([`Record::of`]); reading
//! one back checks what the domain type guarantees (a task's parent and root, a policy's
//! bounds, a record's audit chain and shape) and names what does not hold.

use serde::{Deserialize, Serialize};

pub(crate) mod audit;
mod checkpoint;
pub(crate) mod delta;
pub(crate) mod record;
pub(crate) mod state;
pub(crate) mod step;
pub(crate) mod task;

use audit::{AuditEventV1, AuditLogV1};
use delta::ClosureDeltaV1;
use record::ClosureRecordV1;
use state::ClosureStateV2;

use crate::closure::audit::{AuditEvent, AuditLog};
use crate::closure::machine::history::ClosureDelta;
use crate::closure::machine::state::ClosureState;
use crate::closure::record::ClosureRecord;
use crate::wire::Record;

/// Serde for the domain values a caller persists whole: each is its current record's form,
/// so the format never follows a refactor of the domain type.
macro_rules! serde_through {
    ($($domain:ty => $record:ident),* $(,)?) => {$(
        impl Serialize for $domain {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $record::of(self).serialize(s)
            }
        }

        impl<'de> Deserialize<'de> for $domain {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$domain>::try_from($record::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

serde_through!(
    ClosureRecord => ClosureRecordV1,
    ClosureState => ClosureStateV2,
    ClosureDelta => ClosureDeltaV1,
    AuditLog => AuditLogV1,
);

impl Serialize for AuditEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        AuditEventV1::of(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for AuditEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        AuditEventV1::deserialize(d).map(AuditEvent::from)
    }
}

#[cfg(test)]
mod tests {
    use super::state::RecoveryPolicyV1;
    use super::step::VerdictV1;
    use super::*;

    use crate::closure::policy::RecoveryPolicy;
    use crate::closure::record::ClosureRecord;
    use crate::closure::step::{ExecutionOutput, GovernanceDecision, Next, Session};
    use crate::closure::task::Task;

    use crate::closure::verdict::Verdict;

    use crate::id::TaskId;
    use crate::wire::Record;

    /// A verdict read back is in canonical order, however the record ordered its results,
    /// so a hand-edited record cannot break equality.
    #[test]
    fn a_verdict_read_back_is_in_canonical_order() {
        let json = r#"[{"validator_id":"z","severity":"info","overridable":true,"justification":""},
                      {"validator_id":"a","severity":"info","overridable":true,"justification":""}]"#;
        let v = Verdict::from(serde_json::from_str::<VerdictV1<'_>>(json).unwrap());
        assert_eq!(v.results()[0].validator_id.as_str(), "a");
    }

    fn resolved_record() -> ClosureRecord {
        use crate::closure::Closure;
        let task = Task::new(
            TaskId::new("x").unwrap(),
            crate::closure::task::Spec::new("intent"),
        );
        let session = Session::new("build", "p").unwrap();
        let mut closure = Closure::start(task, session, RecoveryPolicy::default());
        loop {
            closure = match closure {
                Closure::Governance(due) => due.feed(GovernanceDecision::Approve),
                Closure::PreValidate(due) => due.feed(Verdict::clean()),
                Closure::Execute(due) => due.feed(ExecutionOutput::new("done")),
                Closure::PostValidate(due) => due.feed(Verdict::clean()),
                Closure::MoveNext(due) => due.feed(Next::Complete),
                Closure::Done(record) => return *record,
            };
        }
    }

    /// A record that decodes but does not hold together is refused as invalid, naming
    /// what is wrong, whether read from a checkpoint or from JSON.
    #[test]
    fn a_record_that_does_not_hold_together_is_refused_as_invalid() {
        use crate::checkpoint::{
            self, CheckpointError, InvalidPayload, decode_payload, encode_payload, seal,
        };
        let record = resolved_record();
        let mut wire = ClosureRecordV1::of(&record);
        wire.fix_attempts = 1;
        let bytes = seal(*b"CLSR", 1, &encode_payload(&wire).unwrap());
        let err = checkpoint::decode::<ClosureRecord>(&bytes).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::Invalid { kind, reason }
            if kind == "CLSR" && **reason == InvalidPayload::Inconsistent {
                reason: "closure record of x holds 1 tasks for 1 fix attempts".to_owned()
            }),
            "{err}"
        );
        let err = ClosureRecord::from_json(&serde_json::to_string(&wire).unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("holds 1 tasks for 1 fix attempts"),
            "{err}"
        );
        // The same record with its count intact reads back as itself.
        wire.fix_attempts = 0;
        let payload = encode_payload(&wire).unwrap();
        let back = decode_payload::<ClosureRecordV1<'static>>(&payload).unwrap();
        assert_eq!(ClosureRecord::try_from(back), Ok(record));
    }

    /// A policy record is checked by the builder: one out of bounds is refused, naming the
    /// setting.
    #[test]
    fn a_policy_record_is_rechecked() {
        let policy = RecoveryPolicy::default();
        let json = serde_json::to_string(&RecoveryPolicyV1::of(&policy)).unwrap();
        let back = serde_json::from_str::<RecoveryPolicyV1>(&json).unwrap();
        assert_eq!(RecoveryPolicy::try_from(back), Ok(policy));
        let bad = json.replace("\"max_inner_iterations\":50", "\"max_inner_iterations\":0");
        let back = serde_json::from_str::<RecoveryPolicyV1>(&bad).unwrap();
        let err = RecoveryPolicy::try_from(back).unwrap_err();
        assert!(err.contains("max_inner_iterations"), "{err}");
    }
}
