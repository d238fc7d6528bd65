//! The command line: commands, arguments, help texts with an example each, exit codes.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// What the process exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The run was accepted (or the command did what was asked).
    Ok,
    /// The run halted or is blocked; the reason was printed.
    Halted,
    /// The input (plan file, arguments, state directory, archive) was refused.
    BadInput,
    /// SIGINT or SIGTERM stopped the run; `kleene resume` continues it.
    Interrupted,
}

impl Exit {
    /// The numeric code: 0, 1, 2 or 130.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Halted => 1,
            Exit::BadInput => 2,
            Exit::Interrupted => 130,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

const ABOUT: &str = "Run plan files of shell commands with bounded, auditable auto-fix recovery";

const LONG_ABOUT: &str = "\
Run plan files of shell commands with bounded, auditable auto-fix recovery.

A plan file is an AppBuildPlan (tasks, owned paths, dependencies) whose tasks also say what
to run: `run` does the work, `checks` validate it, and `fix` gets the recovery spec of a
failed check (on stdin and in the file named by KLEENE_RECOVERY_SPEC_FILE). Tasks run in
dependency order, up to -j of them at once (default: one per core); a failed task drains
its dependents. Everything a run learns is journaled evidence, so it can be resumed,
accepted, exported and verified. `kleene worker` and `kleene run --restate URL` run plans
across many machines on Restate (see kleene-restate/README.md).

A plan file is a JSON object {\"tasks\": [...]}; `kleene help plan` lists every key of the plan
and of its tasks with its type, default and meaning, and prints a minimal plan to start from.
Every command and glob is part of the plan digest: changing one changes the run's channel
and what the acceptance record binds. Unknown keys are refused with a suggestion.

Each call runs in its own staged workspace: a fresh directory holding the accepted files of
the task's prerequisites (and theirs), nothing else. `run`, the checks and every `fix` of
the call run there, so the checks judge exactly what is accepted. The call's output is what
it created or changed there; writing another task's path, deleting a prerequisite's file,
leaving a symbolic link, a FIFO, a file name kleene cannot admit or something it may not
read, removing its own stage, or writing more than 1 GiB outside the scratch, refuses the
call. kleene never reads through a symbolic link. STATE/workspace receives the accepted
files after the run; KLEENE_CACHE_DIR is a directory kept between calls for build caches.

Commands run as `sh -c` in the stage with KLEENE_PLAN_DIR (the run's read-only copy of the
plan's files, see `inputs` in `kleene help plan`), KLEENE_WORKSPACE (the stage),
KLEENE_CACHE_DIR, KLEENE_TASK, KLEENE_SUBTASK, KLEENE_DEPTH, KLEENE_CALL and, for `fix`,
KLEENE_RECOVERY_SPEC_FILE (every path absolute, whatever --state says). Where Linux allows
it commands run in a PID namespace (inside a user namespace for anyone but root; no other
program is needed) whose init, a helper kleene starts once per run, kills whatever a command
left behind before the call is judged: nothing a command starts outlives
its call or a killed kleene. Without one, where cgroup v2 is writable (as root in most
containers), each command runs in a cgroup of its own that kleene kills when it ends, so
nothing it started outlives its call either (KLEENE_CONTAINMENT=cgroup chooses this). Where
neither is allowed (a container under the default seccomp profile) the helper runs as the
subreaper of its commands: what a command started becomes its child when its parent ends,
and it kills them all before the call is judged, and when kleene dies
(KLEENE_CONTAINMENT=subreaper chooses this). With KLEENE_CONTAINMENT=process-group a command
only leads a process group that kleene records, a later resume refuses to start while one is
alive (--kill-stale kills it), and a call's stage directory is handed to the next call
only when no process started while its commands ran still runs once they ended; otherwise
the next call gets a directory never used before, so what a child that outlived its call
writes reaches no later call. A missing command (exit
127/126) or a timeout is an infrastructure failure and is never handed to a fixer; kleene's
own failure to write (a full disk) stops the run without counting the call (a fix that
already ran stays spent).

A fix subtask's `fix` runs in the stage its call's `run` left. A retried call starts over:
its `fix` runs instead of `run`, in a fresh stage holding only the prerequisites' files,
with the original task, its rejection and the refused paths as text on stdin, so a `fix`
that edits a file in place must also be able to write it from scratch.

One command at a time writes a state directory (run, resume, accept, export take a lock and
name its holder); status, audit and verify only read and never change a byte.

Exit codes: 0 accepted (or done), 1 halted or blocked (the reason is printed),
2 bad input, 130 interrupted (resume with `kleene resume`).";

/// The end of `kleene run --help`: an example, and where the plan's keys are explained (all
/// of `kleene help plan` there would bury the run's own options).
const RUN_AFTER_HELP: &str = "\
Example:
  kleene run examples/demo/plan.json --state .kleene --max-depth 3

Every key of a plan file, and a minimal plan to start from: kleene help plan";

/// Every key of a plan file, and a minimal plan between the marker lines (a test extracts it,
/// validates it and runs it to acceptance, so it cannot drift from what the loader accepts or
/// need a tool beyond a POSIX shell). Printed by `kleene help plan`. The model's keys are read
/// by the library (src/plan/load.rs, src/plan/model.rs), the command keys by kleene::shell
/// (src/shell/planfile/mod.rs).
pub const PLAN_HELP: &str = r#"Plan file keys (JSON). * = required; otherwise the default is given.

Top level:
  tasks *            array of task objects  the work, at least one task
  scratch            array of globs, []     build output that is never part of any task's
                                            output, e.g. ["target/**"] (** = any depth)
  inputs             array of globs, all    the project's files the plan binds, e.g.
                                            ["src/**", "Cargo.toml"]; [] for none; by default
                                            what git tracks or would track beside the plan
                                            (.gitignore honoured), or outside git every file
                                            there; never .git, scratch, kleene's state, a
                                            cache directory (CACHEDIR.TAG), a virtualenv or
                                            kleene's own redirected output. They are bound
                                            into the plan digest, copied into the run's state
                                            (at most 4096 files, 8 MiB), read by commands
                                            through $KLEENE_PLAN_DIR, and are the base of
                                            every call's stage
  base               "project" | "empty",   what every call's stage starts from beside its
                     "project"              prerequisites' accepted files: the bound files
                                            (a task changes the files it owns in place;
                                            kleene diff and kleene apply give the changes
                                            back), or nothing (a project built from nothing)

Each task:
  id *               string                 unique name, e.g. "unit_tests"; depends_on uses it.
                                            A name, not a path (kleene names files after it):
                                            no "/", not starting with ".", no control
                                            characters, at most 256 bytes
  owner *            string                 who does the task, e.g. "shell" (a label kept in
                                            the evidence)
  spec *             object                 what the task must achieve:
                                            {"intent": "…", "acceptance_criteria": ["…"]}
    intent *           string               one sentence, e.g. "the tests pass"
    acceptance_criteria  array of strings, []  what must hold when the task is done
  kind               object, {"lane": "general"}
                                            the task's lane; "general" suits any plain task.
                                            Web-app plans write {"lane": L, "module": M}: L is
                                            module, model, persistence, service or page
                                            (module required), or config or auth (optional)
  depends_on         array of task ids, []  tasks that must be accepted before this one
  owned_paths        array of paths, []     files or directories only this task writes:
                                            relative, no "..", no trailing "/" (a directory
                                            owns all beneath it: write "app", not "app/"), no
                                            path owned twice or nested in another's. A task
                                            that owns paths needs `run`. Names that look like
                                            secrets are refused: a component that starts with
                                            .env, id_rsa or credentials, ends in .pem or .key,
                                            or is secret or secrets before its first "."
                                            (.env.local, secrets.txt, secrets/, any letter
                                            case); security/secrets.yaml is the one exception
  retry_limit        number, 3              calls after the first when a call fails; a call
                                            refused for the same reason as the one before it
                                            ends the task (recovery_stalled) instead
  input_contracts    array, []              set by normalisation, rarely written:
                                            [{"from": ID, "contract": "module"|"persistence"|"schemas"}]
  origin             string, "planned"      set by normalisation ("synthesized"); do not write
  consolidated_from  array of task ids, []  set by consolidation; do not write

  Commands (what kleene runs for the task):
  run                string, none           shell command that does the work and writes the
                                            task's owned paths (sh -c, in the task's stage).
                                            Required when the task owns paths or has any
                                            other command key; a task without it runs nothing
                                            and is accepted as it is (a step others wait for)
  checks             array of objects, []   validators; a non-zero exit is a failure:
                                            {"id": "tests", "command": "pytest -q"} (both
                                            required), optional "severity": "blocker" (default),
                                            "warning" or "info", and "overridable": true
                                            (default; false: a failure is never auto-fixed)
  fix                string, none           run for each fix subtask of a failed check, and
                                            for a retried call; none: failures are not auto-fixed
  timeout_secs       number, --timeout 600  seconds per command, above 0 and at most 86400
  scratch            array of globs, []     as at the top level, for this task only
  inputs             array of globs, all    the bound files this task's commands read, e.g.
                                            ["tasks/page.sh"]: its stage holds only these
                                            beside its prerequisites' files, and only these
                                            are in its action key, so editing a file it does
                                            not name never calls it again
  cache              true | false, true     false: never reuse an accepted result of this
                                            task; for a task whose effects reach outside its
                                            stage (a deploy, the network), which the key
                                            cannot see
  sandbox            false | object, {}     what its commands may touch beside their stage,
                                            scratch and a private TMPDIR (which is all they
                                            may write by default): {"read": ["/opt/sdk"],
                                            "write": ["~/.cache/tool"], "network": false}
                                            (absolute or ~/ paths that exist; network false
                                            cuts TCP, loopback too); false: unconfined

A task's call is made again only when its action key changes: its entry in the plan (spec,
owner, owned paths, commands, scratch, timeouts, retry limit), the plan's scratch and base,
the bound files it reads (see inputs) and its prerequisites' accepted outputs. Otherwise
kleene run reuses the result an earlier run accepted (kept in STATE-cache, or --cache DIR),
with that call's record. The key cannot see tools outside the project, the network or the
clock: opt such tasks out with "cache": false, or run with --no-cache.

Persistence tasks of one module are merged into the one with the smallest id (consolidation);
`kleene validate` names every task it merged. Unknown keys are refused with a suggestion.

A minimal plan (it needs only a POSIX shell; save it as plan.json, kleene run plan.json):
----- begin plan -----
{
  "tasks": [
    { "id": "greet", "owner": "shell",
      "spec": {"intent": "write the greeting"},
      "owned_paths": ["greeting.txt"], "run": "echo hello > greeting.txt" },
    { "id": "copy", "owner": "shell", "depends_on": ["greet"],
      "spec": {"intent": "copy the greeting", "acceptance_criteria": ["it says hello"]},
      "owned_paths": ["copy.txt"], "run": "cp greeting.txt copy.txt",
      "checks": [{"id": "hello", "command": "grep -q hello copy.txt"}] }
  ]
}
----- end plan -----"#;

const EXAMPLES: &str = "\
Examples:
  kleene run examples/demo/plan.json     build the demo (one check fails, a fix repairs it)
  kleene status                          what is accepted, failed, drained, in flight
  kleene accept && kleene export out.tar && kleene verify out.tar
  kleene graph examples/demo/plan.json --out plan   plan.dot (and plan.svg with Graphviz)";

/// kleene's command line.
#[derive(Debug, Parser)]
// clap's own `help` subcommand is replaced by one that also knows the `plan` topic.
#[command(
    name = "kleene",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Print events and results as JSON lines on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a plan file from the start on a new channel.
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Continue an interrupted run on its own channel.
    #[command(after_help = "Example:\n  kleene resume --state .kleene")]
    Resume(ResumeArgs),
    /// Show what is accepted, failed, drained and in flight, and why.
    #[command(after_help = "Example:\n  kleene status --state .kleene --json")]
    Status(StateArgs),
    /// Check the final files against plan and evidence; write (and sign) the acceptance record.
    #[command(
        after_help = "Examples:\n  kleene accept --state .kleene\n  kleene accept --signing-key ~/.config/kleene/kleene.key"
    )]
    Accept(AcceptArgs),
    /// Write the accepted files and their acceptance record as a canonical tar archive.
    #[command(
        after_help = "Examples:\n  kleene export out.tar --state .kleene\n  kleene export out.tar --signing-key ~/.config/kleene/kleene.key   also out.tar.intoto.jsonl"
    )]
    Export(ExportArgs),
    /// Verify an exported archive against the accepted record or a signature; name every
    /// mismatching path.
    #[command(
        after_help = "Examples:\n  kleene verify out.tar --state .kleene\n  kleene verify out.tar --public-key kleene.pub   checks out.tar.intoto.jsonl, needs no state"
    )]
    Verify(VerifyArgs),
    /// Make an ed25519 signing key (kleene.key, mode 0600) and its public key (kleene.pub).
    #[command(after_help = "Example:\n  kleene keygen --out ~/.config/kleene")]
    Keygen(KeygenArgs),
    /// Print a plan's task graph as Graphviz DOT (and render SVG when `dot` is on PATH);
    /// with --state, a run's graph: each task coloured by how it ended.
    #[command(
        after_help = "Examples:\n  kleene graph examples/demo/plan.json --out plan\n  kleene graph --state .kleene --out run"
    )]
    Graph(GraphArgs),
    /// Print the accepted changes as a patch against the project's files the run bound, for
    /// `git apply`.
    #[command(
        after_help = "Examples:\n  kleene diff --state .kleene > accepted.patch\n  kleene diff | git apply --check\n  kleene diff --per-task | git am   one commit per accepted task (after kleene accept)"
    )]
    Diff(DiffArgs),
    /// Write the accepted changes into the project's working tree, where every file they
    /// touch still holds what the run bound; otherwise write nothing and name the files
    /// changed since.
    #[command(after_help = "Example:\n  kleene apply --state .kleene")]
    Apply(StateArgs),
    /// Say how much the cache of accepted results holds; prune what no longer reads back.
    #[command(
        after_help = "Examples:\n  kleene cache                  entries, objects and bytes in .kleene-cache\n  kleene cache --prune          remove damaged entries and objects no entry names\n  kleene cache --clear          remove every entry and object"
    )]
    Cache(CacheCommandArgs),
    /// Print the audit trail of every task's closure and verify its hash chain.
    #[command(after_help = "Example:\n  kleene audit --state .kleene")]
    Audit(StateArgs),
    /// Load and validate a plan file; print its tasks in execution order.
    #[command(after_help = "Example:\n  kleene validate examples/demo/plan.json")]
    Validate(PlanArgs),
    /// Explain a topic (`plan`: every key of a plan file and a minimal plan) or a command.
    #[command(
        after_help = "Examples:\n  kleene help plan   every plan key, its type, default and meaning\n  kleene help run"
    )]
    Help(HelpArgs),
    /// Serve Restate's task calls: the Restate adapter's worker (`kleene-restate worker`).
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  kleene worker --listen 127.0.0.1:9081 --jobs 4   (see kleene-restate/README.md)"
    )]
    Worker(AdapterArgs),
    /// Any command of the Restate adapter (`kleene-restate`): register, run, resume, status,
    /// accept, balance, local.
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  kleene restate status --channel run-0123456789ab"
    )]
    Restate(AdapterArgs),
}

