//! Turning a run into a verified build: `accept`, `export`, `verify` and the `keygen` their
//! signatures need.

use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use kleene::shell::{PlanFiles, counted};
use kleene::signing::{Envelope, PublicKey, SigningKey};
use kleene::{
    acceptance::{
        AcceptanceProblem, AcceptanceRecord, BuildBinding, SignedError, StoredRecord, VerifyError,
        accept_audited, export, verify_archive, verify_signed_archive,
    },
    id::Digest,
    snapshot::Snapshot,
};

use crate::cli::{AcceptArgs, Exit, ExportArgs, KeygenArgs, VerifyArgs};
use crate::report::Reporter;
use crate::state::{StateDir, write_atomic};
use kleene::error::Chain;

use super::closures::{closure_place, closure_problems, read_closure_log};
use super::{
    Failure, Outcome, check_workspace, journal_key, journal_torn_tail, load_evidence, signing_key,
};

/// Builds the acceptance record of the run in `state`.
fn acceptance(
    state: &StateDir,
    key: Option<&SigningKey>,
) -> Result<
    (
        kleene::acceptance::AcceptanceRecord,
        Snapshot,
        Option<PlanFiles>,
    ),
    Failure,
> {
    let journal_key = journal_key(key);
    let (info, loaded, evidence) = load_evidence(state, journal_key.as_ref())?;
    // Evidence read without the bytes a journal ends in is not all the run wrote: nothing
    // is sealed until `resume` has dealt with them.
    if let Some(torn) = journal_torn_tail(state, journal_key.as_ref()) {
        return Err(Failure::halted(format!("accept the build: {torn}")));
    }
    check_workspace(&info, &evidence)?;
    let snapshot = Snapshot::from_evidence(&evidence).map_err(|e| Failure::halted(Chain(&e)))?;
    let binding = BuildBinding::new(
        evidence.channel().clone(),
        loaded.plan().digest(),
        evidence.evidence_version(),
    );
    // The record binds each call's audit trail by digest: a trail the closure log can no
    // longer show is named here, before anything is sealed.
    let entries = state.closure_log();
    let (logged, mut problems) = read_closure_log(state, &entries);
    let sealed = accept_audited(
        loaded.plan(),
        &evidence,
        &snapshot,
        &binding,
        logged.iter().map(|l| (&l.task, l.call, l.record)),
    );
    if let Err(err) = &sealed {
        problems.extend(err.problems().iter().map(|p| match p {
            AcceptanceProblem::ClosureRecord(m) => {
                format!("{}: {m}", closure_place(state, &logged, m))
            }
            other => other.to_string(),
        }));
    }
    match sealed {
        Ok(record) if problems.is_empty() => Ok((record, snapshot, loaded.files().cloned())),
        _ => Err(Failure::halted(format!(
            "accept the build: {}, nothing was written:\n  {}",
            counted(problems.len() as u64, "problem", "problems"),
            problems.join("\n  ")
        ))),
    }
}

/// `kleene accept`.
pub fn accept_run(args: &AcceptArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let _lock = state
        .lock("accept")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let key = signing_key(&args.signing, &state)?;
    let (record, _, _) = acceptance(&state, key.as_ref())?;
    let path = state.acceptance_path();
    let envelope_path = record_envelope_path(&state);
    write_atomic(&path, record.to_json().as_bytes()).map_err(|e| Failure::halted(Chain(&e)))?;
    match &key {
        Some(key) => write_atomic(&envelope_path, record.sign(key).to_json().as_bytes())
            .map_err(|e| Failure::halted(Chain(&e)))?,
        // An envelope of an earlier record no longer describes this one.
        None => match fs::remove_file(&envelope_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Failure::halted(format!(
                    "remove {}: {e}",
                    envelope_path.display()
                )));
            }
        },
    }
    let key_id = key.as_ref().map(|k| k.public_key().key_id());
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "accepted",
            "record": path,
            "record_digest": record.digest().to_string(),
            "files": record.files().entries().len(),
            "signature": key_id.as_ref().map(|_| &envelope_path),
            "key_id": key_id,
        }));
    } else {
        let signed = key_id
            .map(|id| format!("; signed by key {id} in {}", envelope_path.display()))
            .unwrap_or_default();
        rep.say(&format!(
            "accepted {}; record {} written to {}{signed}",
            counted(record.files().entries().len() as u64, "file", "files"),
            record.digest(),
            path.display()
        ));
    }
    Ok(Exit::Ok)
}

