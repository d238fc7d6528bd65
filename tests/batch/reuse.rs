//! Runs that reuse: a batch with a cache accepts a task whose action key it has seen
//! accepted without calling it, records where the output came from, and calls exactly the
//! tasks whose keys changed, in every driver.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use kleene::ValidatedPlan;
use kleene::batch::cache::{
    ActionCache, ActionKeyParts, CacheWarning, CachedResult, FileCache, MemoryCache, Provenance,
};
use kleene::batch::candidate::AcceptedOutput;
use kleene::batch::journal::EvidenceJournal;
use kleene::batch::{
    Batch, Candidate, FileJournal, MemoryJournal, Proposal, RunOutcome, TaskStatus, Worker,
    WorkerCall, WorkerFailure, evidence::EvidenceEvent,
};
use kleene::id::TaskId;
use tempfile::TempDir;

use crate::support::{chan, id, path, validated};

/// `a → b → c` and `d` alone; `spec_b` is b's intent, so an edit of b moves b's key.
fn plan(spec_b: &str) -> ValidatedPlan {
    validated(&format!(
        r#"{{"tasks": [
          {{"id": "a", "owner": "A", "spec": {{"intent": "a"}}, "owned_paths": ["a.txt"]}},
          {{"id": "b", "owner": "B", "spec": {{"intent": "{spec_b}"}}, "owned_paths": ["b.txt"],
            "depends_on": ["a"]}},
          {{"id": "c", "owner": "C", "spec": {{"intent": "c"}}, "owned_paths": ["c.txt"],
            "depends_on": ["b"]}},
          {{"id": "d", "owner": "D", "spec": {{"intent": "d"}}, "owned_paths": ["d.txt"]}}
        ]}}"#
    ))
}

/// Writes `TASK.txt` holding what `contents` says for the task (its id by default) and
/// every file of its inputs (so a change reaches each task after it, and a missing input
/// shows), and logs every call it makes.
#[derive(Clone, Default)]
struct Logged {
    calls: Arc<Mutex<Vec<String>>>,
    contents: BTreeMap<String, String>,
    refuse: Option<String>,
}

impl Logged {
    fn calls(&self) -> Vec<String> {
        let mut calls = self.calls.lock().unwrap().clone();
        calls.sort();
        calls
    }

    fn proposal(&self, task: &TaskId, inputs: &[(&TaskId, &AcceptedOutput)]) -> Proposal {
        self.calls.lock().unwrap().push(task.to_string());
        let mut text = self
            .contents
            .get(task.as_str())
            .cloned()
            .unwrap_or_else(|| task.to_string());
        for (_, output) in inputs {
            for bytes in output.files().values() {
                text.push('|');
                text.push_str(&String::from_utf8_lossy(bytes));
            }
        }
        let candidate = Candidate::new(BTreeMap::from([(
            path(&format!("{task}.txt")),
            text.into_bytes(),
        )]));
        if self.refuse.as_deref() == Some(task.as_str()) {
            Proposal::refused(
                candidate,
                kleene::batch::Rejection::contract(task, "refused by the test"),
            )
        } else {
            candidate.into()
        }
    }
}

impl Worker for Logged {
    fn call(&mut self, call: &WorkerCall<'_>) -> Result<Proposal, WorkerFailure> {
        Ok(self.proposal(&call.task().id, &call.inputs()))
    }
}

fn run(
    plan: &ValidatedPlan,
    channel: &str,
    cache: &Arc<dyn ActionCache>,
    worker: &Logged,
) -> RunOutcome {
    Batch::new(plan, chan(channel))
        .with_cache(cache.clone())
        .run(&mut worker.clone(), &(), &mut MemoryJournal::default())
        .unwrap()
}

fn reused(outcome: &RunOutcome) -> Vec<String> {
    let mut tasks: Vec<String> = outcome
        .evidence
        .reused()
        .map(|(t, _)| t.to_string())
        .collect();
    tasks.sort();
    tasks
}