/// `kleene help`.
#[derive(Debug, Args)]
pub struct HelpArgs {
    /// `plan`, or a command's name [default: kleene's own help].
    #[arg(value_name = "TOPIC")]
    pub topic: Option<String>,
}

/// Arguments handed to the Restate adapter as they are.
#[derive(Debug, Args)]
pub struct AdapterArgs {
    /// The adapter's arguments (`kleene worker --help` shows them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

/// Where a run keeps its state.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// The state directory (journal, plan copy, closure records, acceptance record).
    #[arg(long, value_name = "DIR", default_value = ".kleene")]
    pub state: PathBuf,
}

/// Whether a run's commands are confined.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// on: each command writes only its stage, scratch and a private TMPDIR (see SECURITY.md
    /// and the task key `sandbox`); off: commands can write anywhere you can
    #[arg(
        long,
        value_enum,
        value_name = "on|off",
        env = "KLEENE_SANDBOX",
        default_value = "on",
        hide_possible_values = true
    )]
    pub sandbox: SandboxSwitch,
}

/// The values of `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxSwitch {
    /// Confine every command (where the kernel can; a run says when it cannot).
    On,
    /// Confine none.
    Off,
}

/// Where a run keeps the results it accepted, for later runs to reuse.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// The cache of accepted results: a task whose action key (its plan entry, the files it
    /// can read, its prerequisites' accepted outputs) has an accepted result there is not
    /// called again; each accepted call's result is kept there. Give one directory to
    /// several state directories to share it [default: beside the state directory,
    /// STATE-cache].
    #[arg(long, value_name = "DIR", env = "KLEENE_CACHE")]
    pub cache: Option<PathBuf>,
    /// Make every call: neither reuse an accepted result nor keep one.
    #[arg(long)]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The cache directory for the state directory `state`, unless caching is off.
    pub fn dir(&self, state: &Path) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        if let Some(dir) = &self.cache {
            return Some(dir.clone());
        }
        let name = state
            .file_name()
            .map_or_else(|| "kleene".into(), |n| n.to_string_lossy().into_owned());
        Some(state.with_file_name(format!("{name}-cache")))
    }
}