/// Where `kleene accept --signing-key` puts the record's DSSE envelope.
fn record_envelope_path(state: &StateDir) -> PathBuf {
    state
        .acceptance_path()
        .with_file_name("acceptance.dsse.json")
}

/// Where `kleene export --signing-key` puts the signed in-toto statement: beside the
/// archive, as an in-toto bundle of one line.
fn statement_envelope_path(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".intoto.jsonl");
    PathBuf::from(name)
}

/// Checks that the record stored in `state` carries a valid signature by `key`.
fn check_record_signature(
    state: &StateDir,
    stored: &StoredRecord,
    key: &SigningKey,
) -> Result<(), Failure> {
    let path = record_envelope_path(state);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::halted(format!(
                "export: the acceptance record in {} is not signed ({} is missing); sign it \
                 with kleene accept --signing-key once you trust the evidence (see SECURITY.md)",
                state.acceptance_path().display(),
                path.display()
            )));
        }
        Err(e) => return Err(Failure::bad_input(format!("read {}: {e}", path.display()))),
    };
    let signed = Envelope::from_json(&text)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", path.display())))
        .and_then(|envelope| {
            StoredRecord::from_signed(&envelope, &key.public_key())
                .map_err(|e| Failure::halted(format!("{}: {e}", path.display())))
        })?;
    if signed.digest() != stored.digest() {
        return Err(Failure::halted(format!(
            "export: {} signs record {}, but {} holds record {}; the record was replaced \
             after it was signed: restore it, or accept again with the key once you trust \
             the evidence (see SECURITY.md)",
            path.display(),
            signed.digest(),
            state.acceptance_path().display(),
            stored.digest()
        )));
    }
    Ok(())
}

/// `kleene export OUT.tar`.
pub fn export_run(args: &ExportArgs, rep: &mut Reporter) -> Outcome {
    let state = StateDir::at(&args.state.state);
    let _lock = state
        .lock("export")
        .map_err(|e| Failure::halted(Chain(&e)))?;
    let key = signing_key(&args.signing, &state)?;
    let (record, snapshot, bound) = acceptance(&state, key.as_ref())?;
    let stored = stored_record(&state, Some(&record))?;
    if let (Some(stored), Some(key)) = (&stored, &key) {
        check_record_signature(&state, stored, key)?;
    }
    match stored {
        Some(stored) if stored.digest() != record.digest() => {
            let differences = record
                .differences(&stored.to_json())
                .unwrap_or_default()
                .iter()
                .map(|d| format!("\n  {d}"))
                .collect::<String>();
            return Err(Failure::halted(format!(
                "export: the evidence no longer matches the acceptance record in {} \
                 (recorded {}, now {}):{differences}\n\
                 the evidence changed after it was accepted. If you did not change it \
                 (by resuming or re-running), something else wrote the state directory: \
                 do not accept again before you know what (see SECURITY.md); if you did, \
                 run kleene accept again",
                state.acceptance_path().display(),
                stored.digest(),
                record.digest()
            )));
        }
        Some(_) => {}
        None => {
            write_atomic(&state.acceptance_path(), record.to_json().as_bytes())
                .map_err(|e| Failure::halted(Chain(&e)))?;
            if let Some(key) = &key {
                write_atomic(
                    &record_envelope_path(&state),
                    record.sign(key).to_json().as_bytes(),
                )
                .map_err(|e| Failure::halted(Chain(&e)))?;
            }
        }
    }
    if args.tree {
        let written = super::changes::write_tree(&state, &args.out, bound, &snapshot)?;
        if rep.mode() == crate::report::Mode::Json {
            rep.say_json(&serde_json::json!({
                "event": "exported",
                "tree": args.out,
                "record_digest": record.digest().to_string(),
                "files": written.files,
                "accepted": written.accepted,
            }));
        } else {
            rep.say(&format!(
                "exported the project as the run leaves it to {}: {}, {} of them accepted \
                 (record {})",
                args.out.display(),
                counted(written.files as u64, "file", "files"),
                written.accepted,
                record.digest(),
            ));
        }
        return Ok(Exit::Ok);
    }
    let archive = export(&record, &snapshot).map_err(|e| Failure::halted(Chain(&e)))?;
    write_atomic(&args.out, archive.as_bytes()).map_err(|e| Failure::halted(Chain(&e)))?;
    let signature = statement_envelope_path(&args.out);
    if let Some(key) = &key {
        let line = format!("{}\n", archive.verified().signed_statement(key).to_json());
        write_atomic(&signature, line.as_bytes()).map_err(|e| Failure::halted(Chain(&e)))?;
    }
    let key_id = key.as_ref().map(|k| k.public_key().key_id());
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "exported",
            "archive": args.out,
            "record_digest": record.digest().to_string(),
            "files": record.files().entries().len(),
            "signature": key_id.as_ref().map(|_| &signature),
            "key_id": key_id,
        }));
    } else {
        let check = match &key_id {
            Some(id) => format!(
                "signed statement {} (key {id}); check it with kleene verify {} --public-key \
                 PUBLIC_KEY_FILE",
                signature.display(),
                args.out.display()
            ),
            None => format!(
                "check it with kleene verify {} --state {}",
                args.out.display(),
                state.root().display()
            ),
        };
        rep.say(&format!(
            "exported {} to {} (record {}); {check}",
            counted(record.files().entries().len() as u64, "file", "files"),
            args.out.display(),
            record.digest(),
        ));
    }
    Ok(Exit::Ok)
}