#[test]
fn a_second_run_with_nothing_changed_makes_no_call_and_names_where_each_output_came_from() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    let plan = plan("b");
    let first = Logged::default();
    let one = run(&plan, "run-1", &cache, &first);
    assert_eq!(first.calls(), ["a", "b", "c", "d"]);
    assert!(one.evidence.reused().next().is_none());

    let second = Logged::default();
    let two = run(&plan, "run-2", &cache, &second);
    assert!(second.calls().is_empty(), "{:?}", second.calls());
    assert!(two.evidence.summary().is_complete());
    assert_eq!(reused(&two), ["a", "b", "c", "d"]);
    for (task, from) in two.evidence.reused() {
        assert_eq!(from.channel, chan("run-1"), "{task}");
        assert_eq!(from.call, 1);
        assert_eq!(
            two.evidence.task(task).unwrap().calls(),
            0,
            "a reuse is not a call"
        );
    }
    // The same files as the run that made them.
    assert_eq!(
        two.evidence
            .accepted_outputs()
            .map(|(t, o)| (t.clone(), o.digest()))
            .collect::<Vec<_>>(),
        one.evidence
            .accepted_outputs()
            .map(|(t, o)| (t.clone(), o.digest()))
            .collect::<Vec<_>>(),
    );
    // A third run reuses as the second did, and its record says the same: the same route
    // gives the same record.
    let three = run(&plan, "run-2", &cache, &Logged::default());
    assert_eq!(three.evidence.digest(), two.evidence.digest());
    assert_ne!(two.evidence.digest(), {
        let fresh = Batch::new(&plan, chan("run-2"));
        fresh
            .run(&mut Logged::default(), &(), &mut MemoryJournal::default())
            .unwrap()
            .evidence
            .digest()
    });
}

#[test]
fn an_edited_task_and_its_dependents_are_called_and_nothing_else() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    run(&plan("b"), "run-1", &cache, &Logged::default());
    // b's edit changes its output, so c (which is given it) is called too.
    let edited = Logged {
        contents: BTreeMap::from([("b".to_owned(), "b, edited".to_owned())]),
        ..Logged::default()
    };
    let two = run(&plan("b, edited"), "run-2", &cache, &edited);
    assert_eq!(edited.calls(), ["b", "c"]);
    assert_eq!(reused(&two), ["a", "d"]);
    assert!(two.evidence.summary().is_complete());
}

#[test]
fn an_edit_that_leaves_the_output_byte_identical_calls_no_dependent() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    run(&plan("b"), "run-1", &cache, &Logged::default());
    let same_output = Logged::default();
    let two = run(&plan("b, reworded"), "run-2", &cache, &same_output);
    assert_eq!(same_output.calls(), ["b"]);
    assert_eq!(reused(&two), ["a", "c", "d"]);
}

#[test]
fn a_failed_task_is_never_kept_and_its_next_run_calls_it_again() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    let refusing = Logged {
        refuse: Some("d".to_owned()),
        ..Logged::default()
    };
    let one = run(&plan("b"), "run-1", &cache, &refusing);
    assert_eq!(one.evidence.status(&id("d")), Some(TaskStatus::Failed));
    let again = Logged::default();
    let two = run(&plan("b"), "run-2", &cache, &again);
    assert_eq!(again.calls(), ["d"]);
    assert_eq!(reused(&two), ["a", "b", "c"]);
}

#[test]
fn a_task_keyed_as_never_cached_is_always_called() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    let keys = |task: &kleene::plan::PlannedTask| {
        (task.id.as_str() != "d").then(|| ActionKeyParts::new(task))
    };
    let plan = plan("b");
    for (channel, expected) in [("run-1", vec!["a", "b", "c", "d"]), ("run-2", vec!["d"])] {
        let worker = Logged::default();
        Batch::new(&plan, chan(channel))
            .with_cache(cache.clone())
            .with_action_keys(keys)
            .run(&mut worker.clone(), &(), &mut MemoryJournal::default())
            .unwrap();
        assert_eq!(worker.calls(), expected);
    }
}

