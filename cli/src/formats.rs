//! The versioned wire types of the state directory's own files (`run.json`, one line of
//! `closures.jsonl`) and of the `--json` event stream, kept apart from the types the CLI
//! works with so that changing those never silently changes a file.
//!
//! ```text
//! {"format": 3, "channel": "run-dc30a673498d", "workspace": "workspace", …, "digest": "…"}
//! ```
//!
//! Every file and every event line carries `format`. A reader takes its own version and
//! every earlier one (migrating the earlier ones), and refuses a later one by name rather
//! than guessing at fields it does not know.
//!
//! # Versions
//!
//! | what | format | change |
//! | --- | --- | --- |
//! | `run.json` | (none) | the first layout: channel, workspace, plan file and dir, policy, timeout |
//! | `run.json` | 1 | the same fields and `format` |
//! | `run.json` | 2 | a workspace inside the state directory is named relative to it, so a moved or copied state directory (`run --restart` moves one aside) writes to its own workspace; one outside stays absolute |
//! | `run.json` | 3 | `digest`: blake3 (derived key `kleene run.json settings`) of the other fields as compact JSON in the order of format 2, so a setting changed or damaged since the run started (a workspace pointed elsewhere) is refused by name |
//! | `closures.jsonl` line | (none) | `task`, `call`, `record` (the library's closure record) |
//! | `closures.jsonl` line | 1 | the same fields and `format` |
//! | `--json` events | (none) | `event` and its fields |
//! | `--json` events | 1 | every line (and every command's JSON result) has `format`; events also have `ts` (RFC 3339, UTC, ms) and `elapsed_ms` since the run began; what ends has `duration_ms`; `command_finished` added; `command_started` and `check_failed` name their `root_task` |

use std::path::{Component, Path, PathBuf};

use kleene::{closure::ClosureRecord, id::TaskId};
use serde::{Deserialize, Serialize};

/// The `run.json` format this kleene writes (it reads this one and every earlier one).
pub const RUN_FILE_FORMAT: u32 = 3;
/// The `closures.jsonl` line format this kleene writes.
pub const CLOSURE_LINE_FORMAT: u32 = 1;
/// The format of the `--json` event lines this kleene prints.
pub const EVENTS_FORMAT: u32 = 1;

/// Settings of a run, fixed when it starts so a resume behaves the same.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The channel the evidence is bound to.
    pub channel: String,
    /// Where accepted files are written (absolute).
    pub workspace: PathBuf,
    /// The plan file as given (for messages).
    pub plan_file: PathBuf,
    /// The plan file's directory (absolute), exported to commands as `KLEENE_PLAN_DIR`.
    pub plan_dir: PathBuf,
    /// Deepest fix subtask.
    pub max_depth: u32,
    /// Most fix subtasks in the whole run.
    pub max_fixes: u32,
    /// Whether warnings are auto-fixed.
    pub recover_warnings: bool,
    /// Whether failed roots get one corrective call.
    pub batch_recovery: bool,
    /// Timeout of each command for tasks that set none, in seconds.
    pub timeout_secs: f64,
}

/// Why a stored file could not be read as any format this kleene knows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file is of a later format than this kleene reads.
    #[error(
        "it is {what} format {found}, written by a newer kleene; this kleene reads formats up \
         to {supported}: use the kleene that wrote it, or a newer one"
    )]
    Newer {
        /// Which file.
        what: &'static str,
        /// The format it declares.
        found: u64,
        /// The newest format this kleene reads.
        supported: u32,
    },
    /// The file is of a format kleene reads, but what it says was changed or damaged since
    /// kleene wrote it.
    #[error(
        "{message}: it was changed or damaged since kleene wrote it; restore the state \
         directory, or start the run over"
    )]
    Changed {
        /// Which file.
        what: &'static str,
        /// What does not match.
        message: String,
    },
    /// The text is not a file of the format it declares.
    #[error("it is not a {what} kleene wrote: {message}")]
    Malformed {
        /// Which file.
        what: &'static str,
        /// What the JSON decoder said, with line and column.
        message: String,
    },
}