/// The acceptance record stored in `state`, if there is one, with every digest of its body
/// recomputed. A record that does not hold together is refused naming what is wrong; with
/// the record the evidence gives (`expected`), also every field, task and file that differs.
pub(super) fn stored_record(
    state: &StateDir,
    expected: Option<&AcceptanceRecord>,
) -> Result<Option<StoredRecord>, Failure> {
    let path = state.acceptance_path();
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::bad_input(format!("read {}: {e}", path.display()))),
    };
    StoredRecord::from_json(&text).map(Some).map_err(|err| {
        let differences = expected
            .and_then(|r| r.differences(&text).ok())
            .map(|ds| {
                let lines: String = ds.iter().map(|d| format!("\n  {d}")).collect();
                if lines.is_empty() {
                    String::new()
                } else {
                    format!("\nit differs from the record the evidence gives in:{lines}")
                }
            })
            .unwrap_or_default();
        Failure::bad_input(format!(
            "{}: {err}{differences}\nrestore the record kleene wrote; only if you trust the \
             evidence, rewrite it with kleene accept (see SECURITY.md)",
            path.display()
        ))
    })
}

/// `kleene verify ARCHIVE`.
pub fn verify(args: &VerifyArgs, rep: &mut Reporter) -> Outcome {
    let pinned = args
        .record
        .as_deref()
        .map(|hex| {
            Digest::from_str(hex)
                .map_err(|e| Failure::bad_input(format!("use --record {hex}: {e}")))
        })
        .transpose()?;
    let bytes = fs::read(&args.archive)
        .map_err(|e| Failure::bad_input(format!("read {}: {e}", args.archive.display())))?;
    let (verified, key_id) = match &args.public_key {
        Some(public) => verify_signed(args, public, &bytes, pinned)?,
        None => {
            let expected = match pinned {
                Some(digest) => digest,
                None => stored_record(&StateDir::at(&args.state), None)?
                    .map(|r| r.digest())
                    .ok_or_else(|| {
                        Failure::bad_input(format!(
                            "verify {}: no expected record: pass --record DIGEST, \
                             --public-key FILE, or the --state of the run (its \
                             acceptance.json)",
                            args.archive.display()
                        ))
                    })?,
            };
            let verified = verify_archive(&bytes, expected)
                .map_err(|err| archive_failure(&args.archive, &err))?;
            (verified, None)
        }
    };
    let files = verified.manifest().entries().len();
    // The state's closure log, when it is there, is checked against the closures the
    // archive's record binds: the audit trail of every accepted call.
    let state = StateDir::at(&args.state);
    if state.closure_log_path().is_file() {
        let entries = state.closure_log();
        let problems = closure_problems(&state, &entries, None, Some(verified.record()));
        if !problems.is_empty() {
            return Err(Failure::halted(format!(
                "verify {}: the archive verified, but {} in {} {} not match its record:\n  {}",
                args.archive.display(),
                counted(problems.len() as u64, "closure record", "closure records"),
                state.closure_log_path().display(),
                if problems.len() == 1 { "does" } else { "do" },
                problems.join("\n  ")
            )));
        }
    }
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "verified",
            "archive": args.archive,
            "record_digest": verified.record_digest().to_string(),
            "files": files,
            "key_id": key_id,
        }));
    } else {
        let signed = key_id
            .map(|id| format!(", signed by key {id}"))
            .unwrap_or_default();
        rep.say(&format!(
            "{}: verified {} against record {}{signed}",
            args.archive.display(),
            counted(files as u64, "file", "files"),
            verified.record_digest()
        ));
    }
    Ok(Exit::Ok)
}

