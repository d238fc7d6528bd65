//! petgraph holds the plan's graph inside `ValidatedPlan` but is no part of the public API:
//! no public signature in `src/` names a petgraph type.
//!
//! Guards the leak where `ValidatedPlan::graph()` returned petgraph's `DiGraph`, which tied
//! every user to petgraph's version. The check reads the source: every item declared `pub`
//! (not `pub(crate)`), the whole body of a public enum or trait (whose variants and methods
//! are public without saying so) and every `impl` header, and fails if one names
//! `petgraph::` or a name the file imports from petgraph. It is stricter than the API
//! itself, since a `pub` item of a private module that nothing re-exports also counts.

use std::path::{Path, PathBuf};

/// The names a file brings in with `use petgraph::…` (the last segment, or its alias).
fn petgraph_imports(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("use petgraph") {
        let tail = &rest[at..];
        let end = tail.find(';').unwrap_or(tail.len());
        let statement = &tail[..end];
        let inner = statement
            .rfind('{')
            .map_or(statement, |open| &statement[open + 1..]);
        for part in inner.split([',', '}', '{']) {
            let part = part.trim();
            let name = match part.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => part.rsplit("::").next().unwrap_or(part).trim(),
            };
            if !name.is_empty() && name != "self" && !name.starts_with("use ") {
                names.push(name.to_owned());
            }
        }
        rest = &tail[end..];
    }
    names
}

/// Whether `text` names `word` as a whole identifier.
fn names(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// The public declarations of `source`, without comments: each `pub` item up to its body
/// (all of it for an enum or a trait), and each `impl` header.
fn public_declarations(source: &str) -> Vec<String> {
    let code: Vec<&str> = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect();
    let code = code.join("\n");
    let mut found = Vec::new();
    let starts: Vec<usize> = code
        .match_indices("pub ")
        .map(|(i, _)| i)
        .chain(code.match_indices("impl").map(|(i, _)| i))
        .filter(|&i| {
            let before = code[..i].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .collect();
    for start in starts {
        let tail = &code[start..];
        if tail.starts_with("impl") && !tail[4..].starts_with([' ', '<']) {
            continue;
        }
        let whole_body = tail.starts_with("pub enum") || tail.starts_with("pub trait");
        let mut depth = 0usize;
        // Brackets of a signature, so a field ends at its own comma, not a generic's.
        let mut nesting = 0usize;
        let mut prev = ' ';
        let mut end = tail.len();
        for (i, c) in tail.char_indices() {
            let arrow = prev == '-' || prev == '=';
            prev = c;
            match c {
                '(' | '[' | '<' if !whole_body => nesting += 1,
                ')' | ']' if !whole_body => nesting = nesting.saturating_sub(1),
                '>' if !whole_body && !arrow => nesting = nesting.saturating_sub(1),
                ',' if !whole_body && nesting == 0 => {
                    end = i;
                    break;
                }
                '{' if !whole_body => {
                    end = i;
                    break;
                }
                '{' => depth += 1,
                '}' if whole_body => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        found.push(tail[..end].to_owned());
    }
    found
}

/// The public declarations of `source` that name a petgraph type.
fn leaks(source: &str) -> Vec<String> {
    let imported = petgraph_imports(source);
    public_declarations(source)
        .into_iter()
        .filter(|d| d.contains("petgraph") || imported.iter().any(|name| names(d, name)))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // The binary is not the library's API.
            if path.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_public_signature_names_a_petgraph_type() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 20, "found only {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for leak in leaks(&source) {
            found.push(format!("{}: {leak}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "petgraph in public signatures:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_finds_the_leaks_it_is_for() {
    let old = "use petgraph::Direction;\nuse petgraph::graph::{DiGraph, NodeIndex};\n\
               impl ValidatedPlan {\n    /// The graph.\n    \
               pub fn graph(&self) -> &DiGraph<(), (), u32> {\n        &self.graph\n    }\n}";
    assert_eq!(
        leaks(old),
        ["pub fn graph(&self) -> &DiGraph<(), (), u32> "]
    );
    let hidden = "use petgraph::graph::DiGraph;\npub struct P {\n    graph: DiGraph<(), ()>,\n}\n\
                  impl P {\n    pub(crate) fn graph(&self) -> &DiGraph<(), ()> { &self.graph }\n}";
    assert!(leaks(hidden).is_empty(), "{:?}", leaks(hidden));
    let variant = "use petgraph::graph::NodeIndex as Node;\npub enum E {\n    At(Node),\n}";
    assert_eq!(leaks(variant).len(), 1);
    let field = "pub struct S {\n    pub order: Vec<petgraph::graph::NodeIndex>,\n}";
    assert_eq!(leaks(field), ["pub order: Vec<petgraph::graph::NodeIndex>"]);
    let conversion = "use petgraph::graph::DiGraph;\nimpl From<DiGraph<(), ()>> for Plan {}";
    assert_eq!(leaks(conversion).len(), 1);
}

/// The names `src/lib.rs` puts at the crate root: its public modules and what it re-exports.
fn root_items(lib: &str) -> Vec<String> {
    let mut items = Vec::new();
    for line in lib.lines() {
        if let Some(module) = line.strip_prefix("pub mod ") {
            items.push(module.trim_end_matches(';').to_owned());
        } else if let Some(used) = line.strip_prefix("pub use ") {
            let used = used.trim_end_matches(';');
            let names = match used.split_once('{') {
                Some((_, list)) => list.trim_end_matches('}').to_owned(),
                None => used.rsplit("::").next().unwrap_or(used).to_owned(),
            };
            items.extend(
                names
                    .split(',')
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty()),
            );
        }
    }
    items
}

/// The crate root is the ten names a user meets first (a plan, an agent, its answers, the
/// batch that runs them, the error) plus the modules named for the concepts, not a flat list
/// of every type (it had ~140).
#[test]
fn the_crate_root_lists_at_most_ten_names_beside_its_modules() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let items = root_items(&lib);
    assert!(items.contains(&"Batch".to_owned()) && items.contains(&"plan".to_owned()));
    let modules = lib.lines().filter(|l| l.starts_with("pub mod ")).count();
    let names = items.len() - modules;
    assert!(names <= 10, "{names} root names: {items:?}");
    assert_eq!(
        root_items("pub use a::{B, C};\npub mod d;\npub use e::F;\n"),
        ["B", "C", "d", "F"]
    );
}
