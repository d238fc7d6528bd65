//! The plan as a user writes it: tasks, lanes, owners, owned paths, edges, contracts.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::explain;
use super::extension::{ExtensionValue, Extensions};
use super::load::PlanSeed;
use crate::text::{quoted, quoted_char};
use crate::{closure::task::Spec, id::AgentId, id::IdError, id::TaskId, plan::path::AdmittedPath};

/// How many retries a planned task gets when its plan does not say: `retry_limit + 1` is
/// the ceiling of calls, four by default.
pub const DEFAULT_RETRY_LIMIT: u32 = 3;

/// The longest module name, in bytes.
pub const MAX_MODULE_NAME_LEN: usize = 128;

/// The id prefix of module lanes synthesised by normalisation (`module_<name>`).
pub(crate) const MODULE_LANE_PREFIX: &str = "module_";

/// The owner of a module lane that normalisation synthesised.
pub const SYNTHESIZED_MODULE_OWNER: &str = "ModuleAgent";

/// Why a string was refused as a [`ModuleName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleNameError {
    /// The name was empty.
    #[error("accept module name: the name is empty")]
    Empty,
    /// The name was longer than [`MAX_MODULE_NAME_LEN`] bytes.
    #[error("accept module name {name}: longer than {max} bytes", name = quoted(.name))]
    TooLong {
        /// The refused name.
        name: String,
        /// The bound.
        max: usize,
    },
    /// The name had a character other than ASCII letters, digits, `_` and `-`.
    #[error(
        "accept module name {name}: character {character} is not a letter, digit, `_` or `-`",
        name = quoted(.name),
        character = quoted_char(.character)
    )]
    Character {
        /// The refused name.
        name: String,
        /// The offending character.
        character: char,
    },
    /// `module_<name>` is not a valid task id.
    #[error("accept module name: its lane id is not a valid task id")]
    LaneId(#[from] IdError),
}

/// The name of an application module (`tasks`, `billing`): ASCII letters, digits, `_`, `-`,
/// at most [`MAX_MODULE_NAME_LEN`] bytes, so its lane id `module_<name>` is always a valid
/// [`TaskId`].
///
/// # Examples
///
/// ```
/// use kleene::plan::ModuleName;
///
/// let m = ModuleName::new("tasks")?;
/// assert_eq!(m.lane_id().as_str(), "module_tasks");
/// assert!(ModuleName::new("a b").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModuleName {
    // Stored as the lane id so that the id of a synthesised module lane needs no fallible
    // construction later; ordering by `module_<name>` equals ordering by `<name>`.
    lane: TaskId,
}

impl ModuleName {
    /// Checks `name` and wraps it.
    ///
    /// # Errors
    ///
    /// [`ModuleNameError`] naming the rule.
    pub fn new(name: impl Into<String>) -> Result<Self, ModuleNameError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ModuleNameError::Empty);
        }
        if name.len() > MAX_MODULE_NAME_LEN {
            return Err(ModuleNameError::TooLong {
                name,
                max: MAX_MODULE_NAME_LEN,
            });
        }
        if let Some(character) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(ModuleNameError::Character { name, character });
        }
        Ok(Self {
            lane: TaskId::new(format!("{MODULE_LANE_PREFIX}{name}"))?,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        self.lane
            .as_str()
            .strip_prefix(MODULE_LANE_PREFIX)
            .unwrap_or_default()
    }

    /// The deterministic id normalisation gives this module's lane when no task provides it.
    pub fn lane_id(&self) -> &TaskId {
        &self.lane
    }
}

impl TryFrom<String> for ModuleName {
    type Error = ModuleNameError;
    fn try_from(s: String) -> Result<Self, ModuleNameError> {
        Self::new(s)
    }
}

impl From<ModuleName> for String {
    fn from(m: ModuleName) -> String {
        m.as_str().to_owned()
    }
}

impl fmt::Display for ModuleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ModuleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModuleName({:?})", self.as_str())
    }
}