fn archive_failure(archive: &Path, err: &VerifyError) -> Failure {
    let mut lines = vec![format!("verify {}: {}", archive.display(), Chain(err))];
    for m in err.mismatches() {
        lines.push(format!("  {m}"));
    }
    Failure::halted(lines.join("\n"))
}

/// `kleene verify --public-key`: the archive against the statement signed beside it.
fn verify_signed(
    args: &VerifyArgs,
    public: &Path,
    bytes: &[u8],
    pinned: Option<Digest>,
) -> Result<(kleene::acceptance::VerifiedArchive, Option<String>), Failure> {
    let read = |path: &Path| {
        fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(format!("read {}: {e}", path.display())))
    };
    let key = PublicKey::from_pem(&read(public)?)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", public.display())))?;
    let signature = args
        .signature
        .clone()
        .unwrap_or_else(|| statement_envelope_path(&args.archive));
    let text = fs::read_to_string(&signature).map_err(|e| {
        Failure::bad_input(format!(
            "verify {}: read its signature {}: {e}; export with --signing-key, or pass \
             --signature FILE",
            args.archive.display(),
            signature.display()
        ))
    })?;
    let envelope = Envelope::from_json(&text)
        .map_err(|e| Failure::bad_input(format!("{}: {e}", signature.display())))?;
    let verified = verify_signed_archive(bytes, &envelope, &key).map_err(|err| match &err {
        SignedError::Archive(inner) => archive_failure(&args.archive, inner),
        other => Failure::halted(format!(
            "verify {} with {}: {}",
            args.archive.display(),
            signature.display(),
            Chain(other)
        )),
    })?;
    if let Some(pinned) = pinned
        && pinned != verified.record_digest()
    {
        return Err(Failure::halted(format!(
            "verify {}: the signed record is {}, but --record is {pinned}; check which \
                 archive and which record you meant",
            args.archive.display(),
            verified.record_digest()
        )));
    }
    Ok((verified, Some(key.key_id())))
}

/// `kleene keygen --out DIR`.
pub fn keygen(args: &KeygenArgs, rep: &mut Reporter) -> Outcome {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = &args.out;
    let secret_path = dir.join("kleene.key");
    let public_path = dir.join("kleene.pub");
    for path in [&secret_path, &public_path] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(Failure::bad_input(format!(
                "keygen: {} already exists; it is never overwritten: choose another --out \
                 or remove it yourself",
                path.display()
            )));
        }
    }
    fs::create_dir_all(dir)
        .map_err(|e| Failure::bad_input(format!("create {}: {e}", dir.display())))?;
    let key = SigningKey::generate().map_err(|e| Failure::halted(Chain(&e)))?;
    let write = |path: &Path, mode: u32, text: &str| {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .map_err(|e| Failure::halted(format!("write {}: {e}", path.display())))
    };
    write(&secret_path, 0o600, &key.to_pem())?;
    write(&public_path, 0o644, &key.public_key().to_pem())?;
    let key_id = key.public_key().key_id();
    if rep.mode() == crate::report::Mode::Json {
        rep.say_json(&serde_json::json!({
            "event": "key_generated",
            "secret_key": secret_path,
            "public_key": public_path,
            "key_id": key_id,
        }));
    } else {
        rep.say(&format!(
            "wrote secret key {} (mode 600; keep it outside every state directory) and public \
             key {}; key id {key_id}",
            secret_path.display(),
            public_path.display()
        ));
    }
    Ok(Exit::Ok)
}
