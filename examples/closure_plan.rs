//! Three tasks through `ClosureWorker`, each writing one module of a tiny crate checked by a real
//! `cargo test --offline` (`two` is wrong at first; its fix passes), then accept and export.
use kleene::acceptance::{BuildBinding, accept, export, verify_archive};
use kleene::batch::{
    Batch, BatchAgent, Candidate, ClosureWorker, MemoryJournal, worker::AgentFailure,
};
use kleene::batch::{Proposal, WorkerCall as Call, WorkerFailure as Failed};
use kleene::closure::{ClosureRecord, ExecutionOutput as Output, GovernanceDecision as Decision};
use kleene::closure::{
    Severity::Blocker, ValidatorResult, step::Session, step::ValidationToken as Token,
};
use kleene::process::{self, Interrupt, Invocation};
use kleene::{Agent, Task, closure::Verdict, snapshot::Snapshot};
use std::{fs, io, path::PathBuf};
const PLAN: &str = r#"{"tasks": [
  {"id": "one", "kind": {"lane": "config"}, "owner": "Cargo", "spec": {"intent": "v is 1"}, "owned_paths": ["src/one.rs"]},
  {"id": "two", "kind": {"lane": "config"}, "owner": "Cargo", "spec": {"intent": "v is 2"}, "owned_paths": ["src/two.rs"], "depends_on": ["one"]},
  {"id": "three", "kind": {"lane": "config"}, "owner": "Cargo", "spec": {"intent": "v is 3"}, "owned_paths": ["src/three.rs"], "depends_on": ["two"]}]}"#;
const MODS: [&str; 3] = ["one", "two", "three"];
const TEST: &str = "cargo test --offline -q";
/// Writes the call's module into a crate holding the call's inputs, then tests the crate.
struct Cargo(PathBuf, usize);
impl Agent for Cargo {
    type Error = io::Error;
    fn govern(&mut self, _: &Task, _: &Session, _: u32) -> io::Result<Decision> {
        Ok(Decision::Approve)
    }
    fn pre_validate(&mut self, _: &Task, _: u32) -> io::Result<Verdict> {
        Ok(Verdict::clean())
    }
    fn execute(&mut self, task: &Task, _: &Token) -> io::Result<Output> {
        // Module `n` returns `n`; `two` first returns 3 (its test fails), its fix (depth 1) 2.
        let (want, wrong) = (self.1 + 1, usize::from(self.1 == 1 && task.depth() == 0));
        let test = format!("#[test] fn t() {{ assert_eq!(v(), {want}) }}");
        let code = format!("pub fn v() -> usize {{ {} }}\n{test}", want + wrong);
        fs::write(self.0.join(format!("src/{}.rs", MODS[self.1])), &code)?;
        Ok(Output::new(code))
    }
    fn post_validate(&mut self, _: &Task, _: &Output) -> io::Result<Verdict> {
        let inv = Invocation::new(TEST, &self.0);
        let done = process::run(&inv, &Interrupt::default()).map_err(io::Error::other)?;
        let id = kleene::id::ValidatorId::new("cargo-test").map_err(io::Error::other)?;
        let result = ValidatorResult::new(id, Blocker, true, done.justification(TEST));
        Ok(Verdict::new((!done.success()).then_some(result)))
    }
}
impl BatchAgent for Cargo {
    fn begin_call(&mut self, call: &Call<'_>) -> Result<(), Failed> {
        let id = call.task().id.as_str();
        self.1 = MODS.iter().position(|m| *m == id).unwrap_or(0);
        let lib = format!("pub mod {};", MODS[..=self.1].join(";\npub mod "));
        let mut written = fs::write(self.0.join("src/lib.rs"), lib);
        for (path, bytes) in call.inputs().into_iter().flat_map(|(_, o)| o.files()) {
            written = written.and_then(|()| fs::write(self.0.join(path.as_str()), bytes));
        }
        written.map_err(|e| Failed::Agent(AgentFailure::new(e)))
    }
    fn finish_call(&mut self, call: &Call<'_>, _: &ClosureRecord) -> Result<Proposal, Failed> {
        let owned = call.task().owned_paths.iter();
        let files =
            owned.filter_map(|p| Some((p.clone(), fs::read(self.0.join(p.as_str())).ok()?)));
        Ok(Candidate::new(files.collect()).into())
    }
}
// Its own files (a temporary crate) fail with `std::io::Error`, so it returns any error; a
// kleene error in the box still prints its whole chain.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let plan = kleene::AppBuildPlan::from_json(PLAN)?.validate()?;
    let (dir, channel) = (tempfile::tempdir()?, kleene::id::ChannelId::new("tiny-1")?);
    fs::create_dir_all(dir.path().join("src"))?;
    let toml = "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\n[workspace]\n";
    fs::write(dir.path().join("Cargo.toml"), toml)?;
    let session = Session::new("build", "tiny")?;
    let mut worker = ClosureWorker::new(Cargo(dir.path().into(), 0), session, Default::default());
    let (batch, mut journal) = (Batch::new(&plan, channel.clone()), MemoryJournal::default());
    let evidence = batch.run(&mut worker, &(), &mut journal)?.evidence;
    let snapshot = Snapshot::from_evidence(&evidence)?;
    let binding = BuildBinding::new(channel, plan.digest(), evidence.evidence_version());
    let record = accept(&plan, &evidence, &snapshot, &binding)?;
    let archive = export(&record, &snapshot)?;
    verify_archive(archive.as_bytes(), record.digest())?;
    let (fixes, digest) = (evidence.fix_attempts_used(), record.digest());
    println!("accepted ({fixes} fix), exported: {digest}");
    Ok(())
}
