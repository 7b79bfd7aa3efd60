//! Small, allocation-light text helpers used by the feature extractor: word hashing, number
//! extraction and vocabulary counting. Everything is lower-cased ASCII-insensitive matching;
//! non-ASCII text is kept as is (it simply matches no English vocabulary).

/// FNV-1a 64-bit hash (stable across platforms and Rust versions, unlike `DefaultHasher`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Continue an FNV-1a hash with more bytes.
pub fn fnv1a_extend(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Hashes of the lower-cased alphanumeric words of `text`, in order.
pub fn word_hashes(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut len = 0usize;
    for c in text.chars() {
        if c.is_alphanumeric() {
            for lc in c.to_lowercase() {
                let mut buf = [0u8; 4];
                h = fnv1a_extend(h, lc.encode_utf8(&mut buf).as_bytes());
            }
            len += 1;
        } else if len > 0 {
            out.push(h);
            h = 0xcbf2_9ce4_8422_2325;
            len = 0;
        }
    }
    if len > 0 {
        out.push(h);
    }
    out
}

/// Hashes of the lower-cased alphanumeric words of `text` that are at least `min_len`
/// characters long and not pure digits ("content words").
pub fn content_word_hashes(text: &str, min_len: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<u64>| {
        if word.chars().count() >= min_len && !word.chars().all(|c| c.is_ascii_digit()) {
            out.push(fnv1a(word.as_bytes()));
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else {
            flush(&mut word, &mut out);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Numbers written in `text` with at least two significant characters (`42`, `3.14`,
/// `1,200` -> `1200`), hashed. Single digits are skipped: they are mostly list markers.
pub fn number_hashes(text: &str) -> Vec<u64> {
    number_strings(text)
        .iter()
        .map(|n| fnv1a(n.as_bytes()))
        .collect()
}

/// The numbers of [`number_hashes`] as written (thousands separators dropped), in order.
pub fn number_strings(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphabetic()) {
            let mut num: Vec<u8> = Vec::new();
            let mut j = i;
            while j < bytes.len() {
                let b = bytes[j];
                if b.is_ascii_digit() {
                    num.push(b);
                    j += 1;
                } else if (b == b',' || b == b'.')
                    && j + 1 < bytes.len()
                    && bytes[j + 1].is_ascii_digit()
                {
                    if b == b'.' {
                        num.push(b);
                    }
                    j += 1;
                } else {
                    break;
                }
            }
            let followed_by_letter = j < bytes.len() && bytes[j].is_ascii_alphabetic();
            if num.len() >= 2 && !followed_by_letter {
                // ASCII digits and dots only.
                out.push(String::from_utf8_lossy(&num).into_owned());
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Several fixed vocabularies matched at word starts in lower-cased text in one pass; terms are
/// bucketed by first byte so each word start checks only the terms that can begin there.
pub struct TermSet {
    buckets: Vec<Vec<(&'static [u8], usize)>>,
    groups: usize,
}

impl TermSet {
    /// One group of terms per vocabulary; [`TermSet::count`] returns one count per group.
    pub fn new(groups: &[&[&'static str]]) -> TermSet {
        let mut buckets: Vec<Vec<(&'static [u8], usize)>> = vec![Vec::new(); 256];
        for (g, terms) in groups.iter().enumerate() {
            for t in *terms {
                if let Some(b) = t.as_bytes().first() {
                    buckets[usize::from(*b)].push((t.as_bytes(), g));
                }
            }
        }
        TermSet {
            buckets,
            groups: groups.len(),
        }
    }

    /// Occurrences of each group's terms in `lower` (already lower-cased), each counted where
    /// it starts a word, so `fail` matches `failed` but not `unfailing`.
    pub fn count(&self, lower: &str) -> Vec<usize> {
        let bytes = lower.as_bytes();
        let mut n = vec![0; self.groups];
        let mut prev_alnum = false;
        for (i, &b) in bytes.iter().enumerate() {
            if !prev_alnum {
                for (term, g) in &self.buckets[usize::from(b)] {
                    if bytes[i..].starts_with(term) {
                        n[*g] += 1;
                    }
                }
            }
            prev_alnum = b.is_ascii_alphanumeric();
        }
        n
    }
}

/// Number of occurrences of any of `terms` in `lower` (see [`TermSet::count`]).
pub fn count_terms(lower: &str, terms: &[&'static str]) -> usize {
    TermSet::new(&[terms]).count(lower)[0]
}

/// A hasher for keys that are already hashes (u64 from [`fnv1a`]): passes them through.
#[derive(Default, Clone, Copy)]
pub struct PassThroughHasher(u64);

impl std::hash::Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = fnv1a_extend(self.0, bytes);
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A set of hashes.
pub type HashSet64 =
    std::collections::HashSet<u64, std::hash::BuildHasherDefault<PassThroughHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_case_insensitive_and_split_on_punctuation() {
        let a = word_hashes("Hello, World!");
        let b = word_hashes("hello world");
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert!(word_hashes("  ,;  ").is_empty());
    }

    #[test]
    fn content_words_skip_short_words_and_digits() {
        assert_eq!(content_word_hashes("a an the 2024 river", 4).len(), 1);
    }

    #[test]
    fn numbers_need_two_characters_and_ignore_thousands_separators() {
        assert_eq!(number_hashes("step 1 of 3").len(), 0);
        assert_eq!(number_hashes("1,200"), number_hashes("1200"));
        assert_eq!(number_hashes("pi is 3.14 and e 2.71").len(), 2);
        // identifiers such as `gpt4o` or `h2o` are not numbers
        assert_eq!(number_hashes("x2 gpt4o 15th").len(), 0);
    }

    #[test]
    fn terms_match_at_word_starts_only() {
        assert_eq!(count_terms("it failed; failure", &["fail"]), 2);
        assert_eq!(count_terms("unfailing", &["fail"]), 0);
        assert_eq!(count_terms("", &["fail"]), 0);
    }
}