#[test]
fn the_threaded_and_async_drivers_reuse_as_the_sequential_one_does() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    run(&plan("b"), "run-1", &cache, &Logged::default());
    let edited = plan("b, edited");
    let sequential = run(&edited, "run-2", &cache, &Logged::default());

    let cache_t: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    run(&plan("b"), "run-1", &cache_t, &Logged::default());
    let threaded_worker = Logged::default();
    let threaded = Batch::new(&edited, chan("run-2"))
        .with_cache(cache_t)
        .run_threaded(
            NonZeroUsize::new(3).unwrap(),
            |_| threaded_worker.clone(),
            &(),
            &mut MemoryJournal::default(),
        )
        .unwrap();
    let show = |o: &RunOutcome| {
        o.evidence
            .accepted_outputs()
            .map(|(t, out)| {
                format!(
                    "{t}={:?}",
                    out.files()
                        .values()
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                        .collect::<Vec<_>>()
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        threaded_worker.calls(),
        ["b"],
        "{:?} vs {:?}",
        show(&threaded),
        show(&sequential)
    );
    assert_eq!(threaded.evidence.digest(), sequential.evidence.digest());

    #[cfg(feature = "async")]
    {
        use kleene::batch::{AsyncWorker, AsyncWorkerCall};
        struct Async(Logged);
        impl AsyncWorker for Async {
            async fn call(
                &mut self,
                call: &AsyncWorkerCall<'_>,
            ) -> Result<Proposal, WorkerFailure> {
                Ok(self.0.proposal(&call.task().id, &call.inputs()))
            }
        }
        let cache_a: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
        run(&plan("b"), "run-1", &cache_a, &Logged::default());
        let async_worker = Logged::default();
        let batch = Batch::new(&edited, chan("run-2")).with_cache(cache_a);
        let mut journal = MemoryJournal::default();
        let outcome = futures_executor::block_on(batch.run_async(
            NonZeroUsize::new(3).unwrap(),
            |_| Async(async_worker.clone()),
            &(),
            &mut journal,
        ))
        .unwrap();
        assert_eq!(async_worker.calls(), ["b"]);
        assert_eq!(outcome.evidence.digest(), sequential.evidence.digest());
    }
}

/// A reuse is journaled: a journal on disk folds back to the same evidence, and a resume of
/// the run makes no call the reuse already answered.
#[test]
fn a_reuse_is_journaled_folded_and_resumed() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    run(&plan("b"), "run-1", &cache, &Logged::default());
    let tmp = TempDir::new().unwrap();
    let edited = plan("b, edited");
    let batch = Batch::new(&edited, chan("run-2")).with_cache(cache.clone());
    let outcome = {
        let mut journal = FileJournal::open(tmp.path()).unwrap();
        batch
            .run(&mut Logged::default(), &(), &mut journal)
            .unwrap()
    };
    let mut journal = FileJournal::open(tmp.path()).unwrap();
    let events = journal.load(&chan("run-2")).unwrap().unwrap();
    let folded = events.into_evidence().unwrap();
    assert_eq!(folded.digest(), outcome.evidence.digest());
    assert_eq!(folded.reused().count(), 3);
    // Nothing is left to do, and a resume says so without a call.
    let worker = Logged::default();
    let again = batch.run(&mut worker.clone(), &(), &mut journal).unwrap();
    assert!(again.resumed);
    assert!(worker.calls().is_empty());
    assert_eq!(again.evidence.digest(), outcome.evidence.digest());
}

/// Every reuse is one event, in the commit of the reservations it stands beside.
#[test]
fn a_reuse_is_an_event_of_its_own() {
    let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    run(&plan("b"), "run-1", &cache, &Logged::default());
    let mut events = Vec::new();
    Batch::new(&plan("b"), chan("run-2"))
        .with_cache(cache)
        .run_observed(
            &mut Logged::default(),
            &(),
            &mut MemoryJournal::default(),
            &mut |e| events.push(e.clone()),
        )
        .unwrap();
    let reused: Vec<&EvidenceEvent> = events
        .iter()
        .filter(|e| matches!(e, EvidenceEvent::Reused { .. }))
        .collect();
    assert_eq!(reused.len(), 4);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, EvidenceEvent::Reserved { .. }))
    );
}