/// `kleene cache`.
#[derive(Debug, Args)]
pub struct CacheCommandArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// The cache [default: beside the state directory, STATE-cache].
    #[arg(long, value_name = "DIR", env = "KLEENE_CACHE")]
    pub cache: Option<PathBuf>,
    /// Remove every entry that does not read back whole, every object no entry names, and
    /// the temporary files of writers lost over an hour ago.
    #[arg(long, conflicts_with = "clear")]
    pub prune: bool,
    /// Remove every entry and object: the next run makes every call.
    #[arg(long)]
    pub clear: bool,
}

/// `kleene diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// One patch per accepted task, as a mailbox `git am` takes: each commit's message names
    /// the task and its intent, with the acceptance record's digest as a `Kleene-Record`
    /// trailer (run kleene accept first).
    #[arg(long)]
    pub per_task: bool,
}

/// `kleene run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plan file (JSON).
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// Where the accepted files are written after the run (commands run in staged workspaces under STATE/stages/) [default: STATE/workspace].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
    /// The channel the evidence is bound to [default: derived from the plan digest].
    #[arg(long, value_name = "ID")]
    pub channel: Option<String>,
    /// Deepest fix subtask (0 = never auto-fix).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_depth: u32,
    /// Most fix subtasks in the whole run.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_fixes: u32,
    /// Also auto-fix failed checks of severity warning.
    #[arg(long)]
    pub recover_warnings: bool,
    /// After the batch settles, give each failed root one corrective call.
    #[arg(long)]
    pub batch_recovery: bool,
    /// Timeout of each command, for tasks that set none.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub timeout: f64,
    /// Start over: move an existing state directory aside to STATE.old-N first (kept for
    /// inspection) instead of refusing it (or, for a finished run, replacing it). kleene
    /// never removes it: the line it prints names the directory and the `rm -rf` that removes
    /// it once it is no longer wanted. Accepted results are still reused from the cache;
    /// add --no-cache to make every call.
    #[arg(long)]
    pub restart: bool,
    /// Kill commands an earlier kleene left running in this state directory instead of
    /// refusing to start.
    #[arg(long)]
    pub kill_stale: bool,
    /// Calls to run at once, each in its own staged workspace (STATE/stages/call-N); 1 runs
    /// them one by one in the plan's order [default: the machine's available parallelism].
    #[arg(short = 'j', long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    /// Run on Restate instead (its ingress URL): the plan is submitted to its channel there
    /// through the Restate adapter, and workers started with `kleene worker` make the calls.
    #[arg(long, value_name = "URL")]
    pub restate: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub signing: SigningArgs,
}

