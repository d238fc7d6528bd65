//! Proptest strategies for plans and paths, so users can property-test their own plan
//! producers and path handling against kleene's rules.
//!
//! ```
//! use kleene::testing::plan::{acyclic_plan, hostile_path};
//! use kleene::plan::AdmittedPath;
//! use proptest::prelude::*;
//! use proptest::test_runner::TestRunner;
//!
//! let mut runner = TestRunner::default();
//! runner.run(&acyclic_plan(12), |plan| {
//!     prop_assert!(plan.validate().is_ok());
//!     Ok(())
//! })?;
//! runner.run(&hostile_path(), |raw| {
//!     prop_assert!(AdmittedPath::admit(&raw).is_err());
//!     Ok(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every generated plan has unique ids that never start with `module_` (so they cannot
//! collide with synthesised module lanes), and paths owned by different tasks never overlap.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::sample::Index;

use crate::{
    closure::task::Spec, id::AgentId, id::TaskId, plan::AppBuildPlan, plan::ContractKind,
    plan::InputContract, plan::ModuleName, plan::PlannedTask, plan::TaskKind,
    plan::path::AdmittedPath,
};

/// Module names the plan generators draw from.
const MODULES: [&str; 4] = ["tasks", "billing", "users", "reports"];

/// File extensions of ordinary project files.
const EXTENSIONS: [&str; 9] = [
    "", ".py", ".ts", ".tsx", ".rs", ".md", ".json", ".yaml", ".sql",
];

/// A plain name: a lowercase letter, then up to eight letters, digits, `_` or `-`, never
/// one of the secret-like stems.
fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,8}".prop_filter("not a secret-like stem", |n| {
        !["secret", "id_rsa", "credentials"]
            .iter()
            .any(|s| n.starts_with(s))
    })
}

fn file_name() -> impl Strategy<Value = String> {
    (name(), proptest::sample::select(&EXTENSIONS[..])).prop_map(|(n, e)| format!("{n}{e}"))
}

/// Ordinary project paths (`backend/models/task.py`, `README.md`): one to four
/// components of plain names, the last with a common extension. Admission accepts them all.
pub fn ordinary_path() -> impl Strategy<Value = String> {
    (proptest::collection::vec(name(), 0..4), file_name()).prop_map(|(dirs, file)| {
        let mut parts = dirs;
        parts.push(file);
        parts.join("/")
    })
}

