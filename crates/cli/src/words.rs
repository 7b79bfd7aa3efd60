//! Counts in words for messages: `1 trace`, `2 traces`, `0 traces`.

/// `n` and `noun`, the noun plural (`+s`) unless `n` is 1: `count(1, "trace")` is `1 trace`.
pub fn count(n: impl std::fmt::Display, noun: &str) -> String {
    let n = n.to_string();
    format!("{n} {}", noun_for(&n, noun))
}

/// `noun`, plural (`+s`) unless `n` is 1 (for a count formatted apart, e.g. padded).
/// Any integer type (`usize`, `u64`, ...): what is compared is how it is written.
pub fn noun_for(n: impl std::fmt::Display, noun: &str) -> String {
    match n.to_string().as_str() {
        "1" => noun.to_string(),
        _ => format!("{noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_zero_and_many_are_plural() {
        assert_eq!(count(1u64, "trace"), "1 trace");
        assert_eq!(count(0u64, "trace"), "0 traces");
        assert_eq!(count(2u32, "duplicate id"), "2 duplicate ids");
    }
}
