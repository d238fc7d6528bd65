//! What a worker process keeps on its own disk and does for each task call, apart from
//! Restate: its work directory (one content-addressed object store, a stage and spec area per
//! channel), its checked copies of the plans it runs, and the call itself, made by kleene's
//! shell runtime ([`ShellRuntime::run_dispatch`]) exactly as `kleene run` makes it.
//!
//! ```
//! use kleene_restate::worker::WorkDir;
//!
//! let dir = tempfile::tempdir()?;
//! let work = WorkDir::open(dir.path())?;
//! # let _ = work;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A worker needs nothing from the submitter's disk: the plan's files travel by digest
//! ([`PlanFiles`]), and each plan runs from `DIR/plans/<plan digest>/`, a read-only copy made
//! once from bytes fetched from the channel, each checked against the digest the plan binds.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kleene::batch::candidate::AcceptedOutput;
use kleene::error::Chain;
use kleene::id::{Digest, TaskId};
use kleene::process::Interrupt;
use kleene::shell::{self, PlanFiles, PlanFilesError, ShellPlan, ShellRuntime};
use kleene::stage::ObjectStore;

use crate::call::{FixDraw, TaskCall, TaskReply};

/// The most bytes one call may write outside its scratch. Its candidate travels as the call's
/// result (base64, four characters for three bytes) and stays in the pass's journal until the
/// pass hands over, and Restate refuses a message past 32 MiB by default (retrying it until
/// the call fails, with no word of why): a call that writes more is refused naming the file,
/// which is never read.
pub const MAX_CALL_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;

