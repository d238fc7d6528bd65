//! A call's reservation is durable before anything the call does can be seen, even when its
//! worker is handed the call while the reservation syncs (the shell agent starts its first
//! command's shell then, and holds it until the sync returns).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kleene::batch::evidence::EvidenceEvent;
use kleene::batch::journal::{EvidenceJournal, JournalError, JournalLoad, PendingSync};
use kleene::batch::{
    Batch, BatchError, BatchEvidence, ClosureWorker, MemoryJournal, Proposal, Worker, WorkerCall,
    WorkerFailure,
};
use kleene::id::ChannelId;
use kleene::shell::{self, ShellPlan, ShellRuntime};

/// When each task's reservation became durable, and whether its command's shell had started
/// by then.
#[derive(Debug, Default)]
struct Synced {
    at: HashMap<String, u128>,
    shell_waiting: HashMap<String, bool>,
}

/// A memory journal whose appends a driver may defer take `delay` to sync (or fail), and
/// which notes when each reservation became durable.
struct SlowSync {
    inner: MemoryJournal,
    delay: Duration,
    fail: bool,
    /// What every waiting shell's command line holds, to find them in /proc.
    marker: String,
    synced: Arc<Mutex<Synced>>,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Whether a process whose command line holds `marker` runs.
fn shell_running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|line| String::from_utf8_lossy(&line).contains(marker))
    })
}

impl EvidenceJournal for SlowSync {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        self.inner.append(channel, events)
    }

    fn append_deferred(
        &mut self,
        channel: &ChannelId,
        events: &mut Vec<EvidenceEvent>,
    ) -> Result<PendingSync, JournalError> {
        let reserved: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                EvidenceEvent::Reserved { task, .. } => Some(task.to_string()),
                _ => None,
            })
            .collect();
        self.inner.append_owned(channel, events)?;
        let (delay, fail, channel) = (self.delay, self.fail, channel.clone());
        let (synced, marker) = (Arc::clone(&self.synced), self.marker.clone());
        Ok(PendingSync::new(move || {
            std::thread::sleep(delay);
            let waiting = shell_running(&marker);
            if fail {
                return Err(JournalError::Store {
                    channel,
                    detail: "the disk went away".into(),
                    source: None,
                });
            }
            let mut synced = synced.lock().unwrap();
            for task in reserved {
                synced.at.insert(task.clone(), now_ns());
                synced.shell_waiting.insert(task, waiting);
            }
            Ok(())
        }))
    }

    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        self.inner.load(channel)
    }

    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.inner.compact(channel, evidence)
    }
}

/// Three independent tasks whose commands note when they started in `notes` (outside any
/// stage, given by their sandbox), then write their file.
fn plan(notes: &Path) -> ShellPlan {
    let task = |i: usize| {
        format!(
            r#"{{"id": "t{i}", "owner": "shell", "spec": {{"intent": "t{i}"}},
                "owned_paths": ["t{i}.txt"],
                "run": "date +%s%N > '{notes}/t{i}'; echo {i} > t{i}.txt",
                "sandbox": {{"write": ["{notes}"]}}}}"#,
            notes = notes.display()
        )
    };
    let json = format!(r#"{{"tasks": [{}, {}, {}]}}"#, task(0), task(1), task(2));
    ShellPlan::from_text(Path::new("plan.json"), &json, None).unwrap()
}

struct Sitting {
    _work: tempfile::TempDir,
    notes: PathBuf,
    runtime: ShellRuntime,
    journal: SlowSync,
}

fn sitting(delay: Duration, fail: bool) -> Sitting {
    let work = tempfile::tempdir().unwrap();
    let notes = work.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    let runtime = ShellRuntime::new(plan(&notes), &work.path().join("state")).unwrap();
    let journal = SlowSync {
        inner: MemoryJournal::default(),
        delay,
        fail,
        marker: notes.display().to_string(),
        synced: Arc::default(),
    };
    Sitting {
        _work: work,
        notes,
        runtime,
        journal,
    }
}