/// `kleene resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Kill commands an earlier kleene left running in this state directory instead of
    /// refusing to resume.
    #[arg(long)]
    pub kill_stale: bool,
    /// Calls to run at once, each in its own staged workspace (STATE/stages/call-N); 1 runs
    /// them one by one in the plan's order [default: the machine's available parallelism].
    #[arg(short = 'j', long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub signing: SigningArgs,
}

/// The `-j` of `run` and `resume`: as given, or the machine's available parallelism.
pub fn jobs(given: Option<NonZeroUsize>) -> NonZeroUsize {
    given.unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN))
}

/// The secret key that signs acceptance, kept outside the state directory.
#[derive(Debug, Args)]
pub struct SigningArgs {
    /// The ed25519 key file (PEM, from kleene keygen or openssl genpkey -algorithm ed25519)
    /// that seals this run: `run` and `resume` put a keyed MAC derived from it on every
    /// journal record (every later command then needs it to read the journal), `accept`
    /// signs the acceptance record (STATE/acceptance.dsse.json) and `export` the in-toto
    /// statement (OUT.intoto.jsonl). It must not be inside the state directory and must be
    /// readable by its owner only. See SECURITY.md.
    #[arg(long, value_name = "FILE", env = "KLEENE_SIGNING_KEY")]
    pub signing_key: Option<PathBuf>,
}