/// Why a worker's directory could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("open the worker's directory {dir}")]
pub struct WorkDirError {
    dir: PathBuf,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// Why a worker could not make a plan's copy: the call is refused, naming the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanCopyError {
    /// A fetched file's bytes do not match the plan, or the copy could not be written.
    #[error("copy the files of plan {plan}")]
    Files {
        /// The plan digest.
        plan: Digest,
        /// What was wrong, naming the file.
        #[source]
        source: PlanFilesError,
    },
    /// The channel sent bytes that are not base64.
    #[error("copy the files of plan {plan}: the bytes sent for plan file {path} are not base64")]
    NotBase64 {
        /// The plan digest.
        plan: Digest,
        /// The file.
        path: String,
    },
    /// The plan binds no files (a plan from before plans carried them): a worker cannot
    /// know what its commands read.
    #[error("copy the files of plan {plan}: the call names no plan files")]
    NoFiles {
        /// The plan digest.
        plan: Digest,
    },
    /// The copy could not be moved into place.
    #[error("copy the files of plan {plan} into {}", dir.display())]
    Io {
        /// The plan digest.
        plan: Digest,
        /// Where the copy goes.
        dir: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// A worker's directory: its object store, the stages and specs of each channel's calls, and
/// its checked plan copies.
#[derive(Debug)]
pub struct WorkDir {
    dir: PathBuf,
    store: Arc<ObjectStore>,
    /// Plan copies this process made or checked: each is checked once, as `kleene run`
    /// checks its own copy once per pass.
    checked: Mutex<HashSet<Digest>>,
    serial: AtomicU64,
    /// The most a call may write: [`MAX_CALL_OUTPUT_BYTES`] when its output travels in
    /// Restate's messages, `kleene run`'s 1 GiB when it goes through a content store.
    max_call_output_bytes: u64,
    /// Whether calls' commands run in the sandbox their tasks describe (the default).
    pub(crate) confine: bool,
}

impl WorkDir {
    /// The worker directory `dir` (made absolute, so the paths commands are given hold after
    /// they change directory).
    ///
    /// # Errors
    ///
    /// [`WorkDirError`] when the directories or the object store cannot be made.
    pub fn open(dir: &Path) -> Result<Self, WorkDirError> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| WorkDirError {
            dir: dir.to_owned(),
            source,
        };
        let dir = std::path::absolute(dir).map_err(|e| err(Box::new(e)))?;
        let store = ObjectStore::open(dir.join("objects")).map_err(|e| err(Box::new(e)))?;
        std::fs::create_dir_all(dir.join("plans")).map_err(|e| err(Box::new(e)))?;
        Ok(Self {
            dir,
            store: Arc::new(store),
            checked: Mutex::new(HashSet::new()),
            serial: AtomicU64::new(0),
            max_call_output_bytes: MAX_CALL_OUTPUT_BYTES,
            confine: true,
        })
    }

    /// The directory with calls' commands run unconfined (by default each runs in the
    /// sandbox its task describes, as `kleene run`'s do: see
    /// [`kleene::process::sandbox`]).
    #[must_use]
    pub fn without_sandbox(mut self) -> Self {
        self.confine = false;
        self
    }

    /// The directory with calls allowed to write up to `bytes` (past
    /// [`MAX_CALL_OUTPUT_BYTES`] only when their replies go through a
    /// [`ContentStore`](crate::store::ContentStore)).
    #[must_use]
    pub fn with_max_call_output_bytes(mut self, bytes: u64) -> Self {
        self.max_call_output_bytes = bytes;
        self
    }

    /// Where the copy of `plan`'s files goes.
    pub fn plan_dir(&self, plan: &ShellPlan) -> PathBuf {
        self.dir
            .join("plans")
            .join(plan.plan().digest().to_string())
    }

    /// The checked copy of `plan`'s files, when this worker has one. A copy that no longer
    /// matches the plan (a command changed it, a disk damaged it) is removed, so that it is
    /// made again from the channel's bytes.
    pub fn plan_copy(&self, plan: &ShellPlan) -> Option<PathBuf> {
        let digest = plan.plan().digest();
        let dir = self.plan_dir(plan);
        if self.is_checked(digest) && dir.is_dir() {
            return Some(dir);
        }
        let files = plan.files()?;
        if !dir.exists() {
            return None;
        }
        match files.verify_copy(&dir) {
            Ok(()) => {
                self.mark_checked(digest);
                Some(dir)
            }
            Err(_) => {
                // Files are read-only, their directories are not: the copy can be removed.
                let _ = std::fs::remove_dir_all(&dir);
                None
            }
        }
    }

    /// Makes the copy of `plan`'s files from `fetched` (base64 bytes by digest, as the
    /// channel's `plan_files` handler answers), checking every file against the digest the
    /// plan binds: written beside, then moved into place whole.
    ///
    /// # Errors
    ///
    /// [`PlanCopyError`] naming the file whose bytes are missing, not base64 or not the ones
    /// the plan binds, or why the copy could not be written.
    pub fn make_plan_copy(
        &self,
        plan: &ShellPlan,
        fetched: &BTreeMap<Digest, String>,
    ) -> Result<PathBuf, PlanCopyError> {
        use base64::Engine as _;
        let digest = plan.plan().digest();
        let manifest = plan
            .files()
            .ok_or(PlanCopyError::NoFiles { plan: digest })?
            .manifest();
        let mut files = PlanFiles::from_manifest(manifest.clone());
        for (path, file) in &manifest.0 {
            // A digest the channel does not hold is left out: `write_copy` names the file.
            let Some(text) = fetched.get(file) else {
                continue;
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| PlanCopyError::NotBase64 {
                    plan: digest,
                    path: path.to_string(),
                })?;
            files
                .add_bytes(path, bytes)
                .map_err(|source| PlanCopyError::Files {
                    plan: digest,
                    source,
                })?;
        }
        let dir = self.plan_dir(plan);
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .dir
            .join("plans")
            .join(format!(".{digest}.{}-{serial}", std::process::id()));
        let io = |source| PlanCopyError::Io {
            plan: digest,
            dir: dir.clone(),
            source,
        };
        let _ = std::fs::remove_dir_all(&temp);
        if let Err(source) = files.write_copy(&temp) {
            let _ = std::fs::remove_dir_all(&temp);
            return Err(PlanCopyError::Files {
                plan: digest,
                source,
            });
        }
        match std::fs::rename(&temp, &dir) {
            Ok(()) => {}
            // Another call of the same plan made it first: checked like any copy found.
            Err(_) if dir.is_dir() => {
                let _ = std::fs::remove_dir_all(&temp);
                files
                    .verify_copy(&dir)
                    .map_err(|source| PlanCopyError::Files {
                        plan: digest,
                        source,
                    })?;
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&temp);
                return Err(io(e));
            }
        }
        self.mark_checked(digest);
        Ok(dir)
    }

