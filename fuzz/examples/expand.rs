//! Prints, in hex, the bytes a fuzz input reaches its decoder with: the sealed checkpoint
//! envelope or the journal image (the input itself for the other targets). A reproducer for
//! a regression test outside the harness.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --example expand -- TARGET FILE`

use kleene::batch::{BatchEvidence, evidence::EvidenceEvent};
use kleene::{
    Task,
    closure::{ClosureRecord, ClosureState},
};
use kleene_fuzz::{checkpoint_bytes, journal_input};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(target), Some(file)) = (args.next(), args.next()) else {
        return Err("usage: expand TARGET FILE".into());
    };
    let data = std::fs::read(&file)?;
    let bytes = match target.as_str() {
        "checkpoint_task" => checkpoint_bytes::<Task>(&data),
        "checkpoint_closure_record" => checkpoint_bytes::<ClosureRecord>(&data),
        "checkpoint_closure_state" => checkpoint_bytes::<ClosureState>(&data),
        "checkpoint_evidence_event" => checkpoint_bytes::<EvidenceEvent>(&data),
        "checkpoint_batch_evidence" => checkpoint_bytes::<BatchEvidence>(&data),
        "journal_image" | "journal_file" => journal_input(&data),
        _ => data,
    };
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    println!("{} bytes: {hex}", bytes.len());
    Ok(())
}
