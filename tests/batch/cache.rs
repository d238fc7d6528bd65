//! The cache of accepted results: what is stored reads back checked, and every kind of
//! poisoning (a flipped byte, a truncation, swapped objects, an entry of another plan, another
//! key's seal) is a miss that names the entry, never a hit with other files.

use std::collections::BTreeMap;
use std::path::Path;

use kleene::Task;
use kleene::batch::Candidate;
use kleene::batch::cache::{
    ActionCache, ActionKey, ActionKeyParts, CachedResult, EntryProblem, FileCache, Lookup,
    MemoryCache, Provenance,
};
use kleene::batch::candidate::AcceptedOutput;
use kleene::closure::step::Session;
use kleene::closure::{ClosureRecord, ExecutionOutput, RecoveryPolicy, Spec, run_to_closure};
use kleene::id::{ChannelId, Digest, TaskId};
use kleene::plan::AdmittedPath;
use kleene::testing::closure::ScriptedAgent;
use proptest::prelude::*;
use tempfile::TempDir;

/// The closure record of a call of task `t{n}` that passed at once.
fn closure(n: u32) -> ClosureRecord {
    let mut agent = ScriptedAgent::new().outputs([ExecutionOutput::new(format!("t{n} done"))]);
    run_to_closure(
        Task::new(TaskId::new(format!("t{n}")).unwrap(), Spec::new("t")),
        Session::new("build", "cache").unwrap(),
        &mut agent,
        &RecoveryPolicy::default(),
    )
}

/// The key of task `t{n}` of a one-task plan, and a result for it with `files` (its call's
/// closure record is `closure(n)`).
fn result(n: u32, files: &[(&str, &[u8])]) -> (ActionKey, CachedResult, AcceptedOutput) {
    let plan = kleene::AppBuildPlan::from_json(&format!(
        r#"{{"tasks": [{{"id": "t{n}", "owner": "shell", "spec": {{"intent": "t"}},
            "owned_paths": ["out"]}}]}}"#
    ))
    .unwrap()
    .validate()
    .unwrap();
    let key = ActionKeyParts::new(plan.tasks().next().unwrap()).key();
    let candidate = Candidate::new(
        files
            .iter()
            .map(|(p, b)| (AdmittedPath::admit(p).unwrap(), b.to_vec()))
            .collect::<BTreeMap<_, _>>(),
    );
    let output = AcceptedOutput::verified(candidate.clone(), candidate.digest()).unwrap();
    let provenance = Provenance::new(ChannelId::new("run-1").unwrap(), n + 1);
    let result = CachedResult::new(
        key,
        TaskId::new(format!("t{n}")).unwrap(),
        provenance,
        &output,
        Some(&closure(n)),
    );
    (key, result, output)
}

fn two(cache: &dyn ActionCache) -> [(ActionKey, AcceptedOutput); 2] {
    let (k0, r0, o0) = result(0, &[("out/a", b"alpha"), ("out/b", b"beta")]);
    let (k1, r1, o1) = result(1, &[("out/c", b"gamma")]);
    cache.store(&r0, &o0, Some(&closure(0))).unwrap();
    cache.store(&r1, &o1, Some(&closure(1))).unwrap();
    [(k0, o0), (k1, o1)]
}