/// The lane a planned task belongs to, tied to its module where it has one.
///
/// In JSON: `{"lane": "model", "module": "tasks"}`; `config` and `auth` may omit `module`;
/// a [`General`](Self::General) task is `{"lane": "general"}`, and a task without `kind` is
/// general too.
///
/// The web-app lanes (`module`, `model`, `persistence`, `service`, `page`, `config`, `auth`)
/// take part in normalisation and consolidation. A general task is a plain unit of work (build
/// a crate, render a docs site, run a pipeline step) that both leave exactly as written: it is
/// tied to no module, receives no contract edges and is never merged.
///
/// ```
/// use kleene::{AppBuildPlan, plan::TaskKind};
///
/// let plan = AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "build", "owner": "cargo", "spec": {"intent": "compile the crate"}},
///   {"id": "docs", "kind": {"lane": "general"}, "owner": "mdbook",
///    "spec": {"intent": "render the book"}, "depends_on": ["build"]}
/// ]}"#)?;
/// assert_eq!(plan.tasks[0].kind, TaskKind::General);
/// let validated = plan.validate()?;
/// assert_eq!(validated.len(), 2, "nothing synthesised, nothing merged");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(
    tag = "lane",
    rename_all = "snake_case",
    deny_unknown_fields,
    from = "KindRepr"
)]
#[non_exhaustive]
pub enum TaskKind {
    /// Provides a module: its contract (name, actions, handler class) that every other lane
    /// of the module builds on.
    Module {
        /// The module provided.
        module: ModuleName,
    },
    /// Data models (schemas) of a module.
    Model {
        /// The module.
        module: ModuleName,
    },
    /// Persistence (storage, migrations) of a module.
    Persistence {
        /// The module.
        module: ModuleName,
    },
    /// Services (handlers, business logic) of a module.
    Service {
        /// The module.
        module: ModuleName,
    },
    /// User-facing pages of a module.
    Page {
        /// The module.
        module: ModuleName,
    },
    /// Configuration, app-wide or of one module.
    Config {
        /// The module, if the configuration belongs to one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        module: Option<ModuleName>,
    },
    /// Authentication and authorisation, app-wide or of one module.
    Auth {
        /// The module, if the auth work belongs to one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        module: Option<ModuleName>,
    },
    /// A plain task outside the web-app lanes: tied to no module, left alone by
    /// normalisation and consolidation. The default when a task does not say its `kind`.
    #[default]
    General,
}

/// How [`TaskKind`] is read: the same shape, with `general` as a variant without fields so
/// that `{"lane": "general", "module": "m"}` is refused (serde lets a unit variant of an
/// internally tagged enum ignore extra keys).
#[derive(Deserialize)]
#[serde(tag = "lane", rename_all = "snake_case", deny_unknown_fields)]
enum KindRepr {
    Module {
        module: ModuleName,
    },
    Model {
        module: ModuleName,
    },
    Persistence {
        module: ModuleName,
    },
    Service {
        module: ModuleName,
    },
    Page {
        module: ModuleName,
    },
    Config {
        #[serde(default)]
        module: Option<ModuleName>,
    },
    Auth {
        #[serde(default)]
        module: Option<ModuleName>,
    },
    General {},
}

impl From<KindRepr> for TaskKind {
    fn from(kind: KindRepr) -> Self {
        match kind {
            KindRepr::Module { module } => Self::Module { module },
            KindRepr::Model { module } => Self::Model { module },
            KindRepr::Persistence { module } => Self::Persistence { module },
            KindRepr::Service { module } => Self::Service { module },
            KindRepr::Page { module } => Self::Page { module },
            KindRepr::Config { module } => Self::Config { module },
            KindRepr::Auth { module } => Self::Auth { module },
            KindRepr::General {} => Self::General,
        }
    }
}

impl TaskKind {
    /// The module this task belongs to (or provides), if any.
    pub fn module(&self) -> Option<&ModuleName> {
        match self {
            Self::Module { module }
            | Self::Model { module }
            | Self::Persistence { module }
            | Self::Service { module }
            | Self::Page { module } => Some(module),
            Self::Config { module } | Self::Auth { module } => module.as_ref(),
            Self::General => None,
        }
    }

    /// The module this task provides, if it is a module lane.
    pub fn provides(&self) -> Option<&ModuleName> {
        match self {
            Self::Module { module } => Some(module),
            _ => None,
        }
    }