/// Hostile paths, each with the [`PathError::rule`](crate::plan::path::PathError::rule) that must refuse
/// it: traversal in its spellings (`..`, `a/../..`, trailing `/..`), non-normal forms (`./a`,
/// `a//b`, `a/`), absolute (`/a`, `//server/a`, `~/a`), drive and stream prefixes (`C:`,
/// `C:/`, `a:b`), UNC and backslash separators (`\\server\a`, `a\..\b`), glob
/// metacharacters, NUL and other control characters, secret-like names (`.env*`, `*.pem`,
/// `*.key`, `id_rsa*`, `credentials*`, `secrets/…`, `secrets.*` outside the one manifest
/// path), the empty string and over-long paths.
///
/// Each string has exactly one defect set into an otherwise ordinary path, so the expected
/// rule is determined.
pub fn hostile_path_with_rule() -> impl Strategy<Value = (String, &'static str)> {
    let base = || ordinary_path();
    let at = |parts: Vec<String>, i: Index, insert: &str| {
        let mut parts = parts;
        let k = i.index(parts.len() + 1);
        parts.insert(k, insert.to_owned());
        parts.join("/")
    };
    let split = |p: String| -> Vec<String> { p.split('/').map(str::to_owned).collect() };
    prop_oneof![
        // Traversal: `..` as any component.
        (base(), any::<Index>()).prop_map(move |(p, i)| (at(split(p), i, ".."), "traversal")),
        Just(("a/../..".to_owned(), "traversal")),
        Just(("..".to_owned(), "traversal")),
        // Not normalised: `.` or an empty component anywhere, or a trailing slash.
        (base(), any::<Index>()).prop_map(move |(p, i)| (at(split(p), i, "."), "not_normalised")),
        // An empty component after the first (a leading one would make the path absolute).
        (base(), any::<Index>()).prop_map(move |(p, i)| {
            let mut parts = split(p);
            let k = 1 + i.index(parts.len());
            parts.insert(k, String::new());
            (parts.join("/"), "not_normalised")
        }),
        base().prop_map(|p| (format!("{p}/"), "not_normalised")),
        // Absolute and home-relative.
        (
            base(),
            proptest::sample::select(&["/", "//server/", "~/", "~"][..])
        )
            .prop_map(|(p, pre)| (format!("{pre}{p}"), "absolute")),
        // Drive and stream prefixes.
        (
            base(),
            "[A-Za-z]",
            proptest::sample::select(&[":", ":/"][..])
        )
            .prop_map(|(p, d, sep)| (format!("{d}{sep}{p}"), "drive_or_stream")),
        (base(), name()).prop_map(|(p, s)| (format!("{p}:{s}"), "drive_or_stream")),
        // UNC and backslash separators.
        (base(), name())
            .prop_map(|(p, s)| (format!("\\\\{s}\\{}", p.replace('/', "\\")), "backslash")),
        (name(), name()).prop_map(|(a, b)| (format!("{a}\\..\\{b}"), "backslash")),
        (name(), name()).prop_map(|(a, b)| (format!("{a}\\{b}"), "backslash")),
        // Globs.
        (
            base(),
            any::<Index>(),
            proptest::sample::select(&['*', '?', '[', ']', '{', '}'][..])
        )
            .prop_map(|(p, i, g)| {
                let mut p = p;
                let k = i.index(p.len() + 1);
                p.insert(k, g);
                (p, "glob")
            }),
        // NUL and other control characters (C0, DEL and C1).
        (
            base(),
            any::<Index>(),
            prop_oneof![0u32..0x20, Just(0x7f), 0x80u32..0xa0]
        )
            .prop_map(|(p, i, c)| {
                let mut p = p;
                let k = i.index(p.len() + 1);
                p.insert(k, char::from_u32(c).unwrap_or('\0'));
                (p, "control_character")
            }),
        // Secret-like names under ordinary directories.
        (
            proptest::collection::vec(name(), 0..3),
            prop_oneof![
                name().prop_map(|n| format!(".env.{n}")),
                Just(".env".to_owned()),
                Just(".ENV.local".to_owned()),
                name().prop_map(|n| format!("{n}.pem")),
                name().prop_map(|n| format!("{n}.key")),
                name().prop_map(|n| format!("{n}.KEY")),
                name().prop_map(|n| format!("id_rsa{n}")),
                Just("id_rsa.pub".to_owned()),
                name().prop_map(|n| format!("credentials{n}.json")),
                name().prop_map(|n| format!("secrets/{n}.txt")),
                Just("secrets.yml".to_owned()),
                Just("Secret.json".to_owned()),
            ]
        )
            .prop_map(|(dirs, secret)| {
                let mut parts = dirs;
                parts.push(secret);
                (parts.join("/"), "secret_like")
            }),
        Just(("config/secrets.yaml".to_owned(), "secret_like")),
        Just(("security/secrets.yaml/x".to_owned(), "secret_like")),
        Just(("./security/secrets.yaml".to_owned(), "not_normalised")),
        Just(("security/../security/secrets.yaml".to_owned(), "traversal")),
        Just((String::new(), "empty")),
        Just(("a/".repeat(600), "too_long")),
        Just(("a".repeat(crate::plan::path::MAX_PATH_LEN + 1), "too_long")),
    ]
}

/// Hostile paths (see [`hostile_path_with_rule`]): admission refuses every one.
pub fn hostile_path() -> impl Strategy<Value = String> {
    hostile_path_with_rule().prop_map(|(p, _)| p)
}

