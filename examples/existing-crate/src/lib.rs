//! Small statistics over a slice of numbers.

/// The arithmetic mean of `xs`, or `None` for no numbers.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    Some(xs.iter().sum::<f64>() / (xs.len() - 1) as f64)
}

/// The largest of `xs`, or `None` for no numbers.
pub fn max(xs: &[f64]) -> Option<f64> {
    xs.iter().copied().reduce(f64::max)
}
