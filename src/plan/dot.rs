//! Graphviz DOT export of a validated plan, and of a run of it: each task filled by how it
//! ended.

use std::fmt::Write;

use super::model::TaskKind;
use super::validate::ValidatedPlan;
use crate::id::TaskId;

/// How a task of a run ended, for [`ValidatedPlan::to_dot_with_outcomes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// Its output was accepted.
    Accepted,
    /// It failed.
    Failed,
    /// A prerequisite failed, so it was never called.
    Drained,
    /// A call of it has not settled (running, or interrupted).
    InFlight,
    /// It has not been called yet.
    Pending,
}

impl NodeOutcome {
    /// The outcome in words, as the node's label and the legend say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Failed => "failed",
            Self::Drained => "drained",
            Self::InFlight => "in flight",
            Self::Pending => "pending",
        }
    }

    /// Fill colour: green, red, grey, amber, white; told apart without colour too, by the
    /// label and by the failed task's heavy border.
    fn fill(self) -> &'static str {
        match self {
            Self::Accepted => "#95d5b2",
            Self::Failed => "#ef476f",
            Self::Drained => "#ced4da",
            Self::InFlight => "#ffd166",
            Self::Pending => "#ffffff",
        }
    }

    const ALL: [Self; 5] = [
        Self::Accepted,
        Self::Failed,
        Self::Drained,
        Self::InFlight,
        Self::Pending,
    ];
}

/// What a run's graph asks of each task.
type StateOf<'a> = dyn Fn(&TaskId) -> Option<NodeState> + 'a;

/// One task's node in a run's graph: how it ended and a short note (its calls and fixes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// How it ended.
    pub outcome: NodeOutcome,
    /// A second line for its label (`2 calls, 1 fix`); empty for none.
    pub note: String,
}

/// Fill colour of each lane.
fn colour(kind: &TaskKind) -> &'static str {
    match kind {
        TaskKind::Module { .. } => "#f4d35e",
        TaskKind::Model { .. } => "#8ecae6",
        TaskKind::Persistence { .. } => "#b8c0ff",
        TaskKind::Service { .. } => "#95d5b2",
        TaskKind::Page { .. } => "#ffafcc",
        TaskKind::Config { .. } => "#d9d9d9",
        TaskKind::Auth { .. } => "#f4a261",
        TaskKind::General => "#ffffff",
    }
}

/// `s` escaped for a DOT string literal (`"` and `\`); ids carry no control characters.
fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A DOT string literal.
fn quoted(s: &str) -> String {
    format!("\"{}\"", escaped(s))
}