/// `run.json` as first written: no `format` field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunFileV0 {
    channel: String,
    workspace: PathBuf,
    plan_file: PathBuf,
    plan_dir: PathBuf,
    max_depth: u32,
    max_fixes: u32,
    recover_warnings: bool,
    batch_recovery: bool,
    timeout_secs: f64,
}

/// `run.json`, formats 1 to 3: the same fields, but from format 2 a relative `workspace`
/// lies inside the state directory (format 1 wrote only absolute paths), and from format 3
/// the settings carry their `digest`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunFileV1 {
    format: u32,
    channel: String,
    workspace: PathBuf,
    plan_file: PathBuf,
    plan_dir: PathBuf,
    max_depth: u32,
    max_fixes: u32,
    recover_warnings: bool,
    batch_recovery: bool,
    timeout_secs: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
}

impl RunFileV1 {
    /// The digest of every field but `digest`: blake3 under its own derived key, of their
    /// compact JSON in declaration order (one encoding, whatever the file's layout).
    fn settings_digest(&self) -> String {
        let settings = serde_json::json!([
            self.format,
            self.channel,
            self.workspace,
            self.plan_file,
            self.plan_dir,
            self.max_depth,
            self.max_fixes,
            self.recover_warnings,
            self.batch_recovery,
            self.timeout_secs,
        ]);
        let mut hasher = blake3::Hasher::new_derive_key("kleene run.json settings");
        hasher.update(settings.to_string().as_bytes());
        hasher.finalize().to_hex().to_string()
    }
}

impl From<RunFileV0> for RunInfo {
    fn from(v: RunFileV0) -> Self {
        Self {
            channel: v.channel,
            workspace: v.workspace,
            plan_file: v.plan_file,
            plan_dir: v.plan_dir,
            max_depth: v.max_depth,
            max_fixes: v.max_fixes,
            recover_warnings: v.recover_warnings,
            batch_recovery: v.batch_recovery,
            timeout_secs: v.timeout_secs,
        }
    }
}

impl From<RunFileV1> for RunInfo {
    fn from(v: RunFileV1) -> Self {
        Self {
            channel: v.channel,
            workspace: v.workspace,
            plan_file: v.plan_file,
            plan_dir: v.plan_dir,
            max_depth: v.max_depth,
            max_fixes: v.max_fixes,
            recover_warnings: v.recover_warnings,
            batch_recovery: v.batch_recovery,
            timeout_secs: v.timeout_secs,
        }
    }
}

/// The `format` a stored JSON object declares (`None`: the first layout, which had none).
fn declared_format(text: &str, what: &'static str) -> Result<Option<u64>, FormatError> {
    #[derive(Deserialize)]
    struct Declared {
        format: Option<serde_json::Value>,
    }
    let declared: Declared = serde_json::from_str(text).map_err(|e| FormatError::Malformed {
        what,
        message: e.to_string(),
    })?;
    match declared.format {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or(FormatError::Malformed {
            what,
            message: format!("its format is {value}, not a version number"),
        }),
    }
}

fn decode<T: for<'de> Deserialize<'de>>(text: &str, what: &'static str) -> Result<T, FormatError> {
    serde_json::from_str(text).map_err(|e| FormatError::Malformed {
        what,
        message: e.to_string(),
    })
}

/// A decoded `run.json`: the run's settings, and the format they were read from.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFile {
    /// The settings, with the workspace resolved to an absolute path.
    pub info: RunInfo,
    /// The format the file declared (0: the first layout, which declared none).
    pub format: u32,
}

/// `info` as the `run.json` text this kleene writes for the state directory `state_root`
/// (absolute): a workspace inside it is written relative to it, so the directory can move.
pub fn encode_run_file(info: &RunInfo, state_root: &Path) -> String {
    let workspace = match info.workspace.strip_prefix(state_root) {
        Ok(inside)
            if inside
                .components()
                .all(|c| matches!(c, Component::Normal(_))) =>
        {
            inside.to_owned()
        }
        _ => info.workspace.clone(),
    };
    let mut wire = RunFileV1 {
        format: RUN_FILE_FORMAT,
        channel: info.channel.clone(),
        workspace,
        plan_file: info.plan_file.clone(),
        plan_dir: info.plan_dir.clone(),
        max_depth: info.max_depth,
        max_fixes: info.max_fixes,
        recover_warnings: info.recover_warnings,
        batch_recovery: info.batch_recovery,
        timeout_secs: info.timeout_secs,
        digest: None,
    };
    wire.digest = Some(wire.settings_digest());
    // Plain data with string keys: serialising it cannot fail.
    serde_json::to_string_pretty(&wire).unwrap_or_default()
}

