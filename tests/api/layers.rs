//! The library's modules in layers: every `crate::…` path in the library's own code points
//! down a layer, so the import graph between its top-level modules has no cycle.
//!
//! The layers are ARCHITECTURE.md's, bottom-up. A module may use any module in a lower
//! layer and none in its own or a higher one; tests inside a module (`#[cfg(test)] mod`)
//! may reach anywhere, since nothing ships them. A module that is in no layer fails the test,
//! so a new one has to be placed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom-up: a module may use only modules of a lower layer.
const LAYERS: &[&[&str]] = &[
    // Ground: how foreign text is shown, durable file replacement, keys and envelopes.
    &["text", "fs", "signing"],
    // Ids, digests and the one canonical encoding.
    &["id"],
    // The versioned record machinery every persisted type's records build on.
    &["wire"],
    // The checkpoint envelope.
    &["checkpoint"],
    // One task's typed loop and its bounded recovery (tasks, verdicts, phases, audit).
    &["closure"],
    // The approved plan and admitted paths; running a command.
    &["plan", "process"],
    // A call's staged workspace.
    &["stage"],
    // Running a plan: machine, drivers, journal, evidence.
    &["batch"],
    // The projection of a build's files.
    &["snapshot"],
    // Acceptance records, export, signatures.
    &["acceptance"],
    // Shell-task plans, over everything below.
    &["shell"],
    // One error type over every module's, the test kit, and the project's documents.
    &["error", "testing", "documentation"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The library's source files with the top-level module each belongs to.
fn library_files() -> Vec<(String, PathBuf)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(&src).unwrap().to_path_buf();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let top = top.trim_end_matches(".rs").to_owned();
            if top == "bin" || top == "lib" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push((top, path));
            }
        }
    }
    files.sort();
    files
}

/// The code of a source file without its comments and its test modules.
fn shipped_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let test_gate =
            trimmed.starts_with("#[cfg(test)]") || trimmed.starts_with("#[cfg(all(test");
        if test_gate
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            // Skip the module: count braces from its opening line to the one that closes it.
            let mut depth = 0i64;
            let mut opened = false;
            for line in lines.by_ref() {
                for c in line.chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if opened && depth == 0 {
                    break;
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The top-level modules a piece of code names through `crate::`, including each first name
/// of a `crate::{a::…, b}` group.
fn crate_modules(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Only the group's first level: `crate::{a::{b, c}, d}` names a and d.
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 0 => {
                        found.insert(ident(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

/// Module → the modules it uses, with the files that use each.
fn import_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> {
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>> = BTreeMap::new();
    for (module, path) in library_files() {
        let code = shipped_code(&fs::read_to_string(&path).unwrap());
        let uses = graph.entry(module.clone()).or_default();
        for used in crate_modules(&code) {
            if used != module {
                uses.entry(used).or_default().insert(path.clone());
            }
        }
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        for w in s.graph.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.stack.contains(&w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn every_module_uses_only_lower_layers() {
    let graph = import_graph();
    let mut wrong = Vec::new();
    for (module, uses) in &graph {
        let Some(own) = layer_of(module) else {
            wrong.push(format!("`{module}` is in no layer: place it in LAYERS"));
            continue;
        };
        for (used, files) in uses {
            match layer_of(used) {
                Some(layer) if layer < own => {}
                _ => wrong.push(format!(
                    "`{module}` uses `{used}`, which is not below it, in {}",
                    files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
    }
    let found = cycles(&graph);
    println!(
        "{} modules, {} import edges, {} cycle(s) between modules",
        graph.len(),
        graph.values().map(BTreeMap::len).sum::<usize>(),
        found.len()
    );
    for cycle in &found {
        println!("cycle: {}", cycle.join(" ⇄ "));
    }
    assert!(
        wrong.is_empty(),
        "imports that run up:\n{}",
        wrong.join("\n")
    );
    assert!(found.is_empty(), "cycles: {found:?}");
}

/// The checks above read what they are meant to: a use through a group, a test module
/// skipped, a comment ignored.
#[test]
fn the_reader_sees_groups_and_skips_tests_and_comments() {
    let code = "use crate::{id::TaskId, plan::{self, path}, text};\n\
                // crate::acceptance in a comment\n\
                fn f() { crate::closure::run(); }\n\
                #[cfg(test)]\nmod tests {\n    use crate::batch::Batch;\n    fn g() {}\n}\n\
                fn h() { crate::stage::x(); }\n";
    let names = crate_modules(&shipped_code(code));
    let names: Vec<_> = names.iter().map(String::as_str).collect();
    assert_eq!(names, ["closure", "id", "plan", "stage", "text"]);
}