    fn is_checked(&self, plan: Digest) -> bool {
        self.checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&plan)
    }

    fn mark_checked(&self, plan: Digest) {
        self.checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(plan);
    }

    /// Makes `call` of `plan`, whose files are in `plan_dir`, in a stage holding `inputs`
    /// (the accepted outputs of its task's transitive prerequisites, each verified against
    /// its digest), drawing each fix attempt with `draw` before the fix runs.
    ///
    /// `turn` is the call's turn: once it is set (the invocation's attempt ended), the
    /// command running is stopped with its process group and no further fix is drawn.
    /// A draw that does not go through (refused, or the ledger unreachable) comes after the
    /// call's commands ran, so the call is answered [`TaskReply::Interrupted`] with `claim`:
    /// its number is spent, never made a second time.
    pub fn run(
        &self,
        plan: ShellPlan,
        plan_dir: &Path,
        call: &TaskCall,
        inputs: &[(TaskId, AcceptedOutput)],
        turn: CallTurn<'_>,
        draw: &mut dyn FnMut(&FixDraw) -> Result<(), String>,
    ) -> TaskReply {
        // Stages and specs are named by task and call, which are unique in flight on one
        // channel only: each channel has its own.
        let work = self.dir.join("runs").join(call.channel.as_str());
        let runtime = match ShellRuntime::with_shared_store(plan, &work, Arc::clone(&self.store)) {
            Ok(r) => r
                .with_plan_dir(plan_dir)
                .with_interrupt(turn.ended.clone())
                .with_max_call_output_bytes(self.max_call_output_bytes)
                .confining_commands(self.confine),
            Err(e) => {
                return TaskReply::Withdrawn {
                    detail: format!("failed to {}", Chain(&e)),
                };
            }
        };
        let policy = shell::default_policy();
        let max = policy.max_total_fix_attempts();
        let dispatch = &call.dispatch;
        let mut drawn = Vec::new();
        let mut refused = false;
        let outcome = runtime.run_dispatch(&call.channel, dispatch, inputs, &policy, &mut |fix| {
            if turn.ended.is_set() {
                refused = true;
                return Err("the call's turn ended before its fix was drawn".to_owned());
            }
            let asked = FixDraw {
                task: dispatch.task().clone(),
                attempt: dispatch.attempt(),
                fix: fix.clone(),
                max,
                turn: Some(turn.claim.to_owned()),
            };
            if let Err(why) = draw(&asked) {
                refused = true;
                return Err(why);
            }
            drawn.push(fix.clone());
            Ok(())
        });
        if refused {
            return TaskReply::Interrupted {
                nonce: turn.claim.to_owned(),
            };
        }
        TaskReply::of(outcome.result, drawn, outcome.record.as_ref())
    }
}

