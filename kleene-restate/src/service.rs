//! The Restate services: the channel object that drives kleene's batch machine and serves
//! its accepted outputs by digest, and the stateless task-worker service that makes the
//! calls.
//!
//! ```no_run
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! use kleene_restate::service::{endpoint, serve};
//! let dir = std::path::Path::new("/tmp/kleene-worker");
//! // No content store: calls write at most 4 MiB, which travels in Restate's messages.
//! let endpoint = endpoint(dir, 4, "http://127.0.0.1:8080", None)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
//! serve(listener, endpoint).await?;
//! # Ok(()) }
//! ```
//!
//! # How a run maps onto Restate
//!
//! - `Channel/{channel}/submit` (exclusive: one writer per channel) refuses a channel that
//!   has evidence, then runs the batch machine. Each commit is one journal entry (`ctx.run`
//!   named `commit`), made before any call it reserves; settlements are committed with the
//!   next reservation (group commit), which waits until half the submission's `jobs` calls
//!   are free (or none is in flight). Every commit's events then go into the object's state
//!   after a checkpoint of the whole evidence, written again every 64 commits and at the
//!   pass's end: Restate keeps an invocation's journal for a day, the evidence in state
//!   outlives it, and a commit costs its own events rather than the whole evidence. `resume` continues from that evidence with kleene's
//!   resume rules; `status` (shared) reads it while a pass runs.
//! - Reserved calls go to the service handler `TaskWorker/calls`, one call to an invocation
//!   or (the submission's `calls_per_invocation`) several; the machine reserves up to the
//!   submission's `jobs` calls at once, and they settle in whatever order their invocations
//!   end. Any number of worker processes serve the service behind one deployment URL.
//! - A prerequisite's accepted output is kept in the channel's state under its digest when
//!   it is accepted; the worker fetches them by digest (`Channel/{channel}/outputs`, a shared
//!   handler, so it is served while the pass runs) and checks the bytes against it.
//! - The plan travels by digest: a submission carries the plan file's text, the manifest of
//!   the files beside it (path → digest, bound into the plan digest) and, once, their bytes,
//!   which the channel checks and keeps under `plan-file/{digest}`. Each call carries the
//!   plan's digest and the manifest; a worker reads the text from the channel's submission
//!   once per process (`Channel/{channel}/submission`, shared) and checks the plan it
//!   rebuilds has that digest; a worker without a copy of the plan's files fetches the bytes
//!   (`Channel/{channel}/plan_files`, shared), checks each against its digest, and runs the
//!   call from its own read-only copy (`KLEENE_PLAN_DIR`).
//! - The worker returns each call's closure record with its reply; when the call settles
//!   its closure, the channel keeps the record under `closure/{task}/{call}` (after
//!   checking it is the one the settlement binds, and never replacing another kept for the
//!   same call) before the evidence that binds it, and serves them
//!   (`Channel/{channel}/closures`, shared) for acceptance to check every audit trail.
//! - The worker claims a call with a journaled nonce before running it. Restate retries an
//!   invocation whose worker died; the retry finds the claim and no result and answers
//!   `Interrupted` instead of running the command again. The channel seals the call in its
//!   fix ledger, lets the other calls settle and rebuilds its machine from the evidence,
//!   which applies kleene's resume rules to the interrupted call: `allow` makes a new call
//!   within the task's budget, `block` stops the pass naming agent, channel and task.
//! - A call is fenced to its turn: when the server ends an attempt, the SDK drops its
//!   handler and the call's command stops with its process group; a fix draw carries the
//!   call's turn, and the ledger refuses one for a sealed call or for a call number another
//!   execution drew under.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use kleene::batch::cache::ActionKey;
use kleene::batch::{
    BatchError, BatchEvidence, Proposal, WorkerFailure, candidate::AcceptedOutput,
    evidence::EvidenceEvent, evidence::Settlement, machine::BatchMachine, machine::Dispatch,
    worker::InfrastructureFailure, worker::PendingTurnReplay,
};
use kleene::closure::ClosureRecord;
use kleene::error::Chain;
use kleene::id::{AgentId, ChannelId, Digest, TaskId};
use kleene::plan::ValidatedPlan;
use kleene::process::Interrupt;
use kleene::shell::{LoadError, PlanFiles, PlanFilesError, PlanFilesManifest, ShellPlan};
use restate_sdk::prelude::*;
use restate_sdk::service::IntoServiceDefinition;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::cache::{ActionCacheObject, ActionCacheObjectClient, ChannelCache};
use crate::call::{DrawAnswer, FixDraw, StoredClosure, TaskCall, TaskReply};
use crate::client::Restate;
use crate::content::{ContentError, Files, verify};
use crate::status::ChannelStatus;
use crate::store::{Carried, ContentStore, StoreError, carried_bytes, carry_bytes};
use crate::worker::{CallTurn, WorkDir, WorkDirError};

/// The state key of the channel's checkpointed evidence.
const EVIDENCE: &str = "evidence";
/// The prefix of the state keys of the events committed after the checkpoint, one key a
/// commit, named by the count of events before it (zero-padded, so they sort in order).
const TAIL_PREFIX: &str = "evidence-tail/";
/// The state key of the events of the commit that follows `before` events.
fn tail_key(before: u64) -> String {
    format!("{TAIL_PREFIX}{before:012}")
}
/// The keys of the commits kept after the checkpoint among an object's `keys`, in order.
fn tail_keys(keys: Vec<String>) -> Vec<String> {
    let mut tail: Vec<String> = keys
        .into_iter()
        .filter(|k| k.starts_with(TAIL_PREFIX))
        .collect();
    tail.sort();
    tail
}
/// How many commits are appended after the checkpoint before it is written again whole.
/// Writing the whole evidence at every commit cost O(tasks) per commit (the server's CPU and
/// the invocation's journal, O(tasks²) a pass); now a commit costs its own events, and a
/// reader folds at most this many appended commits onto the checkpoint.
const TAIL_LIMIT: usize = 64;

/// How a content-store failure on `channel` stops a handler: terminal, naming the channel.
fn store_failure(channel: &str) -> impl Fn(StoreError) -> HandlerError + use<> {
    let channel = channel.to_owned();
    move |source| {
        terminal(&ChannelError::Store {
            channel: channel.clone(),
            source,
        })
    }
}

/// Reads the channel's evidence from the state of `$ctx`: the checkpoint with the commits
/// appended after it folded on; `None` before a submission. (A macro: the SDK's read trait
/// does not lend itself to a generic async function whose futures stay `Send`.)
macro_rules! read_evidence {
    ($ctx:expr, $channel:expr, $store:expr) => {
        match $ctx.get::<Vec<u8>>(EVIDENCE).await? {
            None => None,
            Some(bytes) => {
                let stored = store_failure(&$channel);
                let bytes = carried_bytes(bytes, $store).map_err(&stored)?;
                let checkpoint: BatchEvidence =
                    kleene::checkpoint::decode(&bytes).map_err(|source| {
                        terminal(&ChannelError::Checkpoint {
                            channel: $channel.to_owned(),
                            source,
                        })
                    })?;
                let keys = tail_keys($ctx.get_keys().await?);
                let mut events = Vec::new();
                for key in &keys {
                    if let Some(Json(commit)) =
                        $ctx.get::<Json<Carried<Vec<EvidenceEvent>>>>(key).await?
                    {
                        events.extend(commit.into_value($store).map_err(&stored)?);
                    }
                }
                Some(checkpoint.extended(events).map_err(|source| {
                    terminal(&ChannelError::Tail {
                        channel: $channel.to_owned(),
                        source,
                    })
                })?)
            }
        }
    };
}
/// The state key of the submission the evidence belongs to.
const SUBMISSION: &str = "submission";
/// The state key of the reason the last pass stopped.
const STOPPED: &str = "stopped";
/// The state key of the accepted output with `digest`.
fn output_key(digest: Digest) -> String {
    format!("output/{digest}")
}
/// The state key of the plan file with `digest`.
fn plan_file_key(digest: Digest) -> String {
    format!("plan-file/{digest}")
}
/// The name plans rebuilt from a submission are known by in messages.
const SUBMITTED_PLAN: &str = "plan.json";
/// The prefix of the state keys of settled calls' closure records.
const CLOSURE_PREFIX: &str = "closure/";
/// The state key of the closure record of call `call` of `task`.
fn closure_key(task: &TaskId, call: u32) -> String {
    format!("{CLOSURE_PREFIX}{task}/{call}")
}

