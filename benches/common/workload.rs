//! The generated plan both plan benches use.

use kleene::{
    AppBuildPlan,
    closure::Spec,
    id::{AgentId, TaskId},
    plan::{AdmittedPath, ModuleName, PlannedTask, TaskKind},
};

/// Tasks per module: a module lane (for every other module), two persistence tasks (merged
/// by consolidation), four models, four services, three pages, a config and an auth task.
const MODULE_SHAPE: [&str; 16] = [
    "module",
    "persistence",
    "persistence",
    "model",
    "model",
    "model",
    "model",
    "service",
    "service",
    "service",
    "service",
    "page",
    "page",
    "page",
    "config",
    "auth",
];

/// A small deterministic generator (xorshift64*), so every run benches the same plan.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

/// A plan of about `tasks` tasks: half the modules have no module lane (normalisation
/// synthesises them), every persistence pair is merged, and each service, page, config and
/// auth task has explicit edges to earlier work (other modules' services and models), so
/// that explicit plus normalised edges come to about three per task.
pub fn generate(tasks: usize) -> AppBuildPlan {
    let modules = tasks / MODULE_SHAPE.len();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let agent = AgentId::new("Agent").unwrap();
    let mut out = Vec::with_capacity(tasks);
    for m in 0..modules {
        let module = ModuleName::new(format!("m{m}")).unwrap();
        for (k, lane) in MODULE_SHAPE.iter().enumerate() {
            if *lane == "module" && m % 2 == 1 {
                continue;
            }
            let kind = match *lane {
                "module" => TaskKind::Module {
                    module: module.clone(),
                },
                "persistence" => TaskKind::Persistence {
                    module: module.clone(),
                },
                "model" => TaskKind::Model {
                    module: module.clone(),
                },
                "service" => TaskKind::Service {
                    module: module.clone(),
                },
                "page" => TaskKind::Page {
                    module: module.clone(),
                },
                "config" => TaskKind::Config {
                    module: Some(module.clone()),
                },
                _ => TaskKind::Auth {
                    module: Some(module.clone()),
                },
            };
            let id = TaskId::new(format!("m{m}_{lane}_{k}")).unwrap();
            let mut task = PlannedTask::new(id, kind, agent.clone(), Spec::new(*lane));
            task.owned_paths
                .push(AdmittedPath::admit(&format!("app/m{m}/{lane}_{k}.py")).unwrap());
            if m > 0 && matches!(*lane, "service" | "page" | "config" | "auth") {
                // Depend on models and services of earlier modules: forward edges only.
                for _ in 0..2 {
                    let other = rng.below(m);
                    let target = if rng.below(2) == 0 { 3 } else { 7 };
                    let pick = target + rng.below(4);
                    let dep = format!("m{other}_{}_{pick}", MODULE_SHAPE[pick]);
                    task.depends_on.push(TaskId::new(dep).unwrap());
                }
            }
            out.push(task);
        }
    }
    // Input order carries no meaning; reverse it so nothing benefits from it.
    out.reverse();
    AppBuildPlan::new(out)
}