    /// The lane's snake-case name (`"module"`, `"model"`, …, `"general"`), as in JSON.
    pub fn lane(&self) -> &'static str {
        match self {
            Self::Module { .. } => "module",
            Self::Model { .. } => "model",
            Self::Persistence { .. } => "persistence",
            Self::Service { .. } => "service",
            Self::Page { .. } => "page",
            Self::Config { .. } => "config",
            Self::Auth { .. } => "auth",
            Self::General => "general",
        }
    }
}

/// What a task receives from one of its prerequisites, recorded by normalisation on the
/// receiving task so a worker is handed its actual prerequisite contracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContractKind {
    /// The module contract (from the module lane).
    Module,
    /// The applicable persistence contract (from a persistence task of the module).
    Persistence,
    /// Accepted schemas (from a model task of the module).
    Schemas,
}

impl ContractKind {
    pub(crate) fn tag(self) -> u64 {
        match self {
            Self::Module => 0,
            Self::Persistence => 1,
            Self::Schemas => 2,
        }
    }
}

/// One input contract of a task: the prerequisite it comes from and what it carries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputContract {
    /// The prerequisite task that provides the contract.
    pub from: TaskId,
    /// What the contract carries.
    pub contract: ContractKind,
}

/// Whether a task came from the plan's author or from normalisation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskOrigin {
    /// Written in the plan.
    #[default]
    Planned,
    /// A module lane synthesised by normalisation for a module that tasks referenced but no
    /// task provided.
    Synthesized,
}

/// One task of an [`AppBuildPlan`].
///
/// In JSON, an object with the fields below; only `id`, `owner` and `spec` are required.
/// Any other key is refused unless the loader declared it as an extension key
/// ([`AppBuildPlan::from_json_with`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedTask {
    /// The task's id, unique in the plan.
    pub id: TaskId,
    /// Its lane (and module); [`TaskKind::General`] when the plan does not say.
    #[serde(default)]
    pub kind: TaskKind,
    /// The agent that performs it.
    pub owner: AgentId,
    /// What the task must achieve.
    pub spec: Spec,
    /// The paths this task, and only this task, may write. An owned path names a file or a
    /// directory: owning `out` means owning `out` itself and every path beneath it
    /// (`out/a.txt`, `out/b/c.txt`). No two tasks may own the same path or paths one of
    /// which lies beneath the other.
    pub owned_paths: Vec<AdmittedPath>,
    /// Its direct prerequisites.
    pub depends_on: Vec<TaskId>,
    /// Retries after the first call (calls are bounded by `retry_limit + 1`).
    pub retry_limit: u32,
    /// The contracts it receives from its prerequisites.
    pub input_contracts: Vec<InputContract>,
    /// Whether the author wrote it or normalisation synthesised it.
    pub origin: TaskOrigin,
    /// The ids of tasks consolidation merged into this one (empty unless consolidated).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub consolidated_from: Vec<TaskId>,
    /// The values of the extension keys the task carried (see [`Extensions`]), by key.
    /// Normalisation keeps them; consolidation keeps the survivor's and drops those of the
    /// tasks merged into it (a tool that gives them meaning should refuse such a plan).
    /// In JSON they are members of the task object itself.
    #[serde(flatten, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, ExtensionValue>,
}

pub(crate) fn default_retry_limit() -> u32 {
    DEFAULT_RETRY_LIMIT
}

impl PlannedTask {
    /// A planned task with no owned paths, prerequisites or contracts and the default retry
    /// limit.
    pub fn new(id: TaskId, kind: TaskKind, owner: AgentId, spec: Spec) -> Self {
        Self {
            id,
            kind,
            owner,
            spec,
            owned_paths: Vec::new(),
            depends_on: Vec::new(),
            retry_limit: DEFAULT_RETRY_LIMIT,
            input_contracts: Vec::new(),
            origin: TaskOrigin::Planned,
            consolidated_from: Vec::new(),
            extensions: BTreeMap::new(),
        }
    }

    /// Sets the value of extension key `key`.
    #[must_use]
    pub fn with_extension(mut self, key: impl Into<String>, value: ExtensionValue) -> Self {
        self.extensions.insert(key.into(), value);
        self
    }

    /// The value of extension key `key`, if the task carried it.
    pub fn extension(&self, key: &str) -> Option<&ExtensionValue> {
        self.extensions.get(key)
    }

