//! What a worker elsewhere receives and answers, as JSON, pinned: a durable-execution
//! engine (kleene-restate) journals a `Dispatch`, a `Candidate`, a `Rejection`, an
//! `InfrastructureFailure` and a `ClosureSettlement`, and replays them after an upgrade.
//! Each fixture under `tests/fixtures/json/` was written by the serde derives these types
//! had before they got records of their own; each must still read, and write back to
//! exactly the same bytes.

use std::path::Path;

use kleene::batch::{
    Batch, Candidate, evidence::ClosureEnd, evidence::ClosureSettlement, machine::Dispatch,
};
use kleene::batch::{Rejection, worker::InfrastructureFailure};
use kleene::id::Digest;
use proptest::prelude::*;

use crate::support::{chan, id, path, validated};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/json")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.trim_end().to_owned()
}

/// Reads `name` as `T` and writes it back: the bytes must not move.
fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(name: &str) -> T {
    let json = fixture(name);
    let value: T = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(serde_json::to_string(&value).unwrap(), json, "{name} moved");
    value
}

fn d(byte: u8) -> Digest {
    Digest::from_bytes([byte; 32])
}

#[test]
fn a_dispatch_reads_and_writes_the_pinned_json() {
    let plain: Dispatch = round_trip("dispatch_v1.json");
    assert_eq!(plain.task(), &id("b"));
    assert_eq!((plain.position(), plain.attempt()), (1, 2));
    assert_eq!((plain.input_digest(), plain.fix_attempts_used()), (d(7), 3));
    assert_eq!(plain.prerequisites(), &[(id("a"), d(1)), (id("a2"), d(2))]);
    assert!(plain.correction().is_none());

    let corrective: Dispatch = round_trip("dispatch_v1_not_owned.json");
    let correction = corrective.correction().expect("a corrective call");
    assert_eq!(
        correction.rejection(),
        &Rejection::NotOwned {
            task: id("b"),
            path: path("src/other.rs"),
        }
    );
    assert_eq!(
        correction.candidate().files()[&path("bin/été")],
        [0, 255, 10, 13]
    );

    let contract: Dispatch = round_trip("dispatch_v1_contract.json");
    assert!(matches!(
        contract.correction().map(|c| c.rejection()),
        Some(Rejection::Contract { message, .. }) if message == "missing \"out.txt\"\n"
    ));
}

#[test]
fn answers_read_and_write_the_pinned_json() {
    let candidate: Candidate = round_trip("candidate_v1.json");
    assert_eq!(candidate.files().len(), 2);
    let failures: Vec<InfrastructureFailure> = round_trip("infrastructure_failure_v1.json");
    assert_eq!(
        failures[1],
        InfrastructureFailure::Timeout { after_ms: 1500 }
    );
    let settled: Vec<ClosureSettlement> = round_trip("closure_settlement_v1.json");
    assert_eq!(
        settled[1].end,
        ClosureEnd::Halted {
            depth: 2,
            halt: "recovery_stalled".into()
        }
    );
    assert_eq!(
        (settled[2].audit_head, settled[2].record_digest),
        (d(8), d(9))
    );
}

#[test]
fn a_dispatch_the_machine_reserved_survives_the_trip() {
    let plan = validated(
        r#"{"tasks": [
            {"id": "a", "kind": {"lane": "config"}, "owner": "A", "spec": {"intent": "a"},
             "owned_paths": ["out/a.txt"]},
            {"id": "b", "kind": {"lane": "config"}, "owner": "B", "spec": {"intent": "b"},
             "owned_paths": ["out/b.txt"]}]}"#,
    );
    let batch = Batch::new(&plan, chan("c"));
    let (mut machine, _) = batch.machine(None).unwrap();
    for dispatch in machine.reserve(8).unwrap().dispatches {
        let json = serde_json::to_string(&dispatch).unwrap();
        assert_eq!(serde_json::from_str::<Dispatch>(&json).unwrap(), dispatch);
    }
}

#[test]
fn malformed_json_is_an_error_not_a_panic() {
    let json = fixture("dispatch_v1.json");
    for bad in [
        json.replace("\"task\"", "\"tusk\""),
        json.replace("\"0707", "\"zz07"),
        json.replace("\"attempt\":2", "\"attempt\":-2"),
        json.replace("\"b\"", "\"b\\u0007\""),
        json[..json.len() / 2].to_owned(),
        r#"{"NotOwned":{"task":"b"}}"#.to_owned(),
    ] {
        assert!(serde_json::from_str::<Dispatch>(&bad).is_err(), "{bad}");
    }
    assert!(serde_json::from_str::<Rejection>(r#"{"Renamed":{"task":"b"}}"#).is_err());
}

fn infrastructure_failure() -> impl Strategy<Value = InfrastructureFailure> {
    prop_oneof![
        ".*".prop_map(|detail| InfrastructureFailure::ProcessMissing { detail }),
        any::<u64>().prop_map(|after_ms| InfrastructureFailure::Timeout { after_ms }),
        ".*".prop_map(|detail| InfrastructureFailure::Transport { detail }),
        ".*".prop_map(|detail| InfrastructureFailure::Agent { detail }),
    ]
}

proptest! {
    /// Every candidate and failure reads back as the value it was written from.
    #[test]
    fn answers_round_trip(
        files in proptest::collection::btree_map("[a-z]{1,8}(/[a-z]{1,8}){0,2}", any::<Vec<u8>>(), 0..4),
        failure in infrastructure_failure(),
        message in ".*",
    ) {
        let candidate = Candidate::new(files.into_iter().map(|(p, c)| (path(&p), c)).collect());
        let json = serde_json::to_string(&candidate).unwrap();
        prop_assert_eq!(serde_json::from_str::<Candidate>(&json).unwrap(), candidate);
        let json = serde_json::to_string(&failure).unwrap();
        prop_assert_eq!(serde_json::from_str::<InfrastructureFailure>(&json).unwrap(), failure);
        let rejection = Rejection::Contract { task: id("t"), message };
        let json = serde_json::to_string(&rejection).unwrap();
        prop_assert_eq!(serde_json::from_str::<Rejection>(&json).unwrap(), rejection);
    }
}
