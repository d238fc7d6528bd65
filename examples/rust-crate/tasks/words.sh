#!/bin/sh
# Service lane: word counting and its tests. The first draft splits on single spaces, so
# runs of whitespace count as empty words; `cargo test` catches it.
set -eu
cat > src/words.rs <<'END'
//! Words: runs of characters between whitespace.

/// How many words `text` holds.
pub fn count(text: &str) -> usize {
    text.split(' ').count()
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_word() {
        assert_eq!(count("tally"), 1);
    }

    #[test]
    fn runs_of_whitespace_separate_two_words() {
        assert_eq!(count("two  words "), 2);
    }
}
END