    /// Adds an owned path.
    #[must_use]
    pub fn owning(mut self, path: AdmittedPath) -> Self {
        self.owned_paths.push(path);
        self
    }

    /// Adds a prerequisite.
    #[must_use]
    pub fn after(mut self, prerequisite: TaskId) -> Self {
        self.depends_on.push(prerequisite);
        self
    }

    /// Whether `path` is one of the task's owned paths or lies below one.
    pub fn owns(&self, path: &AdmittedPath) -> bool {
        self.owned_paths.iter().any(|owned| path.starts_with(owned))
    }

    /// The owned paths that `files` does not write: an owned path is written when `files`
    /// has it or any path beneath it (a directory is written by any file in it). In the
    /// order of [`owned_paths`](Self::owned_paths).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use kleene::{plan::AdmittedPath, id::AgentId, plan::PlannedTask, closure::Spec, id::TaskId, plan::TaskKind};
    ///
    /// let p = |s| AdmittedPath::admit(s).unwrap();
    /// let task = PlannedTask::new(TaskId::new("t")?, TaskKind::General,
    ///                             AgentId::new("sh")?, Spec::new("t"))
    ///     .owning(p("out")).owning(p("README.md")).owning(p("docs"));
    /// let files = BTreeMap::from([(p("out/a/b.txt"), ()), (p("docs.md"), ())]);
    /// let missing: Vec<&str> = task.unwritten_owned_paths(&files).iter().map(|p| p.as_str()).collect();
    /// assert_eq!(missing, ["README.md", "docs"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Complexity
    ///
    /// `O(k log n)` for `k` owned paths and `n` files: one range query per owned path (paths
    /// order by components, so everything beneath a path sorts right after it).
    pub fn unwritten_owned_paths<V>(
        &self,
        files: &BTreeMap<AdmittedPath, V>,
    ) -> Vec<&AdmittedPath> {
        use std::ops::Bound;
        self.owned_paths
            .iter()
            .filter(|owned| {
                files
                    .range::<AdmittedPath, _>((Bound::Included(*owned), Bound::Unbounded))
                    .next()
                    .is_none_or(|(first, _)| !first.starts_with(owned))
            })
            .collect()
    }

    /// Whether normalisation synthesised this task.
    pub fn is_synthesized(&self) -> bool {
        self.origin == TaskOrigin::Synthesized
    }
}

/// Why a plan could not be loaded from JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanLoadError {
    /// The JSON was malformed or did not match the plan's shape: an unknown or missing field,
    /// a wrong type, an invalid id, module name or path. The message is in the plan author's
    /// terms: the JSON a key takes (`spec must be an object such as {"intent": "…"}`), or
    /// what JSON syntax was expected (`trailing comma`), never the Rust type that reads it.
    #[error("load plan: {message} at `{field}`, line {line} column {column}")]
    Json {
        /// Where in the document the error is, as a path of field names and indices
        /// (`tasks[2].owned_paths[0]`); `.` for the top level.
        field: String,
        /// The 1-based line.
        line: usize,
        /// The 1-based column.
        column: usize,
        /// What was wrong (names the unknown field, or the path rule that refused a path).
        message: String,
    },
}

impl PlanLoadError {
    /// The location as a path of fields (`tasks[2].kind`).
    pub fn field(&self) -> &str {
        match self {
            Self::Json { field, .. } => field,
        }
    }

    /// The 1-based line and column.
    pub fn position(&self) -> (usize, usize) {
        match self {
            Self::Json { line, column, .. } => (*line, *column),
        }
    }
}

/// The approved plan of an app build: the only authority for tasks and file ownership.
///
/// A plan as loaded is a draft; only [`ValidatedPlan`](crate::plan::ValidatedPlan) can be executed.
///
/// # Examples
///
/// ```
/// use kleene::AppBuildPlan;
///
/// let plan = AppBuildPlan::from_json(r#"{"tasks": [
///   {"id": "model_tasks", "kind": {"lane": "model", "module": "tasks"},
///    "owner": "ModelAgent", "spec": {"intent": "task schema"},
///    "owned_paths": ["backend/schemas.py"]}
/// ]}"#)?;
/// assert_eq!(plan.tasks[0].retry_limit, 3);
/// assert_eq!(AppBuildPlan::from_json(&plan.to_json())?, plan);
///
/// let err = AppBuildPlan::from_json(r#"{"tasks": [], "extra": 1}"#).unwrap_err();
/// assert_eq!(err.position(), (1, 21));
/// assert!(err.to_string().contains("unknown field `extra`"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AppBuildPlan {
    /// The planned tasks, in the author's order (order carries no meaning).
    pub tasks: Vec<PlannedTask>,
    /// The values of the plan-level extension keys (see [`Extensions`]), by key; in JSON
    /// they are members of the plan object itself.
    #[serde(flatten, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, ExtensionValue>,
}

