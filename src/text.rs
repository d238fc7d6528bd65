//! How kleene shows text that came from outside the crate, and errors with their causes.
//!
//! Every module's messages quote foreign text the same way, so a path or a name can never
//! be made to read as part of the message around it:
//!
//! ```text
//! refused path "../etc/passwd": it leaves the project
//! ```

use std::fmt;

/// An error and every cause behind it, printed on one line: the error's message, then each
/// [`source`](std::error::Error::source) after a `": "`.
///
/// kleene's messages read after "failed to …" and never repeat their cause, so the chain
/// reads as one sentence:
///
/// ```
/// use kleene::error::Chain;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("read the plan file")]
/// struct ReadPlan(#[source] std::io::Error);
///
/// let err = ReadPlan(std::io::Error::other("disk on fire"));
/// assert_eq!(Chain(&err).to_string(), "read the plan file: disk on fire");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(err) = cause {
            write!(f, ": {err}")?;
            cause = err.source();
        }
        Ok(())
    }
}

/// A text from outside the crate (a path as given, an entry name, a payload type) shown in
/// double quotes, with quotes, backslashes and every character that is not printable
/// (control characters, bidirectional overrides) escaped, so a message can never be made to
/// read as something else. It prints what `{:?}` prints for a `str`, on purpose and in
/// writing, rather than through a `Debug` implementation that is free to change.
pub(crate) struct Quoted<'a>(pub(crate) &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            // A single quote needs no escape inside double quotes.
            if c == '\'' {
                f.write_str("'")?;
            } else {
                write!(f, "{}", c.escape_debug())?;
            }
        }
        f.write_str("\"")
    }
}

/// A character from outside the crate in single quotes, escaped like [`Quoted`].
pub(crate) struct QuotedChar(pub(crate) char);

/// `text` as [`Quoted`] shows it.
pub(crate) fn quoted(text: &(impl AsRef<str> + ?Sized)) -> Quoted<'_> {
    Quoted(text.as_ref())
}

/// `c` as [`QuotedChar`] shows it.
pub(crate) fn quoted_char(c: &char) -> QuotedChar {
    QuotedChar(*c)
}

impl fmt::Display for QuotedChar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == '"' {
            f.write_str("'\"'")
        } else {
            write!(f, "'{}'", self.0.escape_debug())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The quoting is exactly what `{:?}` gives for every text, so messages that used it
        /// read as before.
        #[test]
        fn quoting_matches_the_debug_form(text in any::<String>(), c in any::<char>()) {
            prop_assert_eq!(Quoted(&text).to_string(), format!("{text:?}"));
            prop_assert_eq!(QuotedChar(c).to_string(), format!("{c:?}"));
        }
    }

    #[test]
    fn chain_joins_every_cause() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Middle);
        #[derive(Debug, thiserror::Error)]
        #[error("middle")]
        struct Middle(#[source] std::io::Error);
        let err = Outer(Middle(std::io::Error::other("inner")));
        assert_eq!(Chain(&err).to_string(), "outer: middle: inner");
    }
}