/// `kleene accept`.
#[derive(Debug, Args)]
pub struct AcceptArgs {
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub signing: SigningArgs,
}

/// `kleene export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The archive to write (with --tree, the directory to make).
    #[arg(value_name = "OUT.tar")]
    pub out: PathBuf,
    /// Make OUT a directory holding the project as the run leaves it: every file the run
    /// bound, with the accepted files over them. OUT must not exist. A tree is for building
    /// and reading; the archive is what `kleene verify` checks.
    #[arg(long)]
    pub tree: bool,
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub signing: SigningArgs,
}

/// `kleene verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The archive to verify.
    #[arg(value_name = "ARCHIVE.tar")]
    pub archive: PathBuf,
    /// The expected acceptance record digest [default: the one in STATE/acceptance.json,
    /// or with --public-key the one the signed statement names].
    #[arg(long, value_name = "DIGEST")]
    pub record: Option<String>,
    /// The state directory whose acceptance record is expected (not read with --public-key).
    #[arg(long, value_name = "DIR", default_value = ".kleene")]
    pub state: PathBuf,
    /// Trust only a signature by this public key (PEM, e.g. kleene.pub): the archive must
    /// match the in-toto statement signed in --signature.
    #[arg(long, value_name = "FILE")]
    pub public_key: Option<PathBuf>,
    /// The DSSE envelope of the signed statement [default: ARCHIVE.intoto.jsonl].
    #[arg(long, value_name = "FILE", requires = "public_key")]
    pub signature: Option<PathBuf>,
}

