//! Reading plans from JSON: the plan's own fields, declared extension keys, and a refusal
//! with a suggestion for every other key.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::extension::{ExtensionValue, Extensions, did_you_mean};
use super::model::{AppBuildPlan, PlannedTask, default_retry_limit};
use crate::closure::task::Spec;

/// The fields of a task object, in the order the format documents them.
const TASK_FIELDS: &[&str] = &[
    "id",
    "kind",
    "owner",
    "spec",
    "owned_paths",
    "depends_on",
    "retry_limit",
    "input_contracts",
    "origin",
    "consolidated_from",
];

/// The fields of the plan object.
const PLAN_FIELDS: &[&str] = &["tasks"];

/// Reads an [`AppBuildPlan`] whose objects may carry `extensions`' keys. `base` is the whole
/// document, so each extension value's offset in it can be recorded.
pub(crate) struct PlanSeed<'a, 'de> {
    pub(super) extensions: &'a Extensions<'a>,
    pub(super) base: &'de str,
}

/// Reads one [`PlannedTask`].
#[derive(Clone, Copy)]
struct TaskSeed<'a, 'de> {
    keys: &'a [&'a str],
    base: &'de str,
}

/// One key of an object: a field of the format (by position in its field list) or a
/// declared extension key.
enum Key {
    Field(usize),
    Extension(String),
}

/// Reads a key, refusing one that is neither a field nor a declared extension. The refusal
/// happens while the key is read, so the error's path and position name the key itself.
struct KeySeed<'a> {
    fields: &'static [&'static str],
    extensions: &'a [&'a str],
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
        if let Some(i) = self.fields.iter().position(|f| *f == key) {
            return Ok(Key::Field(i));
        }
        if self.extensions.contains(&key) {
            return Ok(Key::Extension(key.to_owned()));
        }
        Err(E::custom(unknown_key(key, self.fields, self.extensions)))
    }
}

/// `unknown field `rnu`, did you mean `run`?`, or the list of every accepted key.
fn unknown_key(key: &str, fields: &[&str], extensions: &[&str]) -> String {
    let known = || fields.iter().chain(extensions).copied();
    match did_you_mean(key, known()) {
        Some(close) => format!("unknown field `{key}`, did you mean `{close}`?"),
        None => {
            let all: Vec<String> = known().map(|k| format!("`{k}`")).collect();
            format!("unknown field `{key}`, expected one of {}", all.join(", "))
        }
    }
}

/// Reads an extension value as raw JSON and records where it starts in `base`.
struct ExtensionSeed<'de> {
    base: &'de str,
}

impl<'de> DeserializeSeed<'de> for ExtensionSeed<'de> {
    type Value = ExtensionValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ExtensionValue, D::Error> {
        let raw = <&'de RawValue>::deserialize(d)?;
        let text = raw.get();
        let start = self.base.as_ptr() as usize;
        let at = text.as_ptr() as usize;
        let offset = (start..=start + self.base.len())
            .contains(&at)
            .then(|| at - start);
        ExtensionValue::from_document(text, offset).map_err(de::Error::custom)
    }
}

/// How a task's `spec` is read: [`Spec`]'s fields, refusing any other key, so a misspelt
/// `acceptance_criteria` is named instead of dropped without a word. (`Spec`'s own reader
/// is left as it is: other documents than plans carry specs.)
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecRepr {
    intent: String,
    #[serde(default)]
    acceptance_criteria: Vec<String>,
}

impl From<SpecRepr> for Spec {
    fn from(spec: SpecRepr) -> Self {
        let mut out = Spec::new(spec.intent);
        out.acceptance_criteria = spec.acceptance_criteria;
        out
    }
}

fn duplicate<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("duplicate field `{key}`"))
}