fn run(sitting: &mut Sitting, jobs: usize) -> Result<BatchEvidence, BatchError> {
    let channel = sitting.runtime.plan().default_channel().unwrap();
    let session = shell::session(&channel).unwrap();
    let runtime = &sitting.runtime;
    Batch::new(runtime.plan().plan(), channel)
        .run_threaded(
            NonZeroUsize::new(jobs).unwrap(),
            |slot| {
                ClosureWorker::new(
                    runtime.agent(slot.to_string()),
                    session.clone(),
                    shell::default_policy(),
                )
            },
            &(),
            &mut sitting.journal,
        )
        .map(|outcome| outcome.evidence)
}

#[test]
fn a_shell_command_starts_only_after_its_reservation_is_durable() {
    for jobs in [1, 2] {
        let mut sitting = sitting(Duration::from_millis(150), false);
        let evidence = run(&mut sitting, jobs).unwrap();
        assert!(evidence.summary().is_complete(), "-j {jobs}");
        let synced = sitting.journal.synced.lock().unwrap();
        for task in ["t0", "t1", "t2"] {
            let started: u128 = std::fs::read_to_string(sitting.notes.join(task))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let durable = synced.at[task];
            assert!(
                started >= durable,
                "-j {jobs}: {task}'s command started {} ms before its reservation was durable",
                (durable - started) / 1_000_000
            );
        }
        // The sync overlapped with the start: the first call's shell was already waiting.
        assert!(
            synced.shell_waiting["t0"],
            "-j {jobs}: no shell was started while the first reservation synced"
        );
    }
}

#[test]
fn a_reservation_that_cannot_be_made_durable_runs_no_command_and_stops_the_run() {
    for jobs in [1, 2] {
        let mut sitting = sitting(Duration::from_millis(50), true);
        let err = run(&mut sitting, jobs).unwrap_err();
        assert!(
            kleene::error::Chain(&err)
                .to_string()
                .contains("the disk went away"),
            "-j {jobs}: {}",
            kleene::error::Chain(&err)
        );
        std::thread::sleep(Duration::from_millis(100));
        let ran: Vec<_> = std::fs::read_dir(&sitting.notes)
            .unwrap()
            .flatten()
            .collect();
        assert!(ran.is_empty(), "-j {jobs}: commands ran: {ran:?}");
        assert!(
            !shell_running(&sitting.notes.display().to_string()),
            "-j {jobs}: a held shell outlived the run"
        );
    }
}

/// A worker that does not wait for its reservation is called once it is durable: the driver
/// never defers its append.
#[test]
fn a_worker_that_does_not_wait_is_called_once_its_reservation_is_durable() {
    struct Plain(Arc<Mutex<Vec<bool>>>);
    impl Worker for Plain {
        fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
            self.0.lock().unwrap().push(call.reservation().is_durable());
            let file =
                kleene::plan::AdmittedPath::admit(&format!("{}.txt", call.task().id)).unwrap();
            Ok(kleene::batch::Candidate::new([(file, b"x".to_vec())].into()).into())
        }
    }
    let sitting = sitting(Duration::from_millis(20), false);
    let channel = sitting.runtime.plan().default_channel().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for jobs in [1, 2] {
        let mut journal = SlowSync {
            inner: MemoryJournal::default(),
            delay: Duration::ZERO,
            fail: false,
            marker: String::new(),
            synced: Arc::default(),
        };
        let outcome = Batch::new(sitting.runtime.plan().plan(), channel.clone())
            .run_threaded(
                NonZeroUsize::new(jobs).unwrap(),
                |_| Plain(Arc::clone(&seen)),
                &(),
                &mut journal,
            )
            .unwrap();
        assert!(outcome.evidence.summary().is_complete());
        assert!(
            journal.synced.lock().unwrap().at.is_empty(),
            "-j {jobs}: a reservation was deferred for a worker that does not wait"
        );
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 6);
    assert!(seen.iter().all(|durable| *durable), "{seen:?}");
}
