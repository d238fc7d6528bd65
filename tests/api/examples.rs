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