/// `kleene keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The directory to write kleene.key and kleene.pub into (created if missing); keep it
    /// outside every state directory.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// `kleene graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The plan file (JSON).
    #[arg(
        value_name = "PLAN",
        required_unless_present = "state",
        conflicts_with = "state"
    )]
    pub plan: Option<PathBuf>,
    /// Draw the plan a run in this state directory ran instead, each task filled by how it
    /// ended (accepted, failed, drained, in flight, pending) and labelled with its calls and
    /// fixes.
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Write BASE.dot (and BASE.svg when Graphviz's `dot` is on PATH) instead of printing.
    #[arg(long, value_name = "BASE")]
    pub out: Option<PathBuf>,
}

/// `kleene validate`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The plan file (JSON).
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_has_an_example() {
        for sub in Cli::command().get_subcommands() {
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            assert!(
                help.contains(&format!("kleene {}", sub.get_name())),
                "{}: {help}",
                sub.get_name()
            );
        }
    }

    #[test]
    fn run_defaults() {
        let cli = Cli::try_parse_from(["kleene", "run", "p.json"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.state.state, PathBuf::from(".kleene"));
        assert_eq!((run.max_depth, run.max_fixes), (3, 10));
        assert!(!run.batch_recovery && !cli.json);
    }
}
