//! The paper's fixed answer rule (section 5.1): the prediction is the **first standalone option
//! letter** in the model output; when none is found the prediction is invalid and counts as wrong.
//!
//! "Standalone" means the letter is not part of a longer word: the characters on both sides are
//! not letters or digits. Upper-case letters always count. Lower-case letters count only when they
//! are marked as an option (`(b)`, `b)`, `answer: b`, `answer is b`, `option b`), because a bare
//! lower-case `a` is almost always the English article. Letters outside the task's option range
//! (e.g. `E` on a 4-option question) are skipped, not taken.

/// Option letters for `n` options (`n` is clamped to 1..=26).
pub fn option_letters(n: usize) -> Vec<char> {
    (0..n.clamp(1, 26))
        .map(|i| (b'A' + i as u8) as char)
        .collect()
}

/// Extract the predicted option letter (upper case) from `text` for a question with `n_options`
/// options, or `None` when the output holds no valid option letter.
pub fn extract_choice(text: &str, n_options: usize) -> Option<char> {
    let valid = option_letters(n_options);
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphabetic() {
            continue;
        }
        let prev = if i == 0 { None } else { Some(chars[i - 1]) };
        let next = chars.get(i + 1).copied();
        if prev.is_some_and(|p| p.is_alphanumeric()) || next.is_some_and(|n| n.is_alphanumeric()) {
            continue;
        }
        let upper = c.to_ascii_uppercase();
        if !valid.contains(&upper) {
            continue;
        }
        if c.is_ascii_uppercase() || lowercase_marked(&chars, i) {
            return Some(upper);
        }
    }
    None
}

/// Whether the lower-case letter at `i` is marked as an option.
fn lowercase_marked(chars: &[char], i: usize) -> bool {
    let prev = if i == 0 { None } else { Some(chars[i - 1]) };
    let next = chars.get(i + 1).copied();
    if prev == Some('(') || next == Some(')') {
        return true;
    }
    // Look back over spaces and a colon for "answer", "answer is", "option".
    let before: String = chars[..i].iter().collect::<String>().to_lowercase();
    let trimmed = before.trim_end().trim_end_matches(':').trim_end();
    trimmed.ends_with("answer") || trimmed.ends_with("answer is") || trimmed.ends_with("option")
}

/// Whether a raw output is correct under the answer rule (invalid = wrong).
pub fn is_correct(text: &str, n_options: usize, gold: char) -> bool {
    extract_choice(text, n_options) == Some(gold.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_cases_from_the_issue() {
        assert_eq!(extract_choice("A) 42", 4), Some('A'));
        assert_eq!(extract_choice("I pick (b) because", 4), Some('B'));
        assert_eq!(extract_choice("Answer: C.", 4), Some('C'));
        assert_eq!(extract_choice("answer: d", 4), Some('D'));
        assert_eq!(extract_choice("the answer is c", 4), Some('C'));
        assert_eq!(extract_choice("I do not know", 4), None);
        assert_eq!(extract_choice("", 4), None);
    }

    #[test]
    fn first_standalone_wins_and_words_do_not_count() {
        // "Because", "CD" and "Bob" contain letters but are not standalone tokens.
        assert_eq!(
            extract_choice("Because CD-ROMs, Bob said B then C", 4),
            Some('B')
        );
        assert_eq!(extract_choice("B or C", 4), Some('B'));
        // A lower-case article is not an option.
        assert_eq!(extract_choice("a guess would be D", 4), Some('D'));
        // Letters beyond the option range are skipped.
        assert_eq!(extract_choice("E is tempting but D", 4), Some('D'));
        assert_eq!(extract_choice("E is tempting but D", 5), Some('E'));
        // Digits adjacent make it part of a token.
        assert_eq!(extract_choice("A1 B2", 4), None);
        assert_eq!(extract_choice("**B**", 4), Some('B'));
    }

    #[test]
    fn correctness_counts_invalid_as_wrong() {
        assert!(is_correct("Answer: B", 4, 'B'));
        assert!(is_correct("Answer: B", 4, 'b'));
        assert!(!is_correct("no idea", 4, 'B'));
        assert!(!is_correct("C", 4, 'B'));
    }
}