fn refused(lookup: Lookup) -> (String, EntryProblem) {
    match lookup {
        Lookup::Refused { entry, problem } => (entry, problem),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn what_is_stored_reads_back_with_its_provenance_in_memory_and_on_disk() {
    let tmp = TempDir::new().unwrap();
    let on_disk = FileCache::new(tmp.path());
    let memory = MemoryCache::new();
    for cache in [&on_disk as &dyn ActionCache, &memory] {
        let stored = two(cache);
        for (key, output) in &stored {
            match cache.lookup(key) {
                Lookup::Hit(hit) => {
                    assert_eq!(hit.output().files(), output.files());
                    assert_eq!(hit.result().key(), *key);
                    assert_eq!(hit.result().provenance().channel.as_str(), "run-1");
                    assert!(hit.result().provenance().call >= 1);
                    // The call's audit trail comes with it, the record the entry binds.
                    let trail = hit.closure().map(ClosureRecord::digest);
                    assert!(trail.is_some());
                    assert_eq!(trail, hit.result().closure().map(|c| c.record));
                }
                other => panic!("{other:?}"),
            }
        }
        let (absent, _, _) = result(2, &[]);
        assert!(matches!(cache.lookup(&absent), Lookup::Miss));
    }
}

#[test]
fn an_output_that_is_not_the_results_is_not_stored() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let (key, r0, o0) = result(0, &[("out/a", b"alpha")]);
    let (_, _, other) = result(0, &[("out/a", b"ALPHA")]);
    assert!(cache.store(&r0, &other, Some(&closure(0))).is_err());
    // Nor a closure record that is not the one the result names.
    assert!(cache.store(&r0, &o0, Some(&closure(1))).is_err());
    assert!(cache.store(&r0, &o0, None).is_err());
    assert!(matches!(cache.lookup(&key), Lookup::Miss));
}

#[test]
fn a_flipped_byte_or_a_truncated_entry_is_refused_by_name() {
    for damage in ["flip", "truncate"] {
        let tmp = TempDir::new().unwrap();
        let cache = FileCache::new(tmp.path());
        let [(key, _), _] = two(&cache);
        let path = cache.entry_path(&key);
        let mut bytes = std::fs::read(&path).unwrap();
        if damage == "flip" {
            let at = bytes.windows(6).position(|w| w == b"\"call\"").unwrap() + 7;
            bytes[at] ^= 0x01;
        } else {
            bytes.truncate(bytes.len() / 2);
        }
        std::fs::write(&path, bytes).unwrap();
        let (entry, problem) = refused(cache.lookup(&key));
        assert_eq!(entry, path.display().to_string(), "{damage}");
        assert!(
            matches!(problem, EntryProblem::Digest | EntryProblem::Malformed(_)),
            "{damage}: {problem}"
        );
    }
}

#[test]
fn swapped_objects_are_refused_naming_the_file() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let [(key, _), _] = two(&cache);
    let object = |b: &[u8]| {
        tmp.path()
            .join("objects")
            .join(Digest::from(blake3::hash(b)).to_string())
    };
    let (a, c) = (object(b"alpha"), object(b"gamma"));
    let swap = tmp.path().join("swap");
    std::fs::rename(&a, &swap).unwrap();
    std::fs::rename(&c, &a).unwrap();
    std::fs::rename(&swap, &c).unwrap();
    let (_, problem) = refused(cache.lookup(&key));
    assert!(
        matches!(&problem, EntryProblem::ObjectDamaged { path } if path.as_str() == "out/a"),
        "{problem}"
    );
    std::fs::remove_file(&a).unwrap();
    let (_, problem) = refused(cache.lookup(&key));
    assert!(
        matches!(problem, EntryProblem::ObjectUnreadable { .. }),
        "{problem}"
    );
}

/// Objects are written in place, so a crash mid-write leaves one cut short: the entry that
/// names it is refused (a miss, never a wrong hit), and the next store of the same result
/// replaces it whole.
#[test]
fn an_object_cut_short_is_refused_and_the_next_store_repairs_it() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let (key, result, output) = result(0, &[("out/a", b"alpha and more")]);
    cache.store(&result, &output, Some(&closure(0))).unwrap();
    let object = tmp
        .path()
        .join("objects")
        .join(Digest::from(blake3::hash(b"alpha and more")).to_string());
    std::fs::write(&object, b"alpha").unwrap();
    let (_, problem) = refused(cache.lookup(&key));
    assert!(
        matches!(&problem, EntryProblem::ObjectDamaged { path } if path.as_str() == "out/a"),
        "{problem}"
    );
    cache.store(&result, &output, Some(&closure(0))).unwrap();
    assert_eq!(std::fs::read(&object).unwrap(), b"alpha and more");
    assert!(matches!(cache.lookup(&key), Lookup::Hit(_)), "repaired");
}

/// The call's closure record is kept as an object too: another call's record in its place is
/// refused naming the record the entry binds.
#[test]
fn another_calls_closure_record_in_its_place_is_refused() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let [(key, _), _] = two(&cache);
    let object = |r: &ClosureRecord| {
        tmp.path()
            .join("objects")
            .join(Digest::from(blake3::hash(r.to_json().as_bytes())).to_string())
    };
    std::fs::copy(object(&closure(1)), object(&closure(0))).unwrap();
    let (_, problem) = refused(cache.lookup(&key));
    assert!(
        matches!(&problem, EntryProblem::Closure { record, .. } if *record == closure(0).digest()),
        "{problem}"
    );
}