/// A plan submitted to a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// The plan file's text.
    pub plan: String,
    /// The plan's files by path and digest, as `ShellPlan::read` collected them beside the
    /// plan file: bound into the plan digest. `None` only in a submission an earlier adapter
    /// made (it sent the submitter's directory instead), which the channel refuses.
    #[serde(default)]
    pub plan_files: Option<PlanFilesManifest>,
    /// The bytes of every plan file, base64, sent with `submit` only: the channel checks
    /// them against the manifest, keeps them under their digest and drops them from the
    /// submission it keeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_bytes: Vec<PlanFileBytes>,
    /// How many calls may be in flight at once.
    pub jobs: usize,
    /// Agents whose interrupted calls must not be replayed (`pending_turn_replay: block`).
    pub block: Vec<AgentId>,
    /// After how many commits a pass hands over to a new invocation of the channel
    /// ([`DEFAULT_CONTINUE_EVERY`] when absent). Left out when absent, so an earlier
    /// adapter's submission keeps its JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_every: Option<u32>,
    /// Make every call: consult no cache and keep nothing in it. Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_cache: bool,
    /// How many of one reservation's calls go to a worker in one invocation
    /// ([`DEFAULT_CALLS_PER_INVOCATION`] when absent). Each invocation costs the server about
    /// as much as the no-op call it carries, so grouping lowers the server's CPU per call; the
    /// group's replies come back together, when its slowest call ends. Left out when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_invocation: Option<u32>,
}

/// How many calls go in one worker invocation by default.
pub const DEFAULT_CALLS_PER_INVOCATION: u32 = 1;

/// After how many commits a pass hands over to a new invocation by default. A pass is one
/// Restate invocation, whose journal holds every commit and every call's result until it
/// ends, inside the server's per-invocation memory (32 MiB by default) and at a server CPU
/// cost per entry that grows with the journal: handing over bounds both, whatever the size
/// of the plan.
pub const DEFAULT_CONTINUE_EVERY: u32 = 1024;

/// The bytes of one plan file as a submission carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanFileBytes {
    /// Their digest (blake3), as the manifest names it.
    pub digest: Digest,
    /// The bytes, standard base64.
    pub base64: String,
}

impl Submission {
    /// The submission of `plan`, read with [`ShellPlan::read`] (so it holds its files'
    /// bytes): its text, its files' manifest and each distinct file's bytes once.
    pub fn of(plan: &ShellPlan, jobs: usize, block: Vec<AgentId>) -> Self {
        let mut file_bytes = Vec::new();
        let mut seen = BTreeSet::new();
        for (path, digest) in plan.files().into_iter().flat_map(PlanFiles::iter) {
            if let Some(bytes) = plan.files().and_then(|f| f.bytes(path))
                && seen.insert(*digest)
            {
                file_bytes.push(PlanFileBytes {
                    digest: *digest,
                    base64: base64::engine::general_purpose::STANDARD.encode(bytes),
                });
            }
        }
        Self {
            plan: plan.text().to_owned(),
            plan_files: plan.files().map(PlanFiles::manifest),
            file_bytes,
            jobs,
            block,
            continue_every: None,
            calls_per_invocation: None,
            no_cache: false,
        }
    }

    /// The plan this submission runs, rebuilt from its text and manifest.
    ///
    /// # Errors
    ///
    /// [`ChannelError`] when the submission names no plan files (an earlier adapter's) or
    /// the plan does not load.
    pub fn shell_plan(&self, channel: &str) -> Result<ShellPlan, ChannelError> {
        shell_plan(channel, &self.plan, self.plan_files.as_ref())
    }
}

/// The plan of a submission or call on `channel`, rebuilt from the plan file's `text` and its
/// files' `manifest`.
fn shell_plan(
    channel: &str,
    text: &str,
    manifest: Option<&PlanFilesManifest>,
) -> Result<ShellPlan, ChannelError> {
    let manifest = manifest.ok_or_else(|| ChannelError::NoPlanFiles {
        channel: channel.to_owned(),
    })?;
    ShellPlan::from_text(
        Path::new(SUBMITTED_PLAN),
        text,
        Some(PlanFiles::from_manifest(manifest.clone())),
    )
    .map_err(|source| ChannelError::Plan {
        channel: channel.to_owned(),
        source: Box::new(source),
    })
}

/// What a pass on a channel ended with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The channel's status at the end of the pass.
    pub status: ChannelStatus,
    /// Whether the pass continued evidence already on the channel.
    pub resumed: bool,
    /// Whether the pass handed over to a new invocation that goes on with it (see
    /// [`DEFAULT_CONTINUE_EVERY`]): the status is the channel's at the handover.
    /// [`Restate::submit`](crate::client::Restate::submit) and `resume` follow it to the
    /// end. Left out when false, so a report keeps its JSON.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continued: bool,
    /// The cache entries the pass found and refused (damaged, another task's or another
    /// key's), each naming the key and why: each was a miss. Left out when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache_warnings: Vec<String>,
}

/// Why a channel handler refused or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// A value the channel keeps in the content store could not be kept or read.
    #[error("batch on channel {channel}: the content store")]
    Store {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// A submission found evidence on the channel.
    #[error("batch on channel {channel}: the channel already has evidence; resume it")]
    EvidenceExists {
        /// The channel.
        channel: String,
    },
    /// A resume found no evidence on the channel.
    #[error("batch on channel {channel}: the channel has no evidence; submit a plan to it")]
    NoEvidence {
        /// The channel.
        channel: String,
    },
    /// The channel's key is not a channel id.
    #[error("use the object key \"{key}\" as a channel id")]
    BadChannel {
        /// The object key.
        key: String,
        /// Why.
        #[source]
        source: kleene::id::IdError,
    },
    /// The plan was refused.
    #[error("load the plan submitted to channel {channel}")]
    Plan {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: Box<LoadError>,
    },
    /// The submission names no plan files: an earlier adapter made it, naming the
    /// submitter's directory, which a worker elsewhere cannot read.
    #[error(
        "run the plan submitted to channel {channel}: the submission carries no plan files (an \
         earlier kleene-restate made it, naming the submitter's directory); submit the plan \
         again with this one, to a new channel"
    )]
    NoPlanFiles {
        /// The channel.
        channel: String,
    },
    /// A plan file's bytes were missing from the submission, not base64, or not the ones
    /// its manifest names.
    #[error("keep the plan files submitted to channel {channel}")]
    PlanFiles {
        /// The channel.
        channel: String,
        /// What was wrong, naming the file.
        #[source]
        source: PlanFilesError,
    },
    /// The batch machine refused or stopped.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The evidence in the object's state did not decode or encode.
    #[error("checkpoint the evidence of channel {channel}")]
    Checkpoint {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: kleene::checkpoint::CheckpointError,
    },
    /// The channel already keeps another closure record for a call than the one settling
    /// it now: one call has one record, and the kept one is never replaced.
    #[error(
        "keep the closure record of task {task} call {call} on channel {channel}: the \
         channel already keeps another record for that call"
    )]
    ClosureConflict {
        /// The channel.
        channel: String,
        /// The call's task.
        task: TaskId,
        /// The call's number.
        call: u32,
    },
    /// A call named its plan by digest and the channel's submission could not be read.
    #[error("read the plan of channel {channel}")]
    Fetch {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: crate::client::ClientError,
    },
    /// A call named its plan by digest and the channel keeps no submission.
    #[error("read the plan of channel {channel}: the channel keeps no submission")]
    NoSubmission {
        /// The channel.
        channel: String,
    },
    /// A call named its plan by digest and the channel's submission is another plan.
    #[error(
        "read the plan of channel {channel}: the call names plan {named}, the channel's \
         submission is plan {kept}"
    )]
    OtherPlan {
        /// The channel.
        channel: String,
        /// The plan digest the call named.
        named: Digest,
        /// The digest of the plan the channel keeps.
        kept: Digest,
    },
    /// The commits kept after the evidence's checkpoint do not follow it.
    #[error("fold the commits kept after the checkpoint of channel {channel}")]
    Tail {
        /// The channel.
        channel: String,
        /// Why.
        #[source]
        source: kleene::batch::evidence::FoldError,
    },
    /// A replayed commit differs from the one the machine made (nondeterminism).
    #[error(
        "replay the commit of channel {channel}: the journal recorded other events than the \
         machine makes now; the plan or kleene changed under a running invocation"
    )]
    ReplayDiverged {
        /// The channel.
        channel: String,
    },
}