impl AppBuildPlan {
    /// A plan of `tasks`.
    pub fn new(tasks: Vec<PlannedTask>) -> Self {
        Self {
            tasks,
            extensions: BTreeMap::new(),
        }
    }

    /// Loads a plan from JSON. Unknown fields are refused, with a suggestion when one is
    /// close to a known field.
    ///
    /// # Errors
    ///
    /// [`PlanLoadError::Json`] with the field path, line and column of the first problem.
    pub fn from_json(json: &str) -> Result<Self, PlanLoadError> {
        Self::from_json_with(json, &Extensions::NONE)
    }

    /// Loads a plan from JSON whose task objects may carry `extensions.task_keys` and whose
    /// top level may carry `extensions.plan_keys`. Each such value is kept raw, with its
    /// offset in `json`, in [`PlannedTask::extensions`] or [`AppBuildPlan::extensions`], and
    /// is bound into the plan digest. Every other unknown key is refused, naming the key, a
    /// close known key when there is one (`did you mean `checks`?`), the line and the column.
    ///
    /// # Errors
    ///
    /// [`PlanLoadError::Json`] with the field path, line and column of the first problem.
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::{AppBuildPlan, plan::Extensions};
    ///
    /// let keys = Extensions { task_keys: &["run", "checks"], plan_keys: &["scratch"] };
    /// let plan = AppBuildPlan::from_json_with(r#"{"scratch": ["target/**"], "tasks": [
    ///   {"id": "test", "owner": "sh", "spec": {"intent": "test"}, "run": "cargo test"}]}"#,
    ///   &keys)?;
    /// assert_eq!(plan.extensions["scratch"].canonical(), r#"["target/**"]"#);
    ///
    /// let err = AppBuildPlan::from_json_with(r#"{"tasks": [
    ///   {"id": "test", "owner": "sh", "spec": {"intent": "test"}, "chekcs": []}]}"#, &keys)
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "tasks[0].chekcs");
    /// assert_eq!(err.position(), (2, 68));
    /// assert!(err.to_string().contains("did you mean `checks`?"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_json_with(json: &str, extensions: &Extensions<'_>) -> Result<Self, PlanLoadError> {
        let mut de = serde_json::Deserializer::from_str(json);
        let mut track = serde_path_to_error::Track::new();
        let seed = PlanSeed {
            extensions,
            base: json,
        };
        let result = serde::de::DeserializeSeed::deserialize(
            seed,
            serde_path_to_error::Deserializer::new(&mut de, &mut track),
        );
        let plan = result.map_err(|inner| {
            let path = track.path().to_string();
            json_error(json, explain::trim_unknown(&path), &inner)
        })?;
        de.end().map_err(|e| json_error(json, ".", &e))?;
        Ok(plan)
    }

    /// Saves the plan as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serialising these types cannot fail: every map key is a string and every value
        // is plain data. Fall back to an empty document rather than panic if that ever
        // changed.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// serde_json's error at `field` of `json`, in the plan author's terms: malformed JSON says
/// what JSON was expected there, a value of the wrong shape says the shape to write.
fn json_error(json: &str, field: &str, err: &serde_json::Error) -> PlanLoadError {
    let raw = strip_position(&err.to_string());
    let message = match err.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            explain::explain_syntax_error(json, err.line(), err.column(), &raw)
        }
        _ => explain::explain_value_error(field, &raw, &[]),
    };
    PlanLoadError::Json {
        field: field.to_owned(),
        line: err.line(),
        column: err.column(),
        message,
    }
}

/// serde_json appends " at line L column C" to its messages; the position is kept in fields.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

// Enters a digest as its text.
crate::id::digest::canonical_text!(ModuleName);