/// What one generated task looks like before ids and edges are resolved.
#[derive(Debug, Clone)]
struct Draft {
    lane: u8,
    module: usize,
    layer: u8,
    deps: Vec<Index>,
    files: Vec<String>,
    retry_limit: u32,
}

fn draft() -> impl Strategy<Value = Draft> {
    (
        0u8..8,
        0..MODULES.len(),
        0u8..5,
        proptest::collection::vec(any::<Index>(), 0..4),
        proptest::collection::vec(file_name(), 0..3),
        0u32..6,
    )
        .prop_map(|(lane, module, layer, deps, files, retry_limit)| Draft {
            lane,
            module,
            layer,
            deps,
            files,
            retry_limit,
        })
}

fn module_name(k: usize) -> Option<ModuleName> {
    ModuleName::new(MODULES[k % MODULES.len()]).ok()
}

/// Builds tasks from drafts, ordered so that every edge (explicit and normalised) goes
/// forward: module lanes first, then persistence, models, services and pages; config and
/// auth and general tasks at their drawn layer. Persistence tasks depend only on first-layer tasks, so merging
/// two of them can never close a loop.
///
/// Returns the tasks in that order (not shuffled yet).
fn build(drafts: &[Draft], provide_lanes: &[bool]) -> Vec<PlannedTask> {
    let mut provided = [false; MODULES.len()];
    let mut staged: Vec<(u8, usize, TaskKind)> = Vec::with_capacity(drafts.len());
    for (i, d) in drafts.iter().enumerate() {
        let Some(module) = module_name(d.module) else {
            continue;
        };
        let (layer, kind) = match d.lane {
            0 if provide_lanes.get(d.module).copied().unwrap_or(true) && !provided[d.module] => {
                provided[d.module] = true;
                (0, TaskKind::Module { module })
            }
            0 | 1 => (1, TaskKind::Persistence { module }),
            2 => (2, TaskKind::Model { module }),
            3 => (3, TaskKind::Service { module }),
            4 => (3, TaskKind::Page { module }),
            5 => match d.layer {
                0 => (0, TaskKind::Config { module: None }),
                l => (
                    l,
                    TaskKind::Config {
                        module: Some(module),
                    },
                ),
            },
            7 => (d.layer, TaskKind::General),
            _ => match d.layer {
                0 => (0, TaskKind::Auth { module: None }),
                l => (
                    l,
                    TaskKind::Auth {
                        module: Some(module),
                    },
                ),
            },
        };
        staged.push((layer, i, kind));
    }
    staged.sort_by_key(|(layer, i, _)| (*layer, *i));
    let Ok(ids) = staged
        .iter()
        .map(|(_, i, kind)| TaskId::new(format!("t{i}_{}", kind.lane())))
        .collect::<Result<Vec<TaskId>, _>>()
    else {
        return Vec::new();
    };
    let mut tasks = Vec::with_capacity(staged.len());
    for (p, ((_, i, kind), id)) in staged.iter().zip(&ids).enumerate() {
        let d = &drafts[*i];
        let candidates: Vec<&TaskId> = match kind {
            // Module lanes depend only on module lanes, persistence only on the first layer.
            TaskKind::Module { .. } => staged[..p]
                .iter()
                .zip(&ids)
                .filter(|((_, _, k), _)| matches!(k, TaskKind::Module { .. }))
                .map(|(_, id)| id)
                .collect(),
            TaskKind::Persistence { .. } => staged[..p]
                .iter()
                .zip(&ids)
                .filter(|((l, _, _), _)| *l == 0)
                .map(|(_, id)| id)
                .collect(),
            _ => ids[..p].iter().collect(),
        };
        let mut task = PlannedTask::new(
            id.clone(),
            kind.clone(),
            agent(kind.lane()),
            Spec::new(format!("{} work of task {i}", kind.lane())),
        );
        task.retry_limit = d.retry_limit;
        if !candidates.is_empty() {
            task.depends_on = d
                .deps
                .iter()
                .map(|x| x.get(&candidates))
                .map(|&t| t.clone())
                .collect();
        }
        let files: BTreeSet<&String> = d.files.iter().collect();
        task.owned_paths = files
            .into_iter()
            .filter_map(|f| AdmittedPath::admit(&format!("{id}/{f}")).ok())
            .collect();
        tasks.push(task);
    }
    tasks
}