fn terminal(e: &(dyn std::error::Error + 'static)) -> HandlerError {
    TerminalError::new(format!("failed to {}", Chain(e))).into()
}

/// The channel: one virtual object per channel id.
#[derive(Debug, Default)]
pub struct Channel {
    /// Where evidence, commits and outputs larger than a message go, if anywhere.
    store: Option<ContentStore>,
}

impl Channel {
    /// The channel object, keeping values larger than
    /// [`INLINE_LIMIT`](crate::store::INLINE_LIMIT) in `store` when one is given.
    pub fn new(store: Option<ContentStore>) -> Self {
        Self { store }
    }
}

#[restate_sdk::object]
impl Channel {
    /// Runs a plan on a channel without evidence.
    #[handler]
    async fn submit(
        &self,
        ctx: ObjectContext<'_>,
        submission: Json<Submission>,
    ) -> Result<Json<RunReport>, HandlerError> {
        let Json(mut submission) = submission;
        let key = ctx.key().to_owned();
        if ctx.get::<Vec<u8>>(EVIDENCE).await?.is_some() {
            return Err(terminal(&ChannelError::EvidenceExists { channel: key }));
        }
        let sent = std::mem::take(&mut submission.file_bytes);
        // Checked before anything is kept: a worker must find every file the plan binds.
        let files = plan_files(&key, &submission, sent).map_err(|e| terminal(&e))?;
        for (digest, bytes) in files {
            ctx.set(&plan_file_key(digest), bytes);
        }
        ctx.set(SUBMISSION, Json(submission.clone()));
        ctx.clear(STOPPED);
        drive(&ctx, &submission, None, self.store.as_ref()).await
    }

    /// Continues the channel's batch from its evidence (kleene's resume rules).
    #[handler]
    async fn resume(&self, ctx: ObjectContext<'_>) -> Result<Json<RunReport>, HandlerError> {
        let key = ctx.key().to_owned();
        let submission = ctx.get::<Json<Submission>>(SUBMISSION).await?;
        let evidence = read_evidence!(ctx, key, self.store.as_ref());
        let (Some(Json(submission)), Some(evidence)) = (submission, evidence) else {
            return Err(terminal(&ChannelError::NoEvidence { channel: key }));
        };
        ctx.clear(STOPPED);
        drive(&ctx, &submission, Some(evidence), self.store.as_ref()).await
    }

    /// Accepted outputs of the channel's batch by digest, in the order asked (what a
    /// worker's stage starts from); `None` for a digest the channel accepted nothing with.
    #[handler]
    async fn outputs(
        &self,
        ctx: SharedObjectContext<'_>,
        digests: Json<Vec<Digest>>,
    ) -> Result<Json<Vec<Option<Carried<Files>>>>, HandlerError> {
        // As kept: a large output stays in the content store, where the worker reads it.
        let mut found = Vec::with_capacity(digests.0.len().min(4096));
        for digest in digests.0 {
            found.push(
                ctx.get::<Json<Carried<Files>>>(&output_key(digest))
                    .await?
                    .map(|j| j.0),
            );
        }
        Ok(Json(found))
    }

    /// The bytes of the plan files with `digests`, base64, in the order asked; `None` for a
    /// digest the channel keeps no file under. Served while a pass runs: what a worker
    /// copies a plan's files from.
    #[handler]
    async fn plan_files(
        &self,
        ctx: SharedObjectContext<'_>,
        digests: Json<Vec<Digest>>,
    ) -> Result<Json<Vec<Option<String>>>, HandlerError> {
        let mut found = Vec::with_capacity(digests.0.len().min(4096));
        for digest in digests.0 {
            let bytes = ctx.get::<Vec<u8>>(&plan_file_key(digest)).await?;
            found.push(bytes.map(|b| base64::engine::general_purpose::STANDARD.encode(b)));
        }
        Ok(Json(found))
    }

    /// The submission the channel runs (without the files' bytes), `None` before one: the
    /// plan acceptance binds.
    #[handler]
    async fn submission(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Option<Submission>>, HandlerError> {
        Ok(Json(
            ctx.get::<Json<Submission>>(SUBMISSION).await?.map(|j| j.0),
        ))
    }

    /// The channel's evidence as kleene's versioned checkpoint, `None` before a submission:
    /// what acceptance and export are built from.
    #[handler]
    async fn evidence(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Option<Vec<u8>>, HandlerError> {
        let key = ctx.key().to_owned();
        let Some(evidence) = read_evidence!(ctx, key, self.store.as_ref()) else {
            return Ok(None);
        };
        let bytes = kleene::checkpoint::encode(&evidence).map_err(|source| {
            terminal(&ChannelError::Checkpoint {
                channel: key.clone(),
                source,
            })
        })?;
        // Past a message's size, through the store: the client reads it there.
        let bytes = carry_bytes(bytes, self.store.as_ref()).map_err(store_failure(&key))?;
        Ok(Some(bytes))
    }

    /// The closure record of every call the channel settled with a closure, by task and
    /// call (in no particular order): what acceptance checks the audit trails the evidence
    /// binds against. Served while a pass runs.
    #[handler]
    async fn closures(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Vec<StoredClosure>>, HandlerError> {
        let mut found = Vec::new();
        for key in ctx.get_keys().await? {
            if !key.starts_with(CLOSURE_PREFIX) {
                continue;
            }
            if let Some(Json(stored)) = ctx.get::<Json<StoredClosure>>(&key).await? {
                found.push(stored);
            }
        }
        Ok(Json(found))
    }

    /// The channel's status, readable while a pass runs.
    #[handler]
    async fn status(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<ChannelStatus>, HandlerError> {
        let key = ctx.key().to_owned();
        let stopped = ctx.get::<String>(STOPPED).await?;
        let Some(evidence) = read_evidence!(ctx, key, self.store.as_ref()) else {
            return Ok(Json(ChannelStatus::empty(&key)));
        };
        Ok(Json(ChannelStatus::of(&evidence, stopped)))
    }
}

/// Where the channel's evidence is kept: a checkpoint of the whole, and the commits made
/// after it, each under its own key.
struct EvidenceStore {
    /// Where checkpoints and commits larger than a message go.
    store: Option<ContentStore>,
    /// Whether a checkpoint is in the state (a submission writes its first one).
    checkpointed: bool,
    /// The keys of the commits appended after the checkpoint, in order.
    tail: Vec<String>,
}

impl EvidenceStore {
    /// The store as the channel's state holds it when a pass starts.
    async fn open(
        ctx: &ObjectContext<'_>,
        store: Option<&ContentStore>,
    ) -> Result<Self, HandlerError> {
        let checkpointed = ctx.get::<Vec<u8>>(EVIDENCE).await?.is_some();
        let tail = tail_keys(ctx.get_keys().await?);
        Ok(Self {
            store: store.cloned(),
            checkpointed,
            tail,
        })
    }

    /// Keeps `events`, the commit that brought `machine`'s evidence to what it is: appended
    /// after the checkpoint, or the whole evidence checkpointed when there is none yet or
    /// [`TAIL_LIMIT`] commits are appended. A state write is itself journaled in order, so it
    /// is durable before any call made after it. The `count` events come as the commit's
    /// journal entry carried them: a commit kept in the content store is named again, not
    /// written twice.
    fn append(
        &mut self,
        ctx: &ObjectContext<'_>,
        machine: &BatchMachine<'_>,
        count: usize,
        events: Carried<Vec<EvidenceEvent>>,
    ) -> Result<(), HandlerError> {
        if !self.checkpointed || self.tail.len() >= TAIL_LIMIT {
            return self.checkpoint(ctx, machine);
        }
        let before = machine
            .evidence()
            .event_count()
            .saturating_sub(count as u64);
        let key = tail_key(before);
        ctx.set(&key, Json(events));
        self.tail.push(key);
        Ok(())
    }

    /// Writes the whole evidence as the checkpoint and drops the commits appended after the
    /// old one: what `status`, `resume` and acceptance read, long after Restate dropped the
    /// invocation's journal.
    fn checkpoint(
        &mut self,
        ctx: &ObjectContext<'_>,
        machine: &BatchMachine<'_>,
    ) -> Result<(), HandlerError> {
        let snapshot = kleene::checkpoint::encode(machine.evidence()).map_err(|source| {
            terminal(&ChannelError::Checkpoint {
                channel: machine.evidence().channel().to_string(),
                source,
            })
        })?;
        let stored = store_failure(machine.evidence().channel().as_str());
        let snapshot = carry_bytes(snapshot, self.store.as_ref()).map_err(stored)?;
        ctx.set(EVIDENCE, snapshot);
        for key in self.tail.drain(..) {
            ctx.clear(&key);
        }
        self.checkpointed = true;
        Ok(())
    }
}

/// Journals the events made since the last commit as one journal entry (`ctx.run` named
/// `commit`), then keeps them in the channel's state.
async fn commit(
    ctx: &ObjectContext<'_>,
    store: &mut EvidenceStore,
    machine: &BatchMachine<'_>,
    pending: &mut Vec<EvidenceEvent>,
) -> Result<(), HandlerError> {
    if pending.is_empty() {
        return Ok(());
    }
    let made = std::mem::take(pending);
    let count = made.len();
    // Journaled as it travels: a commit that settles a large output is kept in the store,
    // written before the journal entry that names it.
    let stored = store_failure(machine.evidence().channel().as_str());
    let mine = Carried::of(made, store.store.as_ref()).map_err(&stored)?;
    let journaled = mine.clone();
    let Json(carried) = ctx
        .run(|| async move { Ok(Json(journaled)) })
        .name("commit")
        .await?;
    // A replay reads back what the first attempt journaled, which must be what this one
    // made: the same events, or the same stored bytes (a stored commit is named by its hash).
    if carried != mine {
        let channel = machine.evidence().channel().to_string();
        return Err(terminal(&ChannelError::ReplayDiverged { channel }));
    }
    store.append(ctx, machine, count, carried)
}

/// How many calls must be free before the channel reserves again while others are in
/// flight: half of `jobs` (at least one). A pass then makes about half as many commits as
/// calls while at least half of its slots stay busy; with `-j 8`, 100 no-op tasks ran
/// fastest refilling four at a time (two and eight were slower). It depends on `jobs` alone,
/// which the submission fixes, so every attempt of the invocation groups the same way.
fn refill_group(jobs: usize) -> usize {
    jobs.div_ceil(2).max(1)
}

/// Runs one pass of the channel's batch machine until it settles or stops.
async fn drive(
    ctx: &ObjectContext<'_>,
    submission: &Submission,
    evidence: Option<BatchEvidence>,
    content: Option<&ContentStore>,
) -> Result<Json<RunReport>, HandlerError> {
    let key = ctx.key().to_owned();
    let stored = store_failure(&key);
    let channel = ChannelId::new(key.clone()).map_err(|source| {
        terminal(&ChannelError::BadChannel {
            key: key.clone(),
            source,
        })
    })?;
    let shell = submission.shell_plan(&key).map_err(|e| terminal(&e))?;
    let resumed = evidence.is_some();
    // As every driver of shell plans builds it, so the evidence is `kleene run`'s.
    let mut batch = shell.batch(channel.clone());
    for agent in &submission.block {
        batch = batch.with_pending_turn_replay(agent.clone(), PendingTurnReplay::Block);
    }
    // The results admitted from the `ActionCache` objects, which the machine looks up, and
    // those it stores on acceptance, which go to them.
    let cache = Arc::new(ChannelCache::default());
    if !submission.no_cache {
        let keys = shell.clone();
        batch = batch
            .with_cache(Arc::clone(&cache) as Arc<dyn kleene::batch::cache::ActionCache>)
            .with_action_keys(move |task| keys.action_key_parts(&task.id));
    }
    let mut fetched: BTreeSet<ActionKey> = BTreeSet::new();
    let mut cache_warnings: Vec<String> = Vec::new();
    let jobs = submission.jobs.max(1);
    let (mut machine, mut pending) = match batch.machine(evidence) {
        Ok(m) => m,
        Err(e) => return finish(ctx, None, Some(e), resumed, &key, content).await,
    };
    let mut store = EvidenceStore::open(ctx, content).await?;

    let group = refill_group(jobs);
    let continue_every = submission
        .continue_every
        .unwrap_or(DEFAULT_CONTINUE_EVERY)
        .max(1) as usize;
    let per_invocation = submission
        .calls_per_invocation
        .unwrap_or(DEFAULT_CALLS_PER_INVOCATION)
        .max(1) as usize;
    let mut commits = 0usize;
    let mut calls = DurableFuturesUnordered::new();
    // Each worker invocation in flight, with the dispatches it carries in order.
    let mut out: BTreeMap<usize, Vec<Dispatch>> = BTreeMap::new();
    let mut in_flight = 0usize;
    let mut stop: Option<BatchError> = None;
    let mut interrupted = false;
    loop {
        // Reserve only once `group` calls are free (or none is in flight): every commit is a
        // round trip to the server and journal entries of this one invocation, so refilling
        // after each settlement made the channel's single writer the limit of the whole run
        // (one commit and one evidence checkpoint per task). The count decides, never which
        // replies happen to have arrived, so a replay makes the same commits.
        let free = jobs.saturating_sub(in_flight);
        // Past `continue_every` commits the pass reserves nothing more: its calls settle and
        // a new invocation goes on from the evidence.
        let handing_over = commits >= continue_every;
        if stop.is_none() && !interrupted && !handing_over && (in_flight == 0 || free >= group) {
            // The results the newly ready tasks' keys name, fetched before the machine
            // (which never waits) looks them up: round after round, as reuses make more
            // ready. A key fetched before (by a machine rebuilt since) is admitted already.
            loop {
                let taken = machine.take_ready_action_keys();
                if taken.is_empty() {
                    break;
                }
                let mut gets = DurableFuturesUnordered::new();
                let mut asked = BTreeMap::new();
                for (task, key) in taken.into_iter().filter(|(_, k)| fetched.insert(*k)) {
                    let get = ctx
                        .object_client::<ActionCacheObjectClient>(key.to_string())
                        .get()
                        .call();
                    asked.insert(gets.push(get), (task, key));
                }
                while let Some((index, answer)) = gets.next().await? {
                    let (Some((task, key)), Ok(Json(Some(entry)))) = (asked.remove(&index), answer)
                    else {
                        continue;
                    };
                    let admitted = entry
                        .into_value(content)
                        .map_err(|e| Chain(&e).to_string())
                        .and_then(|entry| {
                            cache
                                .admit(&task, key, entry)
                                .map_err(|e| Chain(&e).to_string())
                        });
                    if let Err(e) = admitted {
                        cache_warnings.push(format!("task {task}: {e}"));
                    }
                }
                let reused = machine.reserve_reused().map_err(|e| terminal(&e))?;
                keep_reused_outputs(ctx, &reused, content).map_err(&stored)?;
                pending.extend(reused);
                for (task, record) in machine.take_reused_closures() {
                    keep_reused_closure(ctx, &machine, task, &record);
                }
            }
            let work = machine.reserve(jobs).map_err(|e| terminal(&e))?;
            keep_reused_outputs(ctx, &work.events, content).map_err(&stored)?;
            // Group commit: the settlements since the last commit go in one journal entry
            // with this reservation, before any of its calls is made.
            pending.extend(work.events);
            if !work.dispatches.is_empty() {
                commit(ctx, &mut store, &machine, &mut pending).await?;
                commits += 1;
            }
            let mut dispatches = work.dispatches.into_iter().peekable();
            while dispatches.peek().is_some() {
                let group: Vec<Dispatch> = dispatches.by_ref().take(per_invocation).collect();
                let batch: Vec<TaskCall> = group
                    .iter()
                    .map(|d| task_call(&shell, &machine, &channel, d.clone()))
                    .collect();
                let future = ctx
                    .service_client::<TaskWorkerClient>()
                    .calls(Json(batch))
                    .call();
                in_flight += group.len();
                out.insert(calls.push(future), group);
            }
        }
        let Some((index, replies)) = calls.next().await? else {
            break;
        };
        let Some(group) = out.remove(&index) else {
            continue;
        };
        in_flight -= group.len();
        let failed = |detail: String| {
            let reply = TaskReply::Failed(InfrastructureFailure::Transport { detail });
            vec![reply; group.len()]
        };
        let replies: Vec<TaskReply> = match replies {
            Ok(Json(replies)) if replies.len() == group.len() => replies
                .into_iter()
                .map(|carried| {
                    carried.into_value(content).unwrap_or_else(|e| {
                        TaskReply::Failed(InfrastructureFailure::Transport {
                            detail: format!("failed to read the call's reply: {}", Chain(&e)),
                        })
                    })
                })
                .collect(),
            Ok(Json(replies)) => failed(format!(
                "the worker answered {} replies for {} calls",
                replies.len(),
                group.len()
            )),
            Err(e) => failed(format!("task-worker call failed: {}", e.message())),
        };
        for (dispatch, mut reply) in group.into_iter().zip(replies) {
            let record = reply.take_record();
            // The fix attempts the call drew, each durable in the ledger before its fix ran,
            // go into the evidence before the call's settlement, as a local run journals them.
            let drawn: Vec<TaskId> = match &reply {
                TaskReply::Interrupted { .. } => {
                    // Sealed, so that an abandoned execution still drawing is refused from now on,
                    // and what it drew before is all in the evidence: ledger and evidence agree.
                    let call = (dispatch.task().clone(), dispatch.attempt());
                    ctx.object_client::<FixLedgerClient>(key.clone())
                        .seal(Json(call))
                        .call()
                        .await?
                        .0
                }
                other => other.drawn().to_vec(),
            };
            for fix in &drawn {
                let event = machine.draw_fix(&dispatch, fix).map_err(|e| terminal(&e))?;
                pending.push(event);
            }
            match reply.into_result() {
                // Left in flight: once the other calls settle, the machine is rebuilt from the
                // evidence and kleene's resume rules judge it.
                None => interrupted = true,
                Some(result) => {
                    let (result, record) = match checked_record(result, record) {
                        Ok(checked) => checked,
                        Err(detail) => (
                            Err(WorkerFailure::Infrastructure(
                                InfrastructureFailure::Transport { detail },
                            )),
                            None,
                        ),
                    };
                    let settled = machine
                        .settle(&dispatch, result, &())
                        .map_err(|e| terminal(&e))?;
                    // What the batch kept on acceptance goes to the cache objects (one-way: the
                    // pass never waits on them).
                    for (key, entry) in cache.take_stored() {
                        let entry = Carried::of(entry, content).map_err(&stored)?;
                        ctx.object_client::<ActionCacheObjectClient>(key.to_string())
                            .put(Json(entry))
                            .send();
                    }
                    // Kept before the checkpoint below, so the evidence in state never binds a
                    // record the channel does not hold; only when the call settled its closure
                    // (a withdrawn call's number is made again, with its own record).
                    let task = dispatch.task();
                    let call = dispatch.attempt();
                    let settles = machine
                        .evidence()
                        .closures_of(task)
                        .any(|c| c.attempt() == call && c.settled().is_some());
                    if let Some(text) = record.filter(|_| settles) {
                        keep_closure(ctx, &key, task, call, text).await?;
                    }
                    for event in &settled.events {
                        if let EvidenceEvent::Settled {
                            settlement: Settlement::Accepted { digest, candidate },
                            ..
                        } = event
                        {
                            // In the channel's own state: no round trip, and visible to the
                            // `outputs` handler before any call that names the digest is made.
                            let files =
                                Carried::of(Files::of(candidate), content).map_err(&stored)?;
                            ctx.set(&output_key(*digest), Json(files));
                        }
                    }
                    // Checkpointed with the next commit (group commit), not here: the evidence
                    // is the whole batch's, so writing it after every settlement cost the server
                    // O(tasks) bytes per task. The journal holds the call's result meanwhile, so a
                    // retried invocation settles it again; only `status` lags by a group.
                    pending.extend(settled.events);
                    if let Some(e) = settled.stop {
                        stop.get_or_insert(e);
                    }
                }
            }
        }
        if interrupted && in_flight == 0 && stop.is_none() {
            interrupted = false;
            commit(ctx, &mut store, &machine, &mut pending).await?;
            let evidence = machine.into_evidence();
            match batch.machine(Some(evidence)) {
                Ok((m, events)) => {
                    machine = m;
                    pending.extend(events);
                }
                Err(e) => {
                    // The interruptions are not recorded: the evidence still holds the call
                    // in flight, so a resume refuses it the same way.
                    return finish(ctx, None, Some(e), resumed, &key, content).await;
                }
            }
        }
    }
    commit(ctx, &mut store, &machine, &mut pending).await?;
    // At rest, the state is one checkpoint: readers fold nothing onto it.
    if !store.tail.is_empty() {
        store.checkpoint(ctx, &machine)?;
    }
    let mut report = finish(ctx, Some(machine.evidence()), stop, resumed, &key, content).await?;
    report.0.cache_warnings = cache_warnings;
    if commits >= continue_every && report.0.status.stopped.is_none() {
        // Queued behind this invocation on the exclusive channel: it starts once this one
        // ends, from the evidence just kept, with nobody waiting on it.
        ctx.object_client::<ChannelClient>(key.clone())
            .resume()
            .send();
        report.0.continued = true;
    }
    Ok(report)
}

/// The settlement `result` and the record that goes with it, after checking that `record`
/// (the worker's, as `to_json` wrote it) reads back whole and is the very record the
/// proposal's closure binds. `Err` says why not: the reply is then not settled as a proposal,
/// so the evidence never binds a record the channel cannot keep. A proposal with a closure
/// and no record (an earlier adapter's worker) settles without one; acceptance then names the
/// call's record as missing.
fn checked_record(
    result: Result<Proposal, WorkerFailure>,
    record: Option<String>,
) -> Result<(Result<Proposal, WorkerFailure>, Option<String>), String> {
    let Some(closure) = result.as_ref().ok().and_then(Proposal::closure) else {
        return Ok((result, None));
    };
    let Some(text) = record else {
        return Ok((result, None));
    };
    match ClosureRecord::from_json(&text) {
        Ok(r) if r.digest() == closure.record_digest => Ok((result, Some(text))),
        Ok(r) => Err(format!(
            "the worker's closure record digests to {}, its settlement binds {}",
            r.digest(),
            closure.record_digest
        )),
        Err(e) => Err(format!(
            "the worker's closure record does not read back: {}",
            Chain(&e)
        )),
    }
}

/// Keeps each output `events` reuse under its digest, as an accepted one is kept: what the
/// dependents' calls fetch their inputs from.
fn keep_reused_outputs(
    ctx: &ObjectContext<'_>,
    events: &[EvidenceEvent],
    store: Option<&ContentStore>,
) -> Result<(), StoreError> {
    for event in events {
        if let EvidenceEvent::Reused {
            digest, candidate, ..
        } = event
        {
            ctx.set(
                &output_key(*digest),
                Json(Carried::of(Files::of(candidate), store)?),
            );
        }
    }
    Ok(())
}

/// Keeps the closure record of the call whose output `task` reused, as the cache entry held
/// it, under `closure/{task}/reused`: acceptance checks it against the reuse the evidence
/// binds (task, that call's number, its record's digest and audit head).
fn keep_reused_closure(
    ctx: &ObjectContext<'_>,
    machine: &BatchMachine<'_>,
    task: TaskId,
    record: &str,
) {
    let Some(call) = machine.evidence().reused_from(&task).map(|from| from.call) else {
        return;
    };
    let key = format!("{CLOSURE_PREFIX}{task}/reused");
    ctx.set(
        &key,
        Json(StoredClosure {
            task,
            call,
            record: record.to_owned(),
        }),
    );
}

/// Keeps the closure record `text` of call `call` of `task` in the channel's state. A call
/// has one record: one already kept for it must be the same (a replay of this settlement
/// writes it again), and a different one stops the pass rather than replace it.
async fn keep_closure(
    ctx: &ObjectContext<'_>,
    channel: &str,
    task: &TaskId,
    call: u32,
    text: String,
) -> Result<(), HandlerError> {
    let key = closure_key(task, call);
    let stored = StoredClosure {
        task: task.clone(),
        call,
        record: text,
    };
    match ctx.get::<Json<StoredClosure>>(&key).await? {
        Some(Json(kept)) if kept == stored => Ok(()),
        Some(_) => Err(terminal(&ChannelError::ClosureConflict {
            channel: channel.to_owned(),
            task: task.clone(),
            call,
        })),
        None => {
            ctx.set(&key, Json(stored));
            Ok(())
        }
    }
}

/// Ends a pass: records why it stopped, if it did, and reports the channel's status (from
/// `evidence`, or from the state when the machine could not be built).
async fn finish(
    ctx: &ObjectContext<'_>,
    evidence: Option<&BatchEvidence>,
    stop: Option<BatchError>,
    resumed: bool,
    key: &str,
    store: Option<&ContentStore>,
) -> Result<Json<RunReport>, HandlerError> {
    let why = stop.map(|e| format!("failed to {}", Chain(&ChannelError::Batch(e))));
    if let Some(w) = &why {
        ctx.set(STOPPED, w.clone());
    }
    let status = match evidence {
        Some(e) => ChannelStatus::of(e, why),
        None => match read_evidence!(ctx, key, store) {
            Some(e) => ChannelStatus::of(&e, why),
            None => ChannelStatus {
                stopped: why,
                ..ChannelStatus::empty(key)
            },
        },
    };
    Ok(Json(RunReport {
        status,
        resumed,
        continued: false,
        cache_warnings: Vec::new(),
    }))
}

/// The plan files `sent` with `submission`, each checked against the manifest: the bytes of
/// every file it names, by digest.
fn plan_files(
    channel: &str,
    submission: &Submission,
    sent: Vec<PlanFileBytes>,
) -> Result<BTreeMap<Digest, Vec<u8>>, ChannelError> {
    let manifest = submission
        .plan_files
        .clone()
        .ok_or_else(|| ChannelError::NoPlanFiles {
            channel: channel.to_owned(),
        })?;
    let err = |source| ChannelError::PlanFiles {
        channel: channel.to_owned(),
        source,
    };
    let mut by_digest = BTreeMap::new();
    for file in sent {
        by_digest.insert(file.digest, file.base64);
    }
    let mut files = PlanFiles::from_manifest(manifest.clone());
    let mut kept = BTreeMap::new();
    for (path, digest) in &manifest.0 {
        let bytes = match by_digest.get(digest) {
            Some(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| {
                    err(PlanFilesError::Refused {
                        path: path.to_string(),
                        why: format!("its bytes were not sent as base64: {e}"),
                    })
                })?,
            None => {
                return Err(err(PlanFilesError::Missing {
                    path: path.clone(),
                    digest: *digest,
                }));
            }
        };
        files.add_bytes(path, bytes.clone()).map_err(err)?;
        kept.insert(*digest, bytes);
    }
    Ok(kept)
}

/// Every task `task` depends on, directly or not, in the plan's topological order: the tasks
/// whose accepted outputs its stage starts from.
fn transitive_prerequisites(plan: &ValidatedPlan, task: &TaskId) -> Vec<TaskId> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&TaskId> = plan.prerequisites(task);
    while let Some(t) = stack.pop() {
        if seen.insert(t) {
            stack.extend(plan.prerequisites(t));
        }
    }
    plan.topological_order()
        .iter()
        .filter(|t| seen.contains(t))
        .cloned()
        .collect()
}

/// The task-worker call for `dispatch`: the plan by text and file digests, and the accepted
/// outputs of the task's transitive prerequisites by digest.
fn task_call(
    shell: &ShellPlan,
    machine: &BatchMachine<'_>,
    channel: &ChannelId,
    dispatch: Dispatch,
) -> TaskCall {
    let inputs = transitive_prerequisites(shell.plan(), dispatch.task())
        .into_iter()
        .filter_map(|p| {
            let d = machine.evidence().accepted(&p)?.digest();
            Some((p, d))
        })
        .collect();
    TaskCall {
        channel: channel.clone(),
        dispatch,
        // By digest: the worker reads the text once from the submission the channel keeps.
        plan: String::new(),
        plan_digest: Some(shell.plan().digest()),
        plan_files: shell.files().map(PlanFiles::manifest),
        inputs,
    }
}

/// The state key of a channel's fix ledger: every draw granted, in order.
const DRAWN: &str = "drawn";
/// The state key of the calls a channel sealed: their turn ended, no draw is granted for them.
const SEALED: &str = "sealed";

/// The run-wide fix budget of one channel: a virtual object keyed by the channel id, apart
/// from the channel object because that one is locked by its pass while calls run. Each
/// draw is granted only while fewer than the budget were granted on the channel, and it is
/// in the object's state before the grant is answered, so a fix never runs on a draw that
/// could be lost and no sequence of crashes hands out more than the budget.
///
/// It also fences calls to their turn: a call number's draws must all carry the turn of the
/// execution that drew first, and once the channel seals a call (its invocation came back
/// interrupted) nothing more is granted for it. The seal answers what the call drew, so what
/// the evidence counts is exactly what the ledger granted.
#[derive(Debug, Default)]
pub struct FixLedger;

/// A channel's fix ledger as its state keeps it: the draws granted, in order, and the calls
/// sealed. Its rules are here, apart from Restate, so they can be checked for every order
/// of draws and seals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Ledger {
    granted: Vec<FixDraw>,
    sealed: Vec<(TaskId, u32)>,
}

impl Ledger {
    /// Answers `draw`, keeping it when it is granted for the first time; `true` with the
    /// answer when the ledger changed.
    fn draw(&mut self, draw: FixDraw) -> (DrawAnswer, bool) {
        let call = |d: &FixDraw| d.task == draw.task && d.attempt == draw.attempt;
        if self.is_sealed(&draw.task, draw.attempt) {
            return (DrawAnswer::Sealed, false);
        }
        // A call number is one execution: its draws all carry the first one's turn (a draw
        // without one is an earlier adapter's and is not fenced).
        if self
            .granted
            .iter()
            .any(|d| call(d) && d.turn.is_some() && draw.turn.is_some() && d.turn != draw.turn)
        {
            return (DrawAnswer::OtherTurn, false);
        }
        if self.granted.iter().any(|d| call(d) && d.fix == draw.fix) {
            return (DrawAnswer::Granted, false);
        }
        if self.granted.len() >= usize::try_from(draw.max).unwrap_or(usize::MAX) {
            return (DrawAnswer::Spent, false);
        }
        self.granted.push(draw);
        (DrawAnswer::Granted, true)
    }

    /// Seals call `attempt` of `task` and answers the fix subtasks it drew for, in order;
    /// `true` with them when the ledger changed.
    fn seal(&mut self, task: &TaskId, attempt: u32) -> (Vec<TaskId>, bool) {
        let changed = !self.is_sealed(task, attempt);
        if changed {
            self.sealed.push((task.clone(), attempt));
        }
        (self.drawn(task, attempt), changed)
    }

    fn is_sealed(&self, task: &TaskId, attempt: u32) -> bool {
        self.sealed.iter().any(|(t, a)| t == task && *a == attempt)
    }

    /// The fix subtasks call `attempt` of `task` drew for, in order.
    fn drawn(&self, task: &TaskId, attempt: u32) -> Vec<TaskId> {
        self.granted
            .iter()
            .filter(|d| d.task == *task && d.attempt == attempt)
            .map(|d| d.fix.clone())
            .collect()
    }
}

/// Reads the ledger from the state of the object `$ctx` (a macro: the SDK's read trait does
/// not lend itself to a generic async function that its handlers' futures stay `Send` with).
macro_rules! ledger {
    ($ctx:expr) => {
        Ledger {
            granted: $ctx
                .get::<Json<Vec<FixDraw>>>(DRAWN)
                .await?
                .map(|j| j.0)
                .unwrap_or_default(),
            sealed: $ctx
                .get::<Json<Vec<(TaskId, u32)>>>(SEALED)
                .await?
                .map(|j| j.0)
                .unwrap_or_default(),
        }
    };
}

#[restate_sdk::object]
impl FixLedger {
    /// Grants `draw` unless the channel's budget is spent, the call is sealed or another
    /// execution drew under its number; granting the same draw again answers `Granted` and
    /// counts it once.
    #[handler]
    async fn draw(
        &self,
        ctx: ObjectContext<'_>,
        draw: Json<FixDraw>,
    ) -> Result<Json<DrawAnswer>, HandlerError> {
        let mut kept = ledger!(ctx);
        let (answer, changed) = kept.draw(draw.0);
        if changed {
            ctx.set(DRAWN, Json(kept.granted));
        }
        Ok(Json(answer))
    }

    /// Seals call `attempt` of `task`: its turn ended, so no draw is granted for it from now
    /// on. Answers the fix subtasks it drew for, in order (what the interrupted call used of
    /// the budget). Sealing again answers the same.
    #[handler]
    async fn seal(
        &self,
        ctx: ObjectContext<'_>,
        call: Json<(TaskId, u32)>,
    ) -> Result<Json<Vec<TaskId>>, HandlerError> {
        let Json((task, attempt)) = call;
        let mut kept = ledger!(ctx);
        let (drawn, changed) = kept.seal(&task, attempt);
        if changed {
            ctx.set(SEALED, Json(kept.sealed));
        }
        Ok(Json(drawn))
    }

    /// Every draw the ledger granted on the channel, in order: what the evidence's fix count
    /// must equal.
    #[handler]
    async fn grants(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Vec<FixDraw>>, HandlerError> {
        Ok(Json(ledger!(ctx).granted))
    }

    /// The fix subtasks call `attempt` of `task` drew for, in order.
    #[handler]
    async fn drawn(
        &self,
        ctx: SharedObjectContext<'_>,
        call: Json<(TaskId, u32)>,
    ) -> Result<Json<Vec<TaskId>>, HandlerError> {
        let Json((task, attempt)) = call;
        Ok(Json(ledger!(ctx).drawn(&task, attempt)))
    }
}

/// How many parsed plans a worker process keeps (see `TaskWorker::plans`).
const PLANS_KEPT: usize = 16;

/// The stateless task-worker service: runs calls, at most `jobs` at once per process.
#[derive(Debug)]
pub struct TaskWorker {
    work: Arc<WorkDir>,
    /// Plans this process read by digest from their channels' submissions, parsed: every
    /// call of a plan names the same one, and reading it once spares the server the text
    /// and the worker the parse per call. Holds at most [`PLANS_KEPT`].
    plans: std::sync::Mutex<BTreeMap<Digest, ShellPlan>>,
    slots: Arc<Semaphore>,
    /// The server's ingress: where fix draws go (the channel's fix ledger) and plan files
    /// come from, outside the invocation's journal.
    restate: Restate,
    /// Where replies and inputs larger than a message go, shared with the channel.
    store: Option<ContentStore>,
}

impl TaskWorker {
    /// A worker keeping stages, objects and plan copies under `dir`, running up to `jobs`
    /// calls at once and reaching the server's `ingress` URL for fix draws and plan files.
    /// With a `store`, replies larger than [`INLINE_LIMIT`](crate::store::INLINE_LIMIT) go
    /// through it and a call may write `kleene run`'s 1 GiB; without one, a call writes at
    /// most [`MAX_CALL_OUTPUT_BYTES`](crate::worker::MAX_CALL_OUTPUT_BYTES).
    ///
    /// # Errors
    ///
    /// [`WorkDirError`] when the directories cannot be made.
    pub fn new(
        dir: &Path,
        jobs: usize,
        ingress: &str,
        store: Option<ContentStore>,
    ) -> Result<Self, WorkDirError> {
        let mut work = WorkDir::open(dir)?;
        if store.is_some() {
            work = work.with_max_call_output_bytes(kleene::shell::DEFAULT_MAX_CALL_OUTPUT_BYTES);
        }
        Ok(Self {
            work: Arc::new(work),
            plans: std::sync::Mutex::new(BTreeMap::new()),
            slots: Arc::new(Semaphore::new(jobs.max(1))),
            restate: Restate::new(ingress, ""),
            store,
        })
    }

    /// The worker with its calls' commands run unconfined (see [`WorkDir::without_sandbox`]);
    /// call it on a worker just made.
    #[must_use]
    pub fn without_sandbox(mut self) -> Self {
        // Only a worker that handed its directory to nothing yet can change it.
        if let Some(work) = Arc::get_mut(&mut self.work) {
            work.confine = false;
        }
        self
    }

    /// The plan with `digest` that `call` names: the one this process read before, or the
    /// channel's submission rebuilt with the call's manifest and checked to be that plan.
    async fn plan_by_digest(
        &self,
        call: &TaskCall,
        digest: Digest,
    ) -> Result<ShellPlan, ChannelError> {
        let kept = |plans: &std::sync::Mutex<BTreeMap<Digest, ShellPlan>>| {
            plans
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&digest)
                .cloned()
        };
        if let Some(plan) = kept(&self.plans) {
            return Ok(plan);
        }
        let channel = call.channel.as_str();
        let submission = self
            .restate
            .submission(channel)
            .await
            .map_err(|source| ChannelError::Fetch {
                channel: channel.to_owned(),
                source,
            })?
            .ok_or_else(|| ChannelError::NoSubmission {
                channel: channel.to_owned(),
            })?;
        let plan = shell_plan(channel, &submission.plan, call.plan_files.as_ref())?;
        let found = plan.plan().digest();
        if found != digest {
            return Err(ChannelError::OtherPlan {
                channel: channel.to_owned(),
                named: digest,
                kept: found,
            });
        }
        let mut plans = self
            .plans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A worker serving many plans over its life keeps only a few: reading one again
        // costs one request.
        if plans.len() >= PLANS_KEPT {
            plans.clear();
        }
        plans.insert(digest, plan.clone());
        Ok(plan)
    }

    /// The plan `call` runs and the checked copy of its files, making the copy from the
    /// channel's bytes when this worker has none; `Err` says why the call is refused (the
    /// plan does not load, a file's bytes are missing or not the ones the plan binds).
    async fn plan_copy(&self, call: &TaskCall) -> Result<(ShellPlan, PathBuf), String> {
        let refused = |e: &(dyn std::error::Error + 'static)| {
            format!(
                "failed to run task {} of channel {}: {}",
                call.dispatch.task(),
                call.channel,
                Chain(e)
            )
        };
        let plan = match call.plan_digest {
            Some(digest) => self.plan_by_digest(call, digest).await,
            None => shell_plan(call.channel.as_str(), &call.plan, call.plan_files.as_ref()),
        }
        .map_err(|e| refused(&e))?;
        let work = Arc::clone(&self.work);
        let (plan, found) = tokio::task::spawn_blocking(move || {
            let found = work.plan_copy(&plan);
            (plan, found)
        })
        .await
        .map_err(|e| refused(&e))?;
        if let Some(dir) = found {
            return Ok((plan, dir));
        }
        let digests: Vec<Digest> = plan
            .files()
            .into_iter()
            .flat_map(PlanFiles::iter)
            .map(|(_, d)| *d)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let answers = self
            .restate
            .plan_files(call.channel.as_str(), &digests)
            .await
            .map_err(|e| refused(&e))?;
        let fetched: BTreeMap<Digest, String> = digests
            .into_iter()
            .zip(answers)
            .filter_map(|(d, a)| Some((d, a?)))
            .collect();
        let work = Arc::clone(&self.work);
        tokio::task::spawn_blocking(move || {
            let dir = work.make_plan_copy(&plan, &fetched);
            dir.map(|dir| (plan, dir))
        })
        .await
        .map_err(|e| refused(&e))?
        .map_err(|e| refused(&e))
    }
}

#[restate_sdk::service]
impl TaskWorker {
    /// Makes the task calls the channel sent in one invocation, up to the worker's slots at
    /// once, and answers each one's reply in the order sent.
    #[handler]
    async fn calls(
        &self,
        ctx: Context<'_>,
        calls: Json<Vec<TaskCall>>,
    ) -> Result<Json<Vec<Carried<TaskReply>>>, HandlerError> {
        let Json(calls) = calls;
        // One request for every input of every call (the channel sends its own calls
        // only), then each checked against the digest it was asked by.
        let digests: Vec<Digest> = calls
            .iter()
            .flat_map(|c| c.inputs.iter().map(|(_, d)| *d))
            .collect();
        let fetched = match calls.first() {
            Some(first) if !digests.is_empty() => {
                ctx.object_client::<ChannelClient>(first.channel.to_string())
                    .outputs(Json(digests))
                    .call()
                    .await?
                    .0
            }
            _ => Vec::new(),
        };
        let mut fetched = fetched.into_iter();
        let mut prepared = Vec::with_capacity(calls.len());
        for call in calls {
            let mut inputs: Vec<(TaskId, AcceptedOutput)> = Vec::new();
            let mut unfetched = None;
            for (task, digest) in &call.inputs {
                let verified = fetched
                    .next()
                    .flatten()
                    .ok_or(ContentError::Missing { digest: *digest })
                    .and_then(|files| {
                        files
                            .into_value(self.store.as_ref())
                            .map_err(|e| ContentError::Stored {
                                digest: *digest,
                                detail: Chain(&e).to_string(),
                            })
                    })
                    .and_then(|files| verify(*digest, files));
                match verified {
                    Ok(output) => inputs.push((task.clone(), output)),
                    Err(e) => {
                        unfetched.get_or_insert(format!("failed to {}", Chain(&e)));
                    }
                }
            }
            // The plan's files, outside the journal (idempotent: a copy is made once and
            // checked); a refusal is answered by the work step below, so every attempt
            // journals the same steps in the same order.
            let plan = self.plan_copy(&call).await;
            prepared.push((call, unfetched.map_or(Ok(inputs), Err), plan));
        }
        // The claim: journaled before the work. Its closure runs only in the attempt that
        // first reaches it; a retry replays it.
        let fresh = Arc::new(AtomicBool::new(false));
        let claimed = Arc::clone(&fresh);
        let invocation = ctx.invocation_id().to_owned();
        let nonce: String = ctx
            .run(|| async move {
                claimed.store(true, Ordering::SeqCst);
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                Ok(format!("{invocation}/{}/{nanos}", std::process::id()))
            })
            .name("claim")
            .await?;
        let fresh = fresh.load(Ordering::SeqCst);
        // The calls' turn ends with this attempt: when the server ends it (a retry after a
        // server or node loss, a leadership move, a kill), the SDK drops this future, and the
        // fence stops the commands' process groups instead of leaving them running on
        // blocking threads beside the calls that replace them.
        let fence = EndOfTurn(Interrupt::default());
        let ended = fence.0.clone();
        let work = Arc::clone(&self.work);
        let ledger = self.restate.clone();
        let slots = Arc::clone(&self.slots);
        let store = self.store.clone();
        let Json(replies) = ctx
            .run(|| async move {
                let mut running = Vec::with_capacity(prepared.len());
                for (call, inputs, plan) in prepared {
                    let nonce = nonce.clone();
                    let ended = ended.clone();
                    let work = Arc::clone(&work);
                    let ledger = ledger.clone();
                    let slots = Arc::clone(&slots);
                    running.push(tokio::spawn(async move {
                        if !fresh {
                            // An earlier attempt claimed the call and left no result.
                            return Ok(TaskReply::Interrupted { nonce });
                        }
                        let inputs = match inputs {
                            Ok(inputs) => inputs,
                            Err(detail) => {
                                return Ok(TaskReply::Failed(InfrastructureFailure::Transport {
                                    detail,
                                }));
                            }
                        };
                        let (plan, plan_dir) = match plan {
                            Ok(ready) => ready,
                            Err(detail) => return Ok(TaskReply::Withdrawn { detail }),
                        };
                        let _slot = slots.acquire_owned().await?;
                        let handle = tokio::runtime::Handle::current();
                        tokio::task::spawn_blocking(move || {
                            let turn = CallTurn {
                                claim: &nonce,
                                ended: &ended,
                            };
                            work.run(plan, &plan_dir, &call, &inputs, turn, &mut |draw| {
                                let answer = handle
                                    .block_on(ledger.draw_fix(call.channel.as_str(), draw))
                                    .map_err(|e| format!("failed to {}", Chain(&e)))?;
                                answer.refusal(draw, &call.channel).map_or(Ok(()), Err)
                            })
                        })
                        .await
                        .map_err(HandlerError::from)
                    }));
                }
                let mut replies = Vec::with_capacity(running.len());
                for reply in running {
                    let reply = reply.await.map_err(HandlerError::from)??;
                    // Kept in the store before the journal entry that names it; a reply the
                    // store cannot keep fails the call (its number is spent: it ran).
                    let carried = Carried::of(reply, store.as_ref()).unwrap_or_else(|e| {
                        Carried::Inline(TaskReply::Failed(InfrastructureFailure::Transport {
                            detail: format!("failed to keep the call's reply: {}", Chain(&e)),
                        }))
                    });
                    replies.push(carried);
                }
                Ok(Json(replies))
            })
            .name("work")
            .await?;
        drop(fence);
        Ok(Json(replies))
    }
}

/// Ends a call's turn when dropped: the command it runs stops with its process group.
struct EndOfTurn(Interrupt);

impl Drop for EndOfTurn {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// The endpoint a worker process serves: the channel object, its fix ledger and the
/// task-worker service (every process serves all three; they keep nothing in-process
/// between calls). `ingress` is the server's ingress URL, where fix draws go. `store`, if
/// given, is the content store every worker and client of the deployment shares: outputs,
/// replies and evidence larger than a message go through it (see [`crate::store`]).
/// Calls' commands run in the sandbox their tasks describe; [`endpoint_of`] serves a worker
/// made otherwise ([`TaskWorker::without_sandbox`]).
///
/// # Errors
///
/// [`WorkDirError`] when the worker's directories cannot be made.
pub fn endpoint(
    dir: &Path,
    jobs: usize,
    ingress: &str,
    store: Option<ContentStore>,
) -> Result<Endpoint, WorkDirError> {
    Ok(endpoint_of(
        TaskWorker::new(dir, jobs, ingress, store.clone())?,
        store,
    ))
}

/// The endpoint serving `worker`, with the channel object and the fix ledger beside it;
/// `store` is the content store `worker` was made with.
pub fn endpoint_of(worker: TaskWorker, store: Option<ContentStore>) -> Endpoint {
    let quick = || {
        restate_sdk::endpoint::ServiceOptions::new()
            .retry_policy_initial_interval(Duration::from_millis(100))
            .retry_policy_max_interval(Duration::from_secs(2))
    };
    Endpoint::builder()
        .bind(
            Channel::new(store)
                .into_service_definition()
                .options(quick()),
        )
        .bind(ActionCacheObject.into_service_definition().options(quick()))
        .bind(FixLedger.into_service_definition().options(quick()))
        .bind(worker.into_service_definition().options(quick()))
        .build()
}

/// How often a worker pings a connection the server has been silent on, and how long it
/// waits for the answer before it takes the connection, and the calls on it, as lost.
const KEEPALIVE: Duration = Duration::from_secs(5);

/// Serves `endpoint` on `listener` over HTTP/2 with `TCP_NODELAY` on every connection: the
/// Restate protocol sends small frames and waits for their answers, so Nagle's algorithm
/// against delayed ACKs would add about 40 ms to every journal round trip (the SDK's own
/// `HttpServer` leaves it on).
///
/// # Errors
///
/// When accepting a connection or setting its option fails.
pub async fn serve(listener: tokio::net::TcpListener, endpoint: Endpoint) -> std::io::Result<()> {
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(endpoint);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            // A broken connection ends its invocations' attempts (the server retries them) and
            // drops their handlers, whose fences stop their commands. Pings find a connection
            // whose server went silent (a node lost without a reset): after KEEPALIVE and its
            // timeout, it is broken too, so no call outlives its turn by more than that.
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .timer(hyper_util::rt::TokioTimer::new())
                .keep_alive_interval(Some(KEEPALIVE))
                .keep_alive_timeout(KEEPALIVE)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kleene::batch::Candidate;

    fn record() -> ClosureRecord {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/closure/record_v1.ckpt");
        kleene::checkpoint::decode(&std::fs::read(path).unwrap()).unwrap()
    }

    fn settled(record: &ClosureRecord) -> Result<Proposal, WorkerFailure> {
        Ok(Proposal::new(Candidate::default()).closed_by(&TaskId::new("x").unwrap(), record))
    }

    /// A submission read from a directory holding `tasks/a.sh` beside its plan file.
    fn submitted() -> (ShellPlan, Submission) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tasks")).unwrap();
        std::fs::write(dir.path().join("tasks/a.sh"), "echo a > a.txt\n").unwrap();
        std::fs::write(
            dir.path().join("plan.json"),
            r#"{"tasks": [{"id": "a", "owner": "shell", "spec": {"intent": "a"},
                "owned_paths": ["a.txt"], "run": "sh \"$KLEENE_PLAN_DIR/tasks/a.sh\""}]}"#,
        )
        .unwrap();
        let (plan, _) = ShellPlan::read(&dir.path().join("plan.json"), &[]).unwrap();
        let submission = Submission::of(&plan, 1, Vec::new());
        (plan, submission)
    }

    #[test]
    fn the_channel_keeps_only_plan_files_that_match_their_manifest() {
        let (plan, mut submission) = submitted();
        let sent = std::mem::take(&mut submission.file_bytes);
        let kept = plan_files("c", &submission, sent.clone()).unwrap();
        assert_eq!(kept.len(), 2, "the script and the plan file");
        // The plan a worker rebuilds from the kept submission is the submitter's.
        let rebuilt = submission.shell_plan("c").unwrap();
        assert_eq!(rebuilt.plan().digest(), plan.plan().digest());
        let script = submission.plan_files.as_ref().unwrap().0
            [&kleene::plan::AdmittedPath::admit("tasks/a.sh").unwrap()];
        let text = |e: ChannelError| Chain(&e).to_string();
        // Other bytes under the script's digest are refused naming the script.
        let mut forged = sent.clone();
        for f in &mut forged {
            if f.digest == script {
                f.base64 = base64::engine::general_purpose::STANDARD.encode("rm -rf ~\n");
            }
        }
        let why = text(plan_files("c", &submission, forged).unwrap_err());
        assert!(
            why.contains("plan file tasks/a.sh: its bytes have digest"),
            "{why}"
        );
        // So are bytes left out.
        let missing: Vec<_> = sent
            .iter()
            .filter(|f| f.digest != script)
            .cloned()
            .collect();
        let why = text(plan_files("c", &submission, missing).unwrap_err());
        assert!(why.contains("plan file tasks/a.sh: its bytes"), "{why}");
        // An earlier adapter's submission names no plan files: refused saying so.
        let old = Submission {
            plan_files: None,
            ..submission
        };
        let why = text(plan_files("c", &old, sent).unwrap_err());
        assert!(why.contains("carries no plan files"), "{why}");
        assert!(old.shell_plan("c").is_err());
    }

    fn fix_draw(task: &str, attempt: u32, fix: &str, turn: &str) -> FixDraw {
        FixDraw {
            task: TaskId::new(task).unwrap(),
            attempt,
            fix: TaskId::new(fix).unwrap(),
            max: 3,
            turn: Some(turn.to_owned()),
        }
    }

    #[test]
    fn the_ledger_fences_a_call_to_its_first_execution_and_to_its_turn() {
        let mut ledger = Ledger::default();
        let a1 = |fix, turn| fix_draw("a", 1, fix, turn);
        assert_eq!(ledger.draw(a1("fa", "x")), (DrawAnswer::Granted, true));
        // The same draw again (a retried request): granted, counted once.
        assert_eq!(ledger.draw(a1("fa", "x")), (DrawAnswer::Granted, false));
        // A second execution under the same call number is refused.
        assert_eq!(ledger.draw(a1("fb", "y")), (DrawAnswer::OtherTurn, false));
        // Sealed: what it drew is answered, and nothing more is granted for it.
        let a = TaskId::new("a").unwrap();
        assert_eq!(ledger.seal(&a, 1), (vec![TaskId::new("fa").unwrap()], true));
        assert_eq!(ledger.draw(a1("fb", "x")), (DrawAnswer::Sealed, false));
        assert!(!ledger.seal(&a, 1).1);
        // The call that replaces it draws under its own number, within the budget.
        assert_eq!(
            ledger.draw(fix_draw("a", 2, "fb", "z")).0,
            DrawAnswer::Granted
        );
        assert_eq!(
            ledger.draw(fix_draw("b", 1, "fc", "w")).0,
            DrawAnswer::Granted
        );
        assert_eq!(
            ledger.draw(fix_draw("c", 1, "fd", "v")).0,
            DrawAnswer::Spent
        );
    }

    proptest::proptest! {
        /// For every order of draws and seals, from any turns: the ledger never grants more
        /// than the budget, never grants for a sealed call, grants one call's draws to one
        /// turn only, and a seal answers exactly what the call was ever granted.
        #[test]
        fn the_ledger_and_its_seals_agree_for_every_order(
            ops in proptest::collection::vec(
                (0u8..3, 1u32..3, 0u8..3, 0u8..3, proptest::bool::ANY), 0..40)
        ) {
            let mut ledger = Ledger::default();
            let mut sealed_with: BTreeMap<(String, u32), Vec<TaskId>> = BTreeMap::new();
            for (task, attempt, fix, turn, seal) in ops {
                let task = format!("t{task}");
                let before = ledger.clone();
                if seal {
                    let (drawn, _) = ledger.seal(&TaskId::new(&task).unwrap(), attempt);
                    let first = sealed_with.entry((task, attempt)).or_insert(drawn.clone());
                    proptest::prop_assert_eq!(&drawn, first);
                } else {
                    let draw = fix_draw(&task, attempt, &format!("f{fix}"), &format!("u{turn}"));
                    let (answer, changed) = ledger.draw(draw);
                    proptest::prop_assert_eq!(changed, ledger != before);
                    if sealed_with.contains_key(&(task, attempt)) {
                        proptest::prop_assert_eq!(answer, DrawAnswer::Sealed);
                    }
                }
                proptest::prop_assert!(ledger.granted.len() <= 3);
                for d in &ledger.granted {
                    let turns: BTreeSet<_> = ledger
                        .granted
                        .iter()
                        .filter(|o| o.task == d.task && o.attempt == d.attempt)
                        .map(|o| o.turn.clone())
                        .collect();
                    proptest::prop_assert_eq!(turns.len(), 1);
                }
            }
        }
    }

    #[test]
    fn only_the_record_a_settlement_binds_is_kept() {
        let record = record();
        let text = record.to_json();
        let (_, kept) = checked_record(settled(&record), Some(text.clone())).unwrap();
        assert_eq!(kept, Some(text.clone()));
        // No closure settled: nothing to keep, whatever came with it.
        let plain = Ok(Proposal::new(Candidate::default()));
        assert_eq!(checked_record(plain, Some(text.clone())).unwrap().1, None);
        // An earlier worker's reply without a record settles without one.
        assert_eq!(checked_record(settled(&record), None).unwrap().1, None);
        // Edited text, even to the same value, is refused before anything settles.
        let edited = text.replacen('{', "{ ", 1);
        let why = checked_record(settled(&record), Some(edited)).unwrap_err();
        assert!(why.contains("does not read back"), "{why}");
    }
}
