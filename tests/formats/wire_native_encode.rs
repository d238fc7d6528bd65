//! Checkpoint payloads are written by bincode's native encoder, and they must be exactly the
//! bytes of the records' serde forms (what earlier builds wrote, and what every build reads
//! back): for every step delta, whole state, task and closure record of random closures,
//! and for every evidence event and snapshot of random batches.

use bincode::config::standard;
use kleene::batch::{Batch, MemoryJournal, journal::EvidenceJournal, recovery::RecoveryRequest};
use kleene::checkpoint::{self, Checkpoint, HEADER_LEN};
use kleene::testing::closure::{policy, scripted_agent};
use kleene::{
    Task,
    closure::Closure,
    closure::{Spec, step::Session},
    id::TaskId,
};
use proptest::prelude::*;
use serde::Serialize;

use crate::batch::machine::{Scripted, shape_strategy};
use crate::support::chan;

/// What the serde form of `value` writes to bincode (standard configuration).
fn serde_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, standard()).unwrap()
}

/// The payload of a whole envelope.
fn payload(envelope: &[u8]) -> &[u8] {
    &envelope[HEADER_LEN..]
}

/// `value`'s checkpoint payload is its serde form.
fn encodes_as_serde<T: Checkpoint + Serialize>(value: &T) -> Result<(), TestCaseError> {
    let (envelope, expected) = (checkpoint::encode(value).unwrap(), serde_bytes(value));
    prop_assert_eq!(payload(&envelope), expected.as_slice());
    Ok(())
}

/// A root task: its intent and criteria long enough (past 250 bytes) that their lengths take
/// bincode's longer integer forms.
fn root_task() -> impl Strategy<Value = Task> {
    (
        "[a-z][a-z0-9_]{0,20}",
        "\\PC{0,300}",
        proptest::collection::vec("\\PC{0,260}", 0..3),
    )
        .prop_map(|(id, intent, criteria)| {
            let spec = criteria
                .into_iter()
                .fold(Spec::new(intent), Spec::with_criterion);
            Task::new(TaskId::new(id).unwrap(), spec)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_closure_payload_is_its_serde_form(
        task in root_task(),
        mode in "[a-z]{1,8}",
        policy in policy(),
        mut agent in scripted_agent(),
    ) {
        let session = Session::new(mode, "demo").unwrap();
        let mut closure = Closure::start(task.clone(), session, policy);
        let mut store = Vec::new();
        loop {
            let delta = closure.step_delta();
            let expected = serde_bytes(&delta);
            let len = closure.encode_step_delta_into(&mut store).unwrap();
            prop_assert_eq!(payload(&store[store.len() - len..]), expected.as_slice());
            let whole = delta.encode().unwrap();
            prop_assert_eq!(payload(&whole), expected.as_slice());
            encodes_as_serde(&closure.state())?;
            if let Closure::Done(record) = &closure {
                encodes_as_serde(&**record)?;
                break;
            }
            closure = closure.step(&mut agent);
        }
        for task in std::iter::once(&task).chain(agent.executed_tasks()) {
            encodes_as_serde(task)?;
        }
    }

    #[test]
    fn every_evidence_payload_is_its_serde_form(shape in shape_strategy(5)) {
        let plan = shape.plan();
        let channel = chan("native");
        let mut journal = MemoryJournal::default();
        let batch = Batch::new(&plan, channel.clone()).with_recovery(true);
        let mut worker = Scripted(&shape);
        let evidence = batch.dispatch(&mut worker, &(), &mut journal).unwrap();
        encodes_as_serde(&evidence)?;
        // A recovery round adds the events and snapshot parts of granted corrections.
        let roots: Vec<_> = evidence.recovery_roots().cloned().collect();
        if !roots.is_empty() {
            let request = RecoveryRequest::for_roots(&evidence, roots);
            let outcome = batch.recover(&request, &mut worker, &(), &mut journal).unwrap();
            encodes_as_serde(&outcome.evidence)?;
        }
        let events = journal.load(&channel).unwrap().unwrap().events;
        prop_assert!(!events.is_empty());
        for event in &events {
            encodes_as_serde(event)?;
        }
    }
}