fn agent(lane: &str) -> AgentId {
    // Lanes are the crate's own short names, so the id is always valid.
    #[allow(clippy::expect_used)]
    AgentId::new(format!("{lane}_agent")).expect("lane agent ids are valid")
}

/// Plans of up to `max_tasks` tasks whose DAG stays acyclic through normalisation and
/// consolidation, in shuffled order. Some modules have a module lane, others are only
/// referenced (so normalisation synthesises their lane); some modules have several
/// persistence tasks (so consolidation merges them). `AppBuildPlan::validate` accepts every
/// one.
pub fn acyclic_plan(max_tasks: usize) -> impl Strategy<Value = AppBuildPlan> {
    (
        proptest::collection::vec(draft(), 1..=max_tasks.max(1)),
        proptest::collection::vec(any::<bool>(), MODULES.len()),
    )
        .prop_map(|(drafts, lanes)| build(&drafts, &lanes))
        .prop_shuffle()
        .prop_map(AppBuildPlan::new)
}

/// Plans like [`acyclic_plan`] in which at least one referenced module has no module lane,
/// with the names of the modules that lack one.
pub fn plan_with_missing_module_lanes(
    max_tasks: usize,
) -> impl Strategy<Value = (AppBuildPlan, BTreeSet<ModuleName>)> {
    (
        proptest::collection::vec(draft(), 1..=max_tasks.max(1)),
        proptest::collection::vec(any::<bool>(), MODULES.len()),
        0..MODULES.len(),
        1u8..4,
    )
        .prop_map(|(mut drafts, mut lanes, missing, lane)| {
            lanes[missing] = false;
            // Make sure the missing module is referenced by at least one task.
            drafts.push(Draft {
                lane: lane + 1,
                module: missing,
                layer: 1,
                deps: Vec::new(),
                files: Vec::new(),
                retry_limit: 3,
            });
            build(&drafts, &lanes)
        })
        .prop_shuffle()
        .prop_map(|tasks| {
            let provided: BTreeSet<&ModuleName> =
                tasks.iter().filter_map(|t| t.kind.provides()).collect();
            let missing: BTreeSet<ModuleName> = tasks
                .iter()
                .filter_map(|t| t.kind.module())
                .filter(|m| !provided.contains(m))
                .cloned()
                .collect();
            (AppBuildPlan::new(tasks), missing)
        })
}

/// An [`acyclic_plan`] with a cycle injected: two to five new config tasks `cycle_0 …`
/// that depend on each other in a ring, wired into the plan so that the ring is the plan's
/// only cycle (ring tasks depend only on tasks before a chosen point of the plan's order,
/// and only tasks after it depend on the ring). Returns the plan and the ring in dependency
/// order (each a prerequisite of the next, the last of the first), starting at `cycle_0`.
pub fn plan_with_injected_cycle(
    max_tasks: usize,
) -> impl Strategy<Value = (AppBuildPlan, Vec<TaskId>)> {
    (
        proptest::collection::vec(draft(), 0..=max_tasks),
        proptest::collection::vec(any::<bool>(), MODULES.len()),
        2usize..=5,
        any::<Index>(),
        proptest::collection::vec(any::<Index>(), 0..4),
        proptest::collection::vec(any::<Index>(), 0..4),
    )
        .prop_map(|(drafts, lanes, len, cut, ins, outs)| {
            let mut tasks = build(&drafts, &lanes);
            let ring: Vec<TaskId> = (0..len)
                .filter_map(|k| TaskId::new(format!("cycle_{k}")).ok())
                .collect();
            let cut = cut.index(tasks.len() + 1);
            let mut ring_tasks: Vec<PlannedTask> = ring
                .iter()
                .enumerate()
                .map(|(k, id)| {
                    let mut t = PlannedTask::new(
                        id.clone(),
                        TaskKind::Config { module: None },
                        agent("config"),
                        Spec::new("ring"),
                    );
                    t.depends_on
                        .push(ring[(k + ring.len() - 1) % ring.len()].clone());
                    t
                })
                .collect();
            if cut > 0 {
                let len = ring_tasks.len();
                for (n, i) in ins.iter().enumerate() {
                    let from = tasks[i.index(cut)].id.clone();
                    let k = n % len;
                    ring_tasks[k].depends_on.push(from);
                }
            }
            if cut < tasks.len() {
                for (n, i) in outs.iter().enumerate() {
                    let k = cut + i.index(tasks.len() - cut);
                    tasks[k].depends_on.push(ring[n % ring.len()].clone());
                }
            }
            tasks.extend(ring_tasks);
            (tasks, ring)
        })
        .prop_flat_map(|(tasks, ring)| (Just(tasks).prop_shuffle(), Just(ring)))
        .prop_map(|(tasks, ring)| (AppBuildPlan::new(tasks), ring))
}