/// The run settings in a `run.json` of any format up to [`RUN_FILE_FORMAT`], read from the
/// state directory `state_root` (absolute), which a relative workspace is resolved against.
///
/// # Errors
///
/// [`FormatError::Newer`] for a later format; [`FormatError::Malformed`] for anything else
/// that is not a run file, a relative workspace in a format that wrote none among them, and
/// one that leaves the state directory.
pub fn decode_run_file(text: &str, state_root: &Path) -> Result<RunFile, FormatError> {
    const WHAT: &str = "run.json";
    let mut changed = None;
    let (mut info, format) = match declared_format(text, WHAT)? {
        None => (decode::<RunFileV0>(text, WHAT).map(RunInfo::from)?, 0),
        Some(found @ (1..=3)) => {
            let wire = decode::<RunFileV1>(text, WHAT)?;
            // What is not a run file at all is said first; then whether it is the one
            // kleene wrote.
            changed = match (found, &wire.digest) {
                (3, Some(digest)) if *digest == wire.settings_digest() => None,
                (3, Some(_)) => Some("its settings do not match the digest it was written with"),
                (3, None) => Some("it has lost the digest of its settings"),
                (_, Some(_)) => {
                    return Err(FormatError::Malformed {
                        what: WHAT,
                        message: format!("format {found} has no digest field"),
                    });
                }
                (_, None) => None,
            };
            (
                RunInfo::from(wire),
                u32::try_from(found).unwrap_or(RUN_FILE_FORMAT),
            )
        }
        Some(found) => {
            return Err(FormatError::Newer {
                what: WHAT,
                found,
                supported: RUN_FILE_FORMAT,
            });
        }
    };
    if info.workspace.is_relative() {
        let inside = format >= 2
            && info
                .workspace
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !inside {
            return Err(FormatError::Malformed {
                what: WHAT,
                message: format!(
                    "its workspace {} is neither absolute nor a path inside the state directory",
                    info.workspace.display()
                ),
            });
        }
        info.workspace = state_root.join(&info.workspace);
    }
    if let Some(message) = changed {
        return Err(FormatError::Changed {
            what: WHAT,
            message: message.to_owned(),
        });
    }
    Ok(RunFile { info, format })
}

/// One line of `closures.jsonl`, format 1 (the first layout is the same without `format`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClosureLineIn {
    /// Checked before the line is decoded (see `decode_closure_line`).
    #[serde(default, rename = "format")]
    _format: Option<u64>,
    task: String,
    call: u32,
    record: ClosureRecord,
}

/// The `closures.jsonl` line (no newline) for `record` of `call` of `task`.
///
/// # Errors
///
/// When the record cannot be encoded as JSON.
pub fn encode_closure_line(
    task: &TaskId,
    call: u32,
    record: &ClosureRecord,
) -> Result<Vec<u8>, serde_json::Error> {
    encode_closure_line_as(Some(CLOSURE_LINE_FORMAT), task, call, record)
}

/// The line in `format` (`None`: the first layout) exactly as kleene writes it: one value has
/// one written form, so `kleene audit` re-encodes a line in the format it declared and names
/// a line whose bytes differ as edited.
///
/// # Errors
///
/// When the record cannot be encoded as JSON.
pub fn encode_closure_line_as(
    format: Option<u32>,
    task: &TaskId,
    call: u32,
    record: &ClosureRecord,
) -> Result<Vec<u8>, serde_json::Error> {
    // The record's text is the one its digest was made of (`ClosureRecord::as_json`): the
    // line wraps it rather than encoding the record a second time, in the field order serde
    // writes for the line's struct (the tests hold the two alike).
    encode_closure_text_as(format, task, call, record.as_json())
}