/// Entries that do not hold, or are not the task's, are misses with a warning that names
/// them; nothing wrong is accepted.
#[test]
fn a_damaged_or_foreign_entry_is_a_warning_and_a_call() {
    let tmp = TempDir::new().unwrap();
    let cache: Arc<dyn ActionCache> = Arc::new(FileCache::new(tmp.path()));
    run(&plan("b"), "run-1", &cache, &Logged::default());
    // Damage d's entry: flip a byte of each entry file that names task d.
    let entries = tmp.path().join("entries");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&entries).unwrap() {
        let p = entry.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        if text.contains(r#""task":"d""#) {
            std::fs::write(&p, text.replace(r#""call":1"#, r#""call":2"#)).unwrap();
            damaged += 1;
        }
    }
    assert_eq!(damaged, 1);
    let worker = Logged::default();
    let two = run(&plan("b"), "run-2", &cache, &worker);
    assert_eq!(worker.calls(), ["d"]);
    assert!(
        matches!(&two.cache_warnings[..], [CacheWarning::Refused { task, entry, .. }]
            if task == &id("d") && entry.contains("entries")),
        "{:?}",
        two.cache_warnings
    );
    assert!(two.cache_warnings[0].to_string().contains("task d"));
    // The call made again replaced the damaged entry: the next run reuses it.
    let three = Logged::default();
    run(&plan("b"), "run-3", &cache, &three);
    assert!(three.calls().is_empty());
}

/// A cache written by someone else can hold, under a task's key, an entry that holds
/// together but writes outside the task's ownership or names another task: never taken.
#[test]
fn an_entry_that_writes_outside_the_task_or_names_another_is_not_taken() {
    let plan = plan("b");
    let task_d = plan.tasks().find(|t| t.id.as_str() == "d").unwrap();
    let key = ActionKeyParts::new(task_d).key();
    for (named, file) in [("d", "a.txt"), ("a", "d.txt")] {
        let cache: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
        let candidate = Candidate::new(BTreeMap::from([(path(file), b"forged".to_vec())]));
        let output = AcceptedOutput::verified(candidate.clone(), candidate.digest()).unwrap();
        let result = CachedResult::new(
            key,
            id(named),
            Provenance::new(chan("elsewhere"), 1),
            &output,
            None,
        );
        cache.store(&result, &output, None).unwrap();
        let worker = Logged::default();
        let outcome = run(&plan, "run-1", &cache, &worker);
        assert!(worker.calls().contains(&"d".to_owned()), "{named} {file}");
        assert!(outcome.evidence.reused().next().is_none());
        assert!(
            matches!(&outcome.cache_warnings[..], [CacheWarning::Unusable { task, .. }] if task == &id("d")),
            "{:?}",
            outcome.cache_warnings
        );
        let d = outcome
            .evidence
            .accepted_outputs()
            .find(|(t, _)| t.as_str() == "d")
            .unwrap()
            .1;
        assert_eq!(d.files().keys().collect::<Vec<_>>(), [&path("d.txt")]);
    }
}

/// A driver whose store answers asynchronously (a remote cache) asks the machine which keys
/// its next reservation looks up, fetches those entries into the batch's in-memory cache,
/// and takes the reuses (no call), round after round: every task is reused, in dependency
/// order, and none is called. (`reserve` called `b` as soon as `a`'s reuse made it ready.)
#[test]
fn the_keys_a_reservation_looks_up_can_be_fetched_before_it() {
    let original = plan("b");
    let remote: Arc<dyn ActionCache> = Arc::new(MemoryCache::new());
    let worker = Logged::default();
    run(&original, "first", &remote, &worker);
    assert_eq!(worker.calls().len(), 4);
    let local = Arc::new(MemoryCache::new());
    let batch = Batch::new(&original, chan("second")).with_cache(local.clone());
    let (mut machine, _) = batch.machine(None).unwrap();
    let mut asked = Vec::new();
    while !machine.evidence().summary().is_complete() {
        let keys = machine.take_ready_action_keys();
        assert!(!keys.is_empty(), "a ready task names no key");
        for (task, key) in keys {
            asked.push(task.to_string());
            let kleene::batch::cache::Lookup::Hit(hit) = remote.lookup(&key) else {
                panic!("{task}: the first run kept no result under {key}");
            };
            local
                .store(hit.result(), hit.output(), hit.closure())
                .unwrap();
        }
        assert!(!machine.reserve_reused().unwrap().is_empty());
    }
    assert_eq!(asked, ["a", "d", "b", "c"]);
    assert_eq!(machine.evidence().reused().count(), 4);
    // With b edited, its key moves: a and d are reused, b and c stay ready for calls.
    let edited = plan("b, edited");
    let local = Arc::new(MemoryCache::new());
    let (mut machine, _) = Batch::new(&edited, chan("fourth"))
        .with_cache(local.clone())
        .machine(None)
        .unwrap();
    for _ in 0..3 {
        for (_, key) in machine.take_ready_action_keys() {
            if let kleene::batch::cache::Lookup::Hit(hit) = remote.lookup(&key) {
                local
                    .store(hit.result(), hit.output(), hit.closure())
                    .unwrap();
            }
        }
        machine.reserve_reused().unwrap();
    }
    assert_eq!(machine.evidence().reused().count(), 2);
    // Each ready task's key is handed out once: b's was, and nothing new is ready.
    assert!(machine.take_ready_action_keys().is_empty());
    let work = machine.reserve(4).unwrap();
    let called: Vec<String> = work
        .dispatches
        .iter()
        .map(|d| d.task().to_string())
        .collect();
    assert_eq!(called, ["b"]);
    // Without a cache there is nothing to look up.
    let (mut bare, _) = Batch::new(&original, chan("third")).machine(None).unwrap();
    assert!(bare.take_ready_action_keys().is_empty());
}