impl ValidatedPlan {
    /// The plan as a Graphviz DOT digraph: one node per task, filled by lane and labelled
    /// with its id, lane and module; synthesised tasks are dashed and marked
    /// `(synthesized)`; edges run from prerequisite to dependent. Render it with
    /// `dot -Tsvg plan.dot -o plan.svg`.
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::AppBuildPlan;
    ///
    /// let plan = AppBuildPlan::from_json(r#"{"tasks": [
    ///   {"id": "page_tasks", "kind": {"lane": "page", "module": "tasks"},
    ///    "owner": "PageAgent", "spec": {"intent": "task list page"}}
    /// ]}"#)?.validate()?;
    /// let dot = plan.to_dot();
    /// assert!(dot.starts_with("digraph plan {"));
    /// assert!(dot.contains(r#""module_tasks" -> "page_tasks";"#));
    /// assert!(dot.contains("style=\"filled,dashed\""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_dot(&self) -> String {
        self.dot(None)
    }

    /// The plan as [`to_dot`](Self::to_dot) draws it, each task filled by how it ended in a
    /// run instead of by lane (`state` says; a task it has no state for is drawn as
    /// pending) and labelled with the outcome and the state's note; a failed task also gets
    /// a heavy dark border. A comment at the top says what each fill means.
    ///
    /// # Examples
    ///
    /// ```
    /// use kleene::AppBuildPlan;
    /// use kleene::plan::{NodeOutcome, NodeState};
    ///
    /// let plan = AppBuildPlan::from_json(r#"{"tasks": [
    ///   {"id": "page_tasks", "kind": {"lane": "page", "module": "tasks"},
    ///    "owner": "PageAgent", "spec": {"intent": "task list page"}}
    /// ]}"#)?.validate()?;
    /// let dot = plan.to_dot_with_outcomes(|id| {
    ///     (id.as_str() == "page_tasks").then(|| NodeState {
    ///         outcome: NodeOutcome::Failed,
    ///         note: "1 call".to_owned(),
    ///     })
    /// });
    /// assert!(dot.contains(r#""page_tasks" [label="page_tasks\npage · tasks\nfailed · 1 call""#));
    /// assert!(dot.contains("penwidth=3"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_dot_with_outcomes(&self, state: impl Fn(&TaskId) -> Option<NodeState>) -> String {
        self.dot(Some(&state))
    }

    fn dot(&self, state: Option<&StateOf<'_>>) -> String {
        let mut out = String::from("digraph plan {\n");
        if state.is_some() {
            let legend: Vec<String> = NodeOutcome::ALL
                .iter()
                .map(|o| format!("{} {}", o.as_str(), o.fill()))
                .collect();
            let _ = writeln!(out, "  // fill: how each task ended: {}", legend.join(", "));
        }
        out.push_str("  rankdir=LR;\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n");
        // Writing to a String cannot fail.
        for task in self.tasks() {
            let module = task
                .kind
                .module()
                .map(|m| format!(" · {m}"))
                .unwrap_or_default();
            let marker = if task.is_synthesized() {
                "\\n(synthesized)"
            } else {
                ""
            };
            let mut style = if task.is_synthesized() {
                ", style=\"filled,dashed\"".to_owned()
            } else {
                String::new()
            };
            let (fill, ended) = match state {
                None => (colour(&task.kind), String::new()),
                Some(state) => {
                    let node = state(&task.id).unwrap_or(NodeState {
                        outcome: NodeOutcome::Pending,
                        note: String::new(),
                    });
                    if node.outcome == NodeOutcome::Failed {
                        style.push_str(", penwidth=3, color=\"#9d0208\"");
                    }
                    let note = if node.note.is_empty() {
                        String::new()
                    } else {
                        format!(" · {}", escaped(&node.note))
                    };
                    (
                        node.outcome.fill(),
                        format!("\\n{}{note}", node.outcome.as_str()),
                    )
                }
            };
            // `\n` is DOT's line break inside a label; the parts themselves are escaped.
            let _ = writeln!(
                out,
                "  {} [label=\"{}\\n{}{}{marker}{ended}\", fillcolor=\"{fill}\"{style}];",
                quoted(task.id.as_str()),
                escaped(task.id.as_str()),
                task.kind.lane(),
                escaped(&module),
            );
        }
        for task in self.tasks() {
            for pre in self.prerequisites(&task.id) {
                let _ = writeln!(
                    out,
                    "  {} -> {};",
                    quoted(pre.as_str()),
                    quoted(task.id.as_str())
                );
            }
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AppBuildPlan;

    fn plan() -> ValidatedPlan {
        AppBuildPlan::from_json(
            r#"{"tasks": [
              {"id": "m", "kind": {"lane": "module", "module": "app"}, "owner": "a",
               "spec": {"intent": "m"}},
              {"id": "svc", "kind": {"lane": "service", "module": "app"}, "owner": "a",
               "spec": {"intent": "s"}, "depends_on": ["m"]},
              {"id": "page", "kind": {"lane": "page", "module": "app"}, "owner": "a",
               "spec": {"intent": "p"}, "depends_on": ["svc"]}
            ]}"#,
        )
        .unwrap()
        .validate()
        .unwrap()
    }

    fn node<'d>(dot: &'d str, id: &str) -> &'d str {
        let start = format!("  \"{id}\" [");
        dot.lines().find(|l| l.starts_with(&start)).unwrap()
    }

    /// Each outcome has its own fill, the failed task a heavy border, and the label says
    /// the outcome in words with the note; a task without state is pending.
    #[test]
    fn a_run_colours_each_task_by_how_it_ended() {
        let dot = plan().to_dot_with_outcomes(|id| {
            let (outcome, note) = match id.as_str() {
                "m" => (NodeOutcome::Accepted, "1 call"),
                "svc" => (NodeOutcome::Failed, "2 calls, 1 fix"),
                _ => return None,
            };
            Some(NodeState {
                outcome,
                note: note.to_owned(),
            })
        });
        let (m, svc, page) = (node(&dot, "m"), node(&dot, "svc"), node(&dot, "page"));
        assert!(m.contains(r"\naccepted · 1 call"), "{m}");
        assert!(m.contains(NodeOutcome::Accepted.fill()) && !m.contains("penwidth"));
        assert!(svc.contains(r#"\nfailed · 2 calls, 1 fix""#), "{svc}");
        assert!(svc.contains(NodeOutcome::Failed.fill()) && svc.contains("penwidth=3"));
        assert!(page.contains(r#"\npending""#), "{page}");
        assert!(page.contains(NodeOutcome::Pending.fill()));
        let fills: std::collections::BTreeSet<_> =
            NodeOutcome::ALL.iter().map(|o| o.fill()).collect();
        assert_eq!(fills.len(), NodeOutcome::ALL.len());
        assert!(dot.starts_with("digraph plan {\n  // fill: how each task ended: accepted"));
        assert!(dot.contains("  \"svc\" -> \"page\";"));
    }

    /// The plain graph is drawn as before: filled by lane, no outcome anywhere.
    #[test]
    fn the_plain_graph_is_filled_by_lane() {
        let dot = plan().to_dot();
        assert!(dot.starts_with("digraph plan {\n  rankdir=LR;"));
        let svc = node(&dot, "svc");
        assert!(svc.contains(r#"label="svc\nservice · app""#), "{svc}");
        assert!(svc.contains("#95d5b2"));
        assert!(!dot.contains("pending") && !dot.contains("//"));
    }
}
