//! Promises the examples make about themselves.

/// `examples/tokio_minimal.rs` answers "a tokio user in 30 lines": it stays within 30 lines,
/// `use` lines, comments and blank lines included. CI's `cargo fmt --check` keeps the count
/// honest (the file is rustfmt's layout, not squeezed by hand), and CI runs the example.
#[test]
fn the_minimal_tokio_example_stays_within_30_lines() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tokio_minimal.rs");
    let source = std::fs::read_to_string(path).unwrap();
    let lines = source.lines().count();
    assert!(
        lines <= 30,
        "examples/tokio_minimal.rs has {lines} lines, more than 30"
    );
}

/// The kleene names a source file meets: every type, trait, function or constant it reaches
/// through a `kleene::` path (a `use` tree or a path in the code), modules aside. A glob
/// would hide them, so it is refused.
fn kleene_names(source: &str) -> std::collections::BTreeSet<String> {
    fn tree(text: &str, names: &mut std::collections::BTreeSet<String>) {
        // Split `a, b::{c, d}, e` at the commas outside braces.
        let (mut depth, mut start) = (0, 0);
        let mut parts = Vec::new();
        for (i, ch) in text.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&text[start..]);
        for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            assert!(
                !part.contains('*'),
                "a glob import hides the names it brings: {part}"
            );
            match part.find('{') {
                Some(open) => tree(&part[open + 1..part.rfind('}').unwrap()], names),
                None => path(part, names),
            }
        }
    }
    fn path(text: &str, names: &mut std::collections::BTreeSet<String>) {
        let segments: Vec<&str> = text.split("::").map(str::trim).collect();
        // The first segment that is not a module (modules are lower-case and followed by
        // more), or a lower-case last segment: a free function.
        let name = segments
            .iter()
            .find(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
            .or(segments.last())
            .unwrap();
        names.insert(name.split_whitespace().next().unwrap().to_owned());
    }
    let mut names = std::collections::BTreeSet::new();
    for (at, _) in source.match_indices("kleene::") {
        let rest = &source[at + "kleene::".len()..];
        if let Some(braced) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = braced
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .unwrap()
                .0;
            tree(&braced[..end], &mut names);
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            path(rest[..end].trim_end_matches(':'), &mut names);
        }
    }
    names
}

/// A program that runs a plan whose tasks have fixes, and accepts the result, meets at most
/// ten kleene names, sync or async; each example lists the ones it meets, and CI runs both.
#[test]
fn a_plan_with_fixes_meets_at_most_ten_kleene_names() {
    for example in ["minimal", "tokio_minimal"] {
        let path = format!("{}/examples/{example}.rs", env!("CARGO_MANIFEST_DIR"));
        let names = kleene_names(&std::fs::read_to_string(&path).unwrap());
        assert!(
            names.len() <= 10,
            "{example} meets {} names: {names:?}",
            names.len()
        );
        assert!(
            names.contains("Batch") && names.contains("Verdict"),
            "{names:?}"
        );
    }
    // The counter itself: a use tree, nested braces, an inline path and a free function.
    let counted = kleene_names(
        "use kleene::{A, b::{C, d::E}};\nlet x = kleene::f::G::new();\nkleene::acceptance::accept(x);",
    );
    assert_eq!(
        counted.into_iter().collect::<Vec<_>>(),
        ["A", "C", "E", "G", "accept"]
    );
}