/// The `closures.jsonl` line for the record whose text is `record` (a reused call's record,
/// as the cache kept it: `kleene audit` reads it as a record like any other line).
///
/// # Errors
///
/// When the task id cannot be encoded as JSON.
pub fn encode_closure_text(
    task: &TaskId,
    call: u32,
    record: &str,
) -> Result<Vec<u8>, serde_json::Error> {
    encode_closure_text_as(Some(CLOSURE_LINE_FORMAT), task, call, record)
}

fn encode_closure_text_as(
    format: Option<u32>,
    task: &TaskId,
    call: u32,
    record: &str,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = Vec::with_capacity(record.len() + 64);
    line.push(b'{');
    if let Some(format) = format {
        line.extend_from_slice(format!("\"format\":{format},").as_bytes());
    }
    line.extend_from_slice(b"\"task\":");
    serde_json::to_writer(&mut line, task)?;
    line.extend_from_slice(format!(",\"call\":{call},\"record\":").as_bytes());
    line.extend_from_slice(record.as_bytes());
    line.push(b'}');
    Ok(line)
}

/// One decoded line of `closures.jsonl`.
#[derive(Debug)]
pub struct ClosureLine {
    /// The format it declared (`None`: the first layout).
    pub format: Option<u32>,
    /// The task, as written.
    pub task: String,
    /// The call number.
    pub call: u32,
    /// The closure record.
    pub record: ClosureRecord,
}

