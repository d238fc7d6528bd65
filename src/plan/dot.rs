//! Graphviz DOT export of a validated plan.

use std::fmt::Write;

use super::model::TaskKind;
use super::validate::ValidatedPlan;

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
        let mut out = String::from(
            "digraph plan {\n  rankdir=LR;\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n",
        );
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
            let style = if task.is_synthesized() {
                ", style=\"filled,dashed\""
            } else {
                ""
            };
            // `\n` is DOT's line break inside a label; the parts themselves are escaped.
            let _ = writeln!(
                out,
                "  {} [label=\"{}\\n{}{}{marker}\", fillcolor=\"{}\"{style}];",
                quoted(task.id.as_str()),
                escaped(task.id.as_str()),
                task.kind.lane(),
                escaped(&module),
                colour(&task.kind),
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