/// The turn of one call: the claim that names its execution, and the flag that ends it.
#[derive(Debug, Clone, Copy)]
pub struct CallTurn<'a> {
    /// The nonce the worker journaled when it claimed the call: every fix draw carries it.
    pub claim: &'a str,
    /// Set when the invocation's attempt ended: the command stops with its process group.
    pub ended: &'a Interrupt,
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use kleene::batch::Proposal;
    use kleene::id::ChannelId;
    use kleene::plan::AdmittedPath;

    /// A plan file beside `tasks/a.sh`, read as a submitter reads it.
    fn plan(dir: &Path, task_extra: &str) -> ShellPlan {
        std::fs::create_dir_all(dir.join("tasks")).unwrap();
        std::fs::write(dir.join("tasks/a.sh"), "echo from-the-plan > a.txt\n").unwrap();
        let text = format!(
            r#"{{"tasks": [{{"id": "a", "kind": {{"lane": "config"}}, "owner": "shell",
                "spec": {{"intent": "make a", "acceptance_criteria": ["a is right"]}},
                "owned_paths": ["a.txt"]{task_extra}}}]}}"#
        );
        std::fs::write(dir.join("plan.json"), text).unwrap();
        ShellPlan::read(&dir.join("plan.json"), &[]).unwrap().0
    }

    /// What the channel answers for `plan`'s files: each file's bytes, base64, by digest.
    fn fetched(plan: &ShellPlan, dir: &Path) -> BTreeMap<Digest, String> {
        plan.files()
            .unwrap()
            .iter()
            .map(|(path, digest)| {
                let bytes = std::fs::read(dir.join(path.as_str())).unwrap();
                (
                    *digest,
                    base64::engine::general_purpose::STANDARD.encode(bytes),
                )
            })
            .collect()
    }

    /// The plan rebuilt from its text and manifest, as a worker receives it.
    fn as_received(plan: &ShellPlan) -> ShellPlan {
        let files = PlanFiles::from_manifest(plan.files().unwrap().manifest());
        ShellPlan::from_text(Path::new("plan.json"), plan.text(), Some(files)).unwrap()
    }

    /// The call a channel makes first for `plan`: its first task's first call.
    fn first_task_call(plan: &ShellPlan) -> TaskCall {
        let channel = ChannelId::new("chan").unwrap();
        let (mut machine, _) = plan.batch(channel.clone()).machine(None).unwrap();
        let dispatch = machine.reserve(1).unwrap().dispatches.remove(0);
        TaskCall {
            channel,
            dispatch,
            plan: plan.text().to_owned(),
            plan_digest: None,
            plan_files: plan.files().map(PlanFiles::manifest),
            inputs: Vec::new(),
        }
    }

    /// The first call of `plan`'s first task, made by a worker in `work`.
    fn first_call(
        work: &WorkDir,
        plan: ShellPlan,
        plan_dir: &Path,
        draw: &mut dyn FnMut(&FixDraw) -> Result<(), String>,
    ) -> TaskReply {
        let call = first_task_call(&plan);
        let turn = CallTurn {
            claim: "claim-1",
            ended: &Interrupt::default(),
        };
        work.run(plan, plan_dir, &call, &[], turn, draw)
    }

    fn no_draw(_: &FixDraw) -> Result<(), String> {
        Err("no draws here".into())
    }

    fn proposal(reply: TaskReply) -> Proposal {
        match reply.into_result() {
            Some(Ok(p)) => p,
            other => panic!("not a proposal: {other:?}"),
        }
    }

    #[test]
    fn a_worker_runs_the_plan_s_own_scripts_from_its_checked_copy() {
        let submitted = tempfile::tempdir().unwrap();
        let plan = plan(
            submitted.path(),
            r#", "run": "sh \"$KLEENE_PLAN_DIR/tasks/a.sh\"""#,
        );
        let bytes = fetched(&plan, submitted.path());
        // The submitter's directory is gone before the worker sees the plan.
        drop(submitted);
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir::open(dir.path()).unwrap();
        let received = as_received(&plan);
        assert_eq!(received.plan().digest(), plan.plan().digest());
        assert!(work.plan_copy(&received).is_none());
        let copy = work.make_plan_copy(&received, &bytes).unwrap();
        assert!(copy.starts_with(dir.path().join("plans")));
        assert_eq!(work.plan_copy(&received), Some(copy.clone()));
        let p = proposal(first_call(&work, received, &copy, &mut no_draw));
        assert!(p.rejection().is_none(), "{:?}", p.rejection());
        let a = AdmittedPath::admit("a.txt").unwrap();
        assert_eq!(p.candidate().files()[&a], b"from-the-plan\n");
    }

    #[test]
    fn a_plan_file_whose_bytes_do_not_match_is_refused_by_name() {
        let submitted = tempfile::tempdir().unwrap();
        let plan = plan(submitted.path(), r#", "run": "true""#);
        let mut bytes = fetched(&plan, submitted.path());
        let script = plan
            .files()
            .unwrap()
            .iter()
            .find(|(p, _)| p.as_str() == "tasks/a.sh")
            .map(|(_, d)| *d)
            .unwrap();
        bytes.insert(
            script,
            base64::engine::general_purpose::STANDARD.encode("rm -rf ~\n"),
        );
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir::open(dir.path()).unwrap();
        let received = as_received(&plan);
        let err = work.make_plan_copy(&received, &bytes).unwrap_err();
        let text = Chain(&err).to_string();
        assert!(
            text.contains("plan file tasks/a.sh: its bytes have digest")
                && text.contains("the copy was changed or damaged"),
            "{text}"
        );
        assert!(
            !work.plan_dir(&received).exists(),
            "a refused copy was kept"
        );
        // Bytes the channel does not hold are named too.
        bytes.remove(&script);
        let text = Chain(&work.make_plan_copy(&received, &bytes).unwrap_err()).to_string();
        assert!(text.contains("plan file tasks/a.sh: its bytes"), "{text}");
    }

    #[test]
    fn a_copy_changed_on_disk_is_made_again() {
        use std::os::unix::fs::PermissionsExt;
        let submitted = tempfile::tempdir().unwrap();
        let plan = plan(submitted.path(), r#", "run": "true""#);
        let bytes = fetched(&plan, submitted.path());
        let dir = tempfile::tempdir().unwrap();
        let received = as_received(&plan);
        let copy = WorkDir::open(dir.path())
            .unwrap()
            .make_plan_copy(&received, &bytes)
            .unwrap();
        let script = copy.join("tasks/a.sh");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&script, "echo changed\n").unwrap();
        // A new process checks the copy it finds, and drops one that changed.
        let work = WorkDir::open(dir.path()).unwrap();
        assert_eq!(work.plan_copy(&received), None);
        assert!(!copy.exists());
        work.make_plan_copy(&received, &bytes).unwrap();
        assert_eq!(
            std::fs::read_to_string(&script).unwrap(),
            "echo from-the-plan > a.txt\n"
        );
    }

    /// A candidate too large for a Restate message was sent anyway: the server refused it
    /// and retried the call until the task failed, saying nothing of why.
    #[test]
    fn a_call_that_writes_more_than_a_message_can_carry_is_refused_naming_the_file() {
        let submitted = tempfile::tempdir().unwrap();
        let plan = plan(
            submitted.path(),
            &format!(
                r#", "run": "echo k > a.txt && head -c {} /dev/zero > big.bin""#,
                MAX_CALL_OUTPUT_BYTES + 1
            ),
        );
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir::open(dir.path()).unwrap();
        let p = proposal(first_call(&work, plan, submitted.path(), &mut no_draw));
        let text = p.rejection().unwrap().to_string();
        assert!(
            text.contains(&format!("big.bin ({} bytes)", MAX_CALL_OUTPUT_BYTES + 1))
                && text.contains(&format!("past the {MAX_CALL_OUTPUT_BYTES} bytes")),
            "{text}"
        );
    }

    /// A task whose `run` writes a wrong value, whose check refuses it, and whose fix reads
    /// the recovery spec and writes the right one (and leaves `marker`).
    fn fixable(marker: &Path) -> String {
        format!(
            r#", "run": "echo wrong > a.txt",
               "checks": [{{"id": "right", "command": "grep -q right a.txt"}}],
               "fix": "grep -q 'is right' && echo right > a.txt && touch {}",
               "sandbox": {{"write": ["{}"]}}"#,
            marker.display(),
            marker.parent().unwrap_or(marker).display()
        )
    }

    /// A refused draw came after the call's `run` command ran: withdrawing the call gave its
    /// number to a second execution of that command.
    #[test]
    fn a_refused_draw_spends_the_call_and_its_fix_never_runs() {
        let submitted = tempfile::tempdir().unwrap();
        // Outside the plan's directory, whose files the plan binds; the fix's sandbox gives it.
        let marks = tempfile::tempdir().unwrap();
        let marker = marks.path().join("fixed");
        let plan = plan(submitted.path(), &fixable(&marker));
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir::open(dir.path()).unwrap();
        let reply = first_call(&work, plan, submitted.path(), &mut no_draw);
        assert!(reply.drawn().is_empty());
        assert_eq!(
            reply,
            TaskReply::Interrupted {
                nonce: "claim-1".into()
            }
        );
        assert!(!marker.exists(), "the fix ran without a draw");
    }

    /// Whatever ends a call's turn sets its flag: the command stops with everything it
    /// started, within a bound, and the call draws nothing after.
    #[test]
    fn a_call_whose_turn_ends_stops_its_process_group_and_draws_nothing() {
        let submitted = tempfile::tempdir().unwrap();
        // Outside the plan's directory, whose files the plan binds; the task's sandbox gives it.
        let marks = tempfile::tempdir().unwrap();
        let pids = marks.path().join("pids");
        let marker = marks.path().join("fixed");
        let run = format!(
            r#", "run": "sleep 60 & echo $! > {p}.bg; echo $$ > {p}; wait",
               "checks": [{{"id": "right", "command": "grep -q right a.txt"}}],
               "fix": "echo right > a.txt && touch {m}",
               "sandbox": {{"write": ["{d}"]}}"#,
            p = pids.display(),
            m = marker.display(),
            d = marks.path().display()
        );
        let plan = plan(submitted.path(), &run);
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir::open(dir.path()).unwrap();
        let ended = Interrupt::default();
        let draws = std::sync::atomic::AtomicUsize::new(0);
        let reply = std::thread::scope(|scope| {
            let call = scope.spawn(|| {
                let call = first_task_call(&plan);
                let turn = CallTurn {
                    claim: "claim-1",
                    ended: &ended,
                };
                work.run(
                    plan.clone(),
                    submitted.path(),
                    &call,
                    &[],
                    turn,
                    &mut |_| {
                        draws.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    },
                )
            });
            let read = |path: &Path| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                loop {
                    if let Some(pid) = std::fs::read_to_string(path)
                        .ok()
                        .and_then(|t| t.trim().parse::<u32>().ok())
                    {
                        return pid;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the command never started"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            };
            let shell = read(&pids);
            let background = read(&pids.with_extension("bg"));
            ended.set();
            let ended_at = std::time::Instant::now();
            let alive = |pid: u32| {
                // A zombie has ended; only its parent's wait is missing.
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    !s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
            };
            while alive(shell) || alive(background) {
                assert!(
                    ended_at.elapsed() < std::time::Duration::from_secs(2),
                    "the call's commands outlived its turn by 2 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            call.join().unwrap()
        });
        assert_eq!(draws.load(Ordering::SeqCst), 0, "{reply:?}");
        assert!(!marker.exists(), "the fix ran after the turn ended");
    }

    #[test]
    fn a_granted_draw_runs_the_fix_with_the_recovery_spec() {
        let submitted = tempfile::tempdir().unwrap();
        // Outside the plan's directory, whose files the plan binds; the fix's sandbox gives it.
        let marks = tempfile::tempdir().unwrap();
        let marker = marks.path().join("fixed");
        let plan = plan(submitted.path(), &fixable(&marker));
        let dir = tempfile::tempdir().unwrap();
        let work = WorkDir::open(dir.path()).unwrap();
        let mut draws = Vec::new();
        let reply = first_call(&work, plan, submitted.path(), &mut |d| {
            draws.push(d.clone());
            Ok(())
        });
        assert_eq!(reply.drawn().len(), 1);
        let p = proposal(reply);
        assert!(p.rejection().is_none(), "{:?}", p.rejection());
        assert!(marker.exists());
        assert_eq!(draws.len(), 1);
        assert_eq!(
            (draws[0].attempt, draws[0].max),
            (1, shell::DEFAULT_MAX_FIXES)
        );
        assert_eq!(p.closure().map(|c| c.fix_attempts), Some(1));
    }
}