#[test]
fn an_entry_of_another_plan_under_this_key_is_refused() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let [(k0, _), (k1, _)] = two(&cache);
    std::fs::copy(cache.entry_path(&k1), cache.entry_path(&k0)).unwrap();
    let (_, problem) = refused(cache.lookup(&k0));
    assert_eq!(
        problem,
        EntryProblem::OtherKey {
            wanted: k0,
            found: k1
        }
    );
}

#[test]
fn an_entry_sealed_by_another_key_or_by_none_is_refused_where_a_key_is_set() {
    let tmp = TempDir::new().unwrap();
    let ours = FileCache::new(tmp.path()).with_mac_key([1; 32]);
    let theirs = FileCache::new(tmp.path()).with_mac_key([2; 32]);
    let unkeyed = FileCache::new(tmp.path());
    let [(k0, _), (k1, _)] = two(&theirs);
    assert_eq!(refused(ours.lookup(&k0)).1, EntryProblem::Mac);
    assert!(matches!(theirs.lookup(&k0), Lookup::Hit(_)));
    two(&unkeyed);
    assert_eq!(refused(ours.lookup(&k1)).1, EntryProblem::Unsigned);
    two(&ours);
    assert!(matches!(ours.lookup(&k1), Lookup::Hit(_)));
}

#[test]
fn an_entry_of_another_format_is_refused_by_its_number() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let [(key, _), _] = two(&cache);
    let path = cache.entry_path(&key);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("\"format\":1", "\"format\":2", 1);
    std::fs::write(&path, text).unwrap();
    assert_eq!(refused(cache.lookup(&key)).1, EntryProblem::Format(2));
}

fn files_of(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for sub in ["entries", "objects"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            out.push(e.unwrap().path());
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// For all single-bit flips of any byte of any file of a cache: the lookup that reads
    /// the flipped byte refuses its entry, and every other lookup is a hit with exactly the
    /// files stored under its key; never a hit with other files.
    #[test]
    fn no_single_flip_anywhere_in_a_cache_makes_a_wrong_hit(
        file in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        bit in 0..8u8,
    ) {
        let tmp = TempDir::new().unwrap();
        let cache = FileCache::new(tmp.path());
        let stored = two(&cache);
        let files = files_of(tmp.path());
        let target = file.get(&files);
        let mut bytes = std::fs::read(target).unwrap();
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        std::fs::write(target, bytes).unwrap();
        let mut refusals = 0;
        for (key, output) in &stored {
            match cache.lookup(key) {
                Lookup::Hit(hit) => prop_assert_eq!(hit.output().files(), output.files()),
                Lookup::Refused { .. } => refusals += 1,
                Lookup::Miss => prop_assert!(false, "a stored entry went missing"),
                _ => prop_assert!(false, "unknown lookup"),
            }
        }
        // Every byte of every file is read by exactly one lookup, and each flip is seen.
        prop_assert_eq!(refusals, 1);
    }
}

/// Whoever can write the cache can plant a link or a FIFO at an entry's or an object's
/// name: each is refused at once, never read through and never waited on.
#[test]
fn a_link_or_a_fifo_at_an_entry_or_an_object_is_refused_without_waiting() {
    let tmp = TempDir::new().unwrap();
    let cache = FileCache::new(tmp.path());
    let [(key, _), _] = two(&cache);
    let entry = cache.entry_path(&key);
    let object = tmp
        .path()
        .join("objects")
        .join(Digest::from(blake3::hash(b"alpha")).to_string());
    let outside = tmp.path().join("outside");
    for victim in [&entry, &object] {
        let kept = std::fs::read(victim).unwrap();
        // A link to the very bytes that were there: still refused, never followed.
        std::fs::write(&outside, &kept).unwrap();
        std::fs::remove_file(victim).unwrap();
        std::os::unix::fs::symlink(&outside, victim).unwrap();
        let (_, problem) = refused(cache.lookup(&key));
        assert!(!problem.to_string().is_empty());
        // A FIFO: the lookup returns at once, refused.
        std::fs::remove_file(victim).unwrap();
        let made = std::process::Command::new("mkfifo").arg(victim).status();
        if made.is_ok_and(|s| s.success()) {
            let (_, problem) = refused(cache.lookup(&key));
            assert!(!problem.to_string().is_empty());
            std::fs::remove_file(victim).unwrap();
        }
        std::fs::write(victim, &kept).unwrap();
        assert!(matches!(cache.lookup(&key), Lookup::Hit(_)));
    }
}