impl<'de> DeserializeSeed<'de> for PlanSeed<'_, 'de> {
    type Value = AppBuildPlan;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<AppBuildPlan, D::Error> {
        d.deserialize_struct("AppBuildPlan", PLAN_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for PlanSeed<'_, 'de> {
    type Value = AppBuildPlan;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a plan object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AppBuildPlan, A::Error> {
        let mut tasks = None;
        let mut extensions = BTreeMap::new();
        let keys = || KeySeed {
            fields: PLAN_FIELDS,
            extensions: self.extensions.plan_keys,
        };
        while let Some(key) = map.next_key_seed(keys())? {
            match key {
                Key::Field(_) => {
                    if tasks.is_some() {
                        return Err(duplicate("tasks"));
                    }
                    tasks = Some(map.next_value_seed(TasksSeed(TaskSeed {
                        keys: self.extensions.task_keys,
                        base: self.base,
                    }))?);
                }
                Key::Extension(key) => {
                    if extensions.contains_key(&key) {
                        return Err(duplicate(&key));
                    }
                    let value = map.next_value_seed(ExtensionSeed { base: self.base })?;
                    extensions.insert(key, value);
                }
            }
        }
        Ok(AppBuildPlan {
            tasks: tasks.ok_or_else(|| de::Error::missing_field("tasks"))?,
            extensions,
        })
    }
}

struct TasksSeed<'a, 'de>(TaskSeed<'a, 'de>);

impl<'de> DeserializeSeed<'de> for TasksSeed<'_, 'de> {
    type Value = Vec<PlannedTask>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<PlannedTask>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TasksSeed<'_, 'de> {
    type Value = Vec<PlannedTask>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of tasks")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<PlannedTask>, A::Error> {
        // Not sized by the hint: it comes from the document.
        let mut tasks = Vec::new();
        while let Some(task) = seq.next_element_seed(self.0)? {
            tasks.push(task);
        }
        Ok(tasks)
    }
}

impl<'de> DeserializeSeed<'de> for TaskSeed<'_, 'de> {
    type Value = PlannedTask;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PlannedTask, D::Error> {
        d.deserialize_struct("PlannedTask", TASK_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for TaskSeed<'_, 'de> {
    type Value = PlannedTask;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a task object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PlannedTask, A::Error> {
        let mut id = None;
        let mut kind = None;
        let mut owner = None;
        let mut spec = None;
        let mut owned_paths = None;
        let mut depends_on = None;
        let mut retry_limit = None;
        let mut input_contracts = None;
        let mut origin = None;
        let mut consolidated_from = None;
        let mut extensions = BTreeMap::new();
        // Each field once; a repeat is refused as serde's derived readers do.
        macro_rules! once {
            ($slot:ident) => {{
                if $slot.is_some() {
                    return Err(duplicate(stringify!($slot)));
                }
                $slot = Some(map.next_value()?);
            }};
        }
        let keys = || KeySeed {
            fields: TASK_FIELDS,
            extensions: self.keys,
        };
        while let Some(key) = map.next_key_seed(keys())? {
            match key {
                Key::Field(0) => once!(id),
                Key::Field(1) => once!(kind),
                Key::Field(2) => once!(owner),
                Key::Field(3) => {
                    if spec.is_some() {
                        return Err(duplicate("spec"));
                    }
                    spec = Some(Spec::from(map.next_value::<SpecRepr>()?));
                }
                Key::Field(4) => once!(owned_paths),
                Key::Field(5) => once!(depends_on),
                Key::Field(6) => once!(retry_limit),
                Key::Field(7) => once!(input_contracts),
                Key::Field(8) => once!(origin),
                Key::Field(_) => once!(consolidated_from),
                Key::Extension(key) => {
                    if extensions.contains_key(&key) {
                        return Err(duplicate(&key));
                    }
                    let value = map.next_value_seed(ExtensionSeed { base: self.base })?;
                    extensions.insert(key, value);
                }
            }
        }
        Ok(PlannedTask {
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            kind: kind.unwrap_or_default(),
            owner: owner.ok_or_else(|| de::Error::missing_field("owner"))?,
            spec: spec.ok_or_else(|| de::Error::missing_field("spec"))?,
            owned_paths: owned_paths.unwrap_or_default(),
            depends_on: depends_on.unwrap_or_default(),
            retry_limit: retry_limit.unwrap_or_else(default_retry_limit),
            input_contracts: input_contracts.unwrap_or_default(),
            origin: origin.unwrap_or_default(),
            consolidated_from: consolidated_from.unwrap_or_default(),
            extensions,
        })
    }
}

impl<'de> Deserialize<'de> for PlannedTask {
    /// Reads a task without extension keys: every key outside the format is refused.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        TaskSeed {
            keys: &[],
            base: "",
        }
        .deserialize(d)
    }
}

impl<'de> Deserialize<'de> for AppBuildPlan {
    /// Reads a plan without extension keys: every key outside the format is refused.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        PlanSeed {
            extensions: &Extensions::NONE,
            base: "",
        }
        .deserialize(d)
    }
}