/// One `closures.jsonl` line of any format up to [`CLOSURE_LINE_FORMAT`].
///
/// # Errors
///
/// [`FormatError::Newer`] for a later format; [`FormatError::Malformed`] otherwise.
pub fn decode_closure_line(line: &str) -> Result<ClosureLine, FormatError> {
    const WHAT: &str = "closures.jsonl line";
    let format = match declared_format(line, WHAT)? {
        None => None,
        Some(1) => Some(CLOSURE_LINE_FORMAT),
        Some(found) => {
            return Err(FormatError::Newer {
                what: WHAT,
                found,
                supported: CLOSURE_LINE_FORMAT,
            });
        }
    };
    let line: ClosureLineIn = decode(line, WHAT)?;
    Ok(ClosureLine {
        format,
        task: line.task,
        call: line.call,
        record: line.record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V0_RUN_FILE: &str = include_str!("../../tests/fixtures/cli_state_v0/run.json");
    const V1_RUN_FILE: &str = include_str!("../../tests/fixtures/cli_state_v1/run.json");
    const V0_CLOSURES: &str = include_str!("../../tests/fixtures/cli_state_v0/closures.jsonl");

    fn root() -> &'static Path {
        Path::new("/srv/build/st")
    }

    #[test]
    fn a_first_layout_run_file_migrates_and_round_trips_as_the_current_format() {
        let old = decode_run_file(V0_RUN_FILE, root()).unwrap();
        assert_eq!(old.format, 0);
        let info = old.info;
        assert_eq!(info.channel, "run-dc30a673498d");
        assert_eq!(info.max_depth, 3);
        // The workspace it saved lies outside this state directory: it stays absolute.
        assert_eq!(info.workspace, Path::new("/tmp/kfx/st/workspace"));
        let text = encode_run_file(&info, root());
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["format"], 3);
        assert_eq!(value["workspace"], "/tmp/kfx/st/workspace");
        assert_eq!(decode_run_file(&text, root()).unwrap().info, info);
    }

    #[test]
    fn a_format_1_run_file_reads_its_absolute_workspace() {
        let old = decode_run_file(V1_RUN_FILE, root()).unwrap();
        assert_eq!(old.format, 1);
        assert_eq!(old.info.workspace, Path::new("/tmp/mv/st/workspace"));
        assert_eq!(old.info.plan_dir, Path::new("/tmp/mv/demo"));
        // Format 1 wrote only absolute workspaces: a relative one is not a file it wrote.
        let relative = V1_RUN_FILE.replacen("/tmp/mv/st/workspace", "workspace", 1);
        assert!(matches!(
            decode_run_file(&relative, root()),
            Err(FormatError::Malformed { .. })
        ));
    }

    #[test]
    fn a_workspace_inside_the_state_directory_is_saved_relative_and_moves_with_it() {
        let mut info = decode_run_file(V1_RUN_FILE, root()).unwrap().info;
        info.workspace = root().join("workspace");
        let text = encode_run_file(&info, root());
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["workspace"], "workspace");
        assert_eq!(decode_run_file(&text, root()).unwrap().info, info);
        let moved = decode_run_file(&text, Path::new("/elsewhere/st.old-1")).unwrap();
        assert_eq!(
            moved.info.workspace,
            Path::new("/elsewhere/st.old-1/workspace")
        );
        // Nested inside works the same; a path that climbs out of the directory is refused.
        info.workspace = root().join("out/ws");
        let text = encode_run_file(&info, root());
        assert!(text.contains("\"workspace\": \"out/ws\""), "{text}");
        for escaping in ["../other/workspace", "./workspace", "a/../../b"] {
            let text = text.replacen("\"out/ws\"", &format!("{escaping:?}"), 1);
            assert!(
                matches!(
                    decode_run_file(&text, root()),
                    Err(FormatError::Malformed { .. })
                ),
                "{escaping}"
            );
        }
        // Outside stays absolute, even where a prefix of the name matches.
        info.workspace = PathBuf::from("/srv/build/st2/workspace");
        let text = encode_run_file(&info, root());
        assert!(text.contains("\"/srv/build/st2/workspace\""), "{text}");
    }

    proptest::proptest! {
        /// For every state directory and workspace: the run file reads back as written,
        /// and read from wherever the directory moved, a workspace inside it moves along
        /// while one outside stays where it was.
        #[test]
        fn a_run_file_reads_back_and_an_inner_workspace_moves_with_its_directory(
            root in proptest::collection::vec("[a-z0-9._-]{1,8}", 1..4),
            moved in proptest::collection::vec("[a-z0-9._-]{1,8}", 1..4),
            workspace in proptest::collection::vec("[a-z0-9._-]{1,8}", 0..4),
            inside in proptest::bool::ANY,
        ) {
            let named = |parts: &[String]| -> PathBuf {
                // "." and ".." are not names a path component holds here.
                let parts = parts.iter().map(|p| if p == "." || p == ".." { "x" } else { p });
                std::iter::once("/").chain(parts).collect()
            };
            let (root, moved) = (named(&root), named(&moved));
            let mut info = decode_run_file(V1_RUN_FILE, &root).unwrap().info;
            let relative: PathBuf = named(&workspace).components().skip(1).collect();
            info.workspace = if inside {
                root.join(&relative)
            } else {
                Path::new("/elsewhere").join(&relative)
            };
            let text = encode_run_file(&info, &root);
            proptest::prop_assert_eq!(&decode_run_file(&text, &root).unwrap().info, &info);
            let there = decode_run_file(&text, &moved).unwrap().info.workspace;
            let expected = if inside {
                moved.join(&relative)
            } else {
                info.workspace.clone()
            };
            proptest::prop_assert_eq!(there, expected);
        }
    }

    /// Found by fuzzing: `600.0e-55` read as 5.9999999999999995e-53, was written so, and read
    /// back as 5.999999999999999e-53. A state file reads back as what was written.
    #[test]
    fn a_timeout_reads_back_exactly_as_written() {
        let text = V0_RUN_FILE.replacen("600.0", "600.0e-55", 1);
        assert_ne!(text, V0_RUN_FILE);
        let info = decode_run_file(&text, root()).unwrap().info;
        let again = decode_run_file(&encode_run_file(&info, root()), root()).unwrap();
        assert_eq!(
            again.info.timeout_secs.to_bits(),
            info.timeout_secs.to_bits()
        );
        assert_eq!(again.info, info);
    }

    proptest::proptest! {
        /// For every finite timeout (any bit pattern) and any counts, a run file reads back
        /// as written, bit for bit.
        #[test]
        fn every_run_file_round_trips(
            bits in proptest::num::u64::ANY,
            max_depth in proptest::num::u32::ANY,
            max_fixes in proptest::num::u32::ANY,
            recover_warnings in proptest::bool::ANY,
            batch_recovery in proptest::bool::ANY,
            channel in "[ -~]{0,24}",
        ) {
            let timeout = f64::from_bits(bits);
            proptest::prop_assume!(timeout.is_finite());
            let mut info = decode_run_file(V1_RUN_FILE, root()).unwrap().info;
            info.timeout_secs = timeout;
            info.max_depth = max_depth;
            info.max_fixes = max_fixes;
            info.recover_warnings = recover_warnings;
            info.batch_recovery = batch_recovery;
            info.channel = channel;
            let back = decode_run_file(&encode_run_file(&info, root()), root()).unwrap().info;
            proptest::prop_assert_eq!(back.timeout_secs.to_bits(), timeout.to_bits());
            proptest::prop_assert_eq!(back, info);
        }
    }

    #[test]
    fn a_newer_run_file_is_refused_by_its_format() {
        let info = decode_run_file(V0_RUN_FILE, root()).unwrap().info;
        let text = encode_run_file(&info, root()).replacen("\"format\": 3", "\"format\": 4", 1);
        let err = decode_run_file(&text, root()).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::Newer {
                    found: 4,
                    supported: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("newer kleene"), "{err}");
        let odd =
            encode_run_file(&info, root()).replacen("\"format\": 3", "\"format\": \"one\"", 1);
        assert!(matches!(
            decode_run_file(&odd, root()),
            Err(FormatError::Malformed { .. })
        ));
        // A field this version does not know is refused, not dropped.
        let extra = encode_run_file(&info, root()).replacen('{', "{\"jobs\": 4,", 1);
        assert!(matches!(
            decode_run_file(&extra, root()),
            Err(FormatError::Malformed { .. })
        ));
    }

    /// The line as serde writes it: what the hand-made line must equal byte for byte.
    #[derive(Serialize)]
    struct ClosureLineOut<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        format: Option<u32>,
        task: &'a TaskId,
        call: u32,
        record: &'a ClosureRecord,
    }

    #[test]
    fn a_closure_line_wraps_the_records_own_text_exactly_as_serde_writes_the_line() {
        for line in V0_CLOSURES.lines() {
            let old = decode_closure_line(line).unwrap();
            let task = TaskId::new(old.task.clone()).unwrap();
            for format in [None, Some(CLOSURE_LINE_FORMAT), Some(u32::MAX)] {
                let ours = encode_closure_line_as(format, &task, old.call, &old.record).unwrap();
                let serde = serde_json::to_vec(&ClosureLineOut {
                    format,
                    task: &task,
                    call: old.call,
                    record: &old.record,
                })
                .unwrap();
                assert_eq!(
                    String::from_utf8(ours).unwrap(),
                    String::from_utf8(serde).unwrap()
                );
            }
        }
    }

    #[test]
    fn closure_lines_of_both_layouts_read_and_newer_ones_are_refused() {
        let first = V0_CLOSURES.lines().next().unwrap();
        let old = decode_closure_line(first).unwrap();
        assert_eq!(old.format, None);
        let id = TaskId::new(old.task.clone()).unwrap();
        // The first layout re-encodes to its own bytes: audit's edit check holds for old logs.
        let again = encode_closure_line_as(None, &id, old.call, &old.record).unwrap();
        assert_eq!(again, first.as_bytes());
        let line = encode_closure_line(&id, old.call, &old.record).unwrap();
        let line = String::from_utf8(line).unwrap();
        assert!(line.starts_with("{\"format\":1,"), "{line}");
        let new = decode_closure_line(&line).unwrap();
        assert_eq!(
            (new.format, &new.task, new.call),
            (Some(1), &old.task, old.call)
        );
        assert_eq!(new.record.digest(), old.record.digest());
        let newer = line.replacen("\"format\":1", "\"format\":7", 1);
        assert!(matches!(
            decode_closure_line(&newer),
            Err(FormatError::Newer { found: 7, .. })
        ));
    }
}
