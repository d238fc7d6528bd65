//! The tamper campaign: one byte flipped and one truncation of every kind of file in a
//! state directory, each named by every command that reads it, and `accept` never sealing
//! a record over it.

use std::path::{Path, PathBuf};
use std::process::Output;

use tempfile::TempDir;

use crate::cli::basics::{demo_plan, kleene, run, text};

/// How a file is damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// One bit of one byte flipped, at a place drawn from the seed.
    Flip(u64),
    /// Cut to half its length.
    Truncate,
}

impl Damage {
    fn apply(self, file: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        // Copies kleene keeps read-only are damaged all the same.
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut bytes = std::fs::read(file).unwrap();
        assert!(!bytes.is_empty(), "{} is empty", file.display());
        match self {
            Damage::Flip(seed) => {
                // splitmix64: a fixed place per seed, whatever the platform.
                let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let at = usize::try_from(z % bytes.len() as u64).unwrap();
                bytes[at] ^= 1 << (z >> 60 & 7);
            }
            Damage::Truncate => bytes.truncate(bytes.len() / 2),
        }
        std::fs::write(file, bytes).unwrap();
    }
}

/// A state directory's file, the commands that read it, and what each must name.
struct Target {
    /// The file, relative to the state directory.
    file: PathBuf,
    /// The commands that read it.
    commands: &'static [&'static str],
    /// What their refusal names.
    named: &'static str,
}

fn both(out: &Output) -> String {
    format!("{}\n{}", text(&out.stdout), text(&out.stderr))
}

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The journal's one file.
fn journal_file(state: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(state.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

#[test]
fn every_damaged_state_file_is_named_by_every_command_that_reads_it() {
    let tmp = TempDir::new().unwrap();
    let out = run(tmp.path(), &demo_plan());
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let pristine = tmp.path().join("st");
    let journal = journal_file(&pristine)
        .strip_prefix(&pristine)
        .unwrap()
        .to_owned();
    let all: &[&str] = &[
        "status",
        "audit",
        "accept",
        "export",
        "export --tree",
        "resume",
    ];
    let targets = [
        Target {
            file: "run.json".into(),
            commands: all,
            named: "run.json",
        },
        Target {
            file: "plan.json".into(),
            commands: all,
            named: "st/plan.json",
        },
        Target {
            file: "plan-files.json".into(),
            commands: all,
            named: "plan-files.json",
        },
        Target {
            file: "plan-files/tasks/service.sh".into(),
            commands: all,
            named: "plan-files",
        },
        Target {
            file: journal,
            commands: all,
            named: "journal",
        },
        Target {
            file: "closures.jsonl".into(),
            commands: &["audit", "accept", "export", "export --tree"],
            named: "closures.jsonl",
        },
        Target {
            file: "workspace/billing/vat.sh".into(),
            commands: &["status", "accept", "export", "export --tree", "resume"],
            named: "billing/vat.sh",
        },
    ];
    let mut seen = 0;
    for target in &targets {
        for damage in [Damage::Flip(seen), Damage::Truncate] {
            for command in target.commands {
                seen += 1;
                let case = TempDir::new().unwrap();
                let state = case.path().join("st");
                copy_dir(&pristine, &state);
                damage.apply(&state.join(&target.file));
                let mut args: Vec<&str> = command.split(' ').chain(["--state", "st"]).collect();
                if command.starts_with("export") {
                    args.push("out");
                }
                let out = kleene(case.path()).args(&args).output().unwrap();
                let said = both(&out);
                let what = format!("{command} after {damage:?} of {}", target.file.display());
                assert!(
                    said.contains(target.named),
                    "{what} did not name it:\n{said}"
                );
                // A resume may repair what it names (it writes the workspace again, cuts a
                // torn journal tail); every other command refuses.
                if *command != "resume" {
                    assert_ne!(out.status.code(), Some(0), "{what}:\n{said}");
                }
                assert!(
                    !state.join("acceptance.json").exists(),
                    "{what} sealed a record:\n{said}"
                );
                assert!(
                    !case.path().join("out").exists(),
                    "{what} exported:\n{said}"
                );
            }
        }
    }
}

/// A record accepted, then damaged, is named by the commands that read it.
#[test]
fn a_damaged_acceptance_record_is_named() {
    let tmp = TempDir::new().unwrap();
    let out = run(tmp.path(), &demo_plan());
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let out = kleene(tmp.path())
        .args(["accept", "--state", "st"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let pristine = tmp.path().join("st");
    for (i, damage) in [Damage::Flip(7), Damage::Truncate].into_iter().enumerate() {
        let case = TempDir::new().unwrap();
        let state = case.path().join("st");
        copy_dir(&pristine, &state);
        damage.apply(&state.join("acceptance.json"));
        for args in [
            vec!["audit", "--state", "st"],
            vec!["export", "--state", "st", "out.tar"],
        ] {
            let out = kleene(case.path()).args(&args).output().unwrap();
            let said = both(&out);
            assert_ne!(out.status.code(), Some(0), "{i} {args:?}:\n{said}");
            assert!(said.contains("acceptance.json"), "{i} {args:?}:\n{said}");
        }
    }
}

/// `run.json` pointed at another workspace is refused by every command, and nothing is
/// written there.
#[test]
fn a_run_file_pointed_elsewhere_is_refused_and_nothing_is_written_there() {
    let tmp = TempDir::new().unwrap();
    let out = run(tmp.path(), &demo_plan());
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let run_file = tmp.path().join("st/run.json");
    let elsewhere = tmp.path().join("elsewhere");
    let mut settings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&run_file).unwrap()).unwrap();
    settings["workspace"] = elsewhere.to_string_lossy().into_owned().into();
    std::fs::write(&run_file, settings.to_string()).unwrap();
    for command in ["status", "resume", "accept"] {
        let out = kleene(tmp.path())
            .args([command, "--state", "st"])
            .output()
            .unwrap();
        let said = both(&out);
        assert_eq!(out.status.code(), Some(2), "{command}:\n{said}");
        assert!(
            said.contains("run.json") && said.contains("changed or damaged"),
            "{command}:\n{said}"
        );
    }
    assert!(!elsewhere.exists());
}