/// Arbitrary plans, valid or not: ids drawn from a small pool (so duplicates happen),
/// dependencies on known, unknown and own ids, any lane and module, several module lanes for
/// one module, overlapping and nested paths (including the secrets manifest), and input
/// contracts from anywhere. For "validation never panics" properties.
pub fn arbitrary_plan(max_tasks: usize) -> impl Strategy<Value = AppBuildPlan> {
    const IDS: [&str; 9] = [
        "a",
        "b",
        "c",
        "d",
        "e",
        "module_tasks",
        "module_users",
        "ghost",
        "z",
    ];
    const PATHS: [&str; 6] = [
        "a",
        "a/b",
        "a/b/c.py",
        "b.py",
        "security/secrets.yaml",
        "x/y",
    ];
    let task = (
        proptest::sample::select(&IDS[..]),
        0u8..8,
        0..MODULES.len(),
        any::<bool>(),
        proptest::collection::vec(proptest::sample::select(&IDS[..]), 0..4),
        proptest::collection::vec(proptest::sample::select(&PATHS[..]), 0..3),
        proptest::collection::vec((proptest::sample::select(&IDS[..]), 0u8..3), 0..2),
        any::<u32>(),
    )
        .prop_filter_map(
            "valid names",
            |(id, lane, module, tied, deps, paths, contracts, retry_limit)| {
                let module = ModuleName::new(MODULES[module]).ok()?;
                let tied = tied.then(|| module.clone());
                let kind = match lane {
                    0 => TaskKind::Module { module },
                    1 => TaskKind::Model { module },
                    2 => TaskKind::Persistence { module },
                    3 => TaskKind::Service { module },
                    4 => TaskKind::Page { module },
                    5 => TaskKind::Config { module: tied },
                    6 => TaskKind::Auth { module: tied },
                    _ => TaskKind::General,
                };
                let mut t =
                    PlannedTask::new(TaskId::new(id).ok()?, kind, agent("any"), Spec::new(id));
                t.depends_on = deps
                    .into_iter()
                    .filter_map(|d| TaskId::new(d).ok())
                    .collect();
                t.owned_paths = paths
                    .into_iter()
                    .filter_map(|p| AdmittedPath::admit(p).ok())
                    .collect();
                t.input_contracts = contracts
                    .into_iter()
                    .filter_map(|(from, c)| {
                        Some(InputContract {
                            from: TaskId::new(from).ok()?,
                            contract: match c {
                                0 => ContractKind::Module,
                                1 => ContractKind::Persistence,
                                _ => ContractKind::Schemas,
                            },
                        })
                    })
                    .collect();
                t.retry_limit = retry_limit;
                Some(t)
            },
        );
    proptest::collection::vec(task, 0..=max_tasks).prop_map(AppBuildPlan::new)
}
