//! The text features of failure modes: words of a reason, TF-IDF vectors and the one clustering
//! rule ([`cluster`]). Deterministic: no randomness, ties broken by input order.

use std::collections::{BTreeMap, BTreeSet};

/// Words too common in failure reasons to tell modes apart.
const STOP_WORDS: &[&str] = &[
    "the",
    "and",
    "for",
    "that",
    "this",
    "with",
    "was",
    "were",
    "are",
    "its",
    "it's",
    "has",
    "have",
    "had",
    "not",
    "but",
    "from",
    "which",
    "when",
    "what",
    "who",
    "into",
    "than",
    "then",
    "there",
    "their",
    "they",
    "them",
    "been",
    "being",
    "would",
    "could",
    "should",
    "does",
    "did",
    "doing",
    "because",
    "about",
    "also",
    "only",
    "more",
    "most",
    "such",
    "some",
    "any",
    "all",
    "each",
    "other",
    "out",
    "over",
    "under",
    "very",
    "can",
    "will",
    "just",
    "our",
    "your",
    "his",
    "her",
    "step",
    "steps",
    "agent",
    "agents",
    "trace",
    "failure",
    "failed",
    "fail",
    "error",
    "responsible",
    "decisive",
    "answer",
    "the",
    "one",
    "first",
    "made",
    "make",
    "where",
    "while",
    "these",
    "those",
];

/// The words of a reason: lower case, letters and digits, three characters or more, no stop
/// words, none of `ignore` (agent names: the agent is already part of a mode's key), with a
/// light suffix rule (`-ing`, `-ed`, plural `-s`) so "searching"/"searched"/"searches" meet.
pub fn words(text: &str, ignore: &BTreeSet<String>) -> Vec<String> {
    surface_words(text)
        .map(|w| stem(&w))
        .filter(|w| !ignore.contains(w))
        .collect()
}

/// The words of a text before the suffix rule (lower case, no stop words or numbers).
fn surface_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
}

/// For each stem in `texts`, the word that most often produced it (ties: the shorter, then the
/// first alphabetically): what a mode's label shows instead of the stem.
pub fn surface_forms<'t>(texts: impl Iterator<Item = &'t str>) -> BTreeMap<String, String> {
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for text in texts {
        for w in surface_words(text) {
            *counts.entry(stem(&w)).or_default().entry(w).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter_map(|(stem, forms)| {
            let best = forms.into_iter().max_by(|(a, x), (b, y)| {
                x.cmp(y)
                    .then_with(|| b.len().cmp(&a.len()))
                    .then_with(|| b.cmp(a))
            })?;
            Some((stem, best.0))
        })
        .collect()
}

/// Suffixes that lose two letters: "-ed", and "-es" after s, ch, sh, x, z.
const TWO_LETTER_SUFFIXES: &[&str] = &["ed", "sses", "ches", "shes", "xes", "zes"];

fn stem(word: &str) -> String {
    let n = word.chars().count();
    let ends = |suffix: &str| word.ends_with(suffix);
    let cut = if n >= 6 && ends("ing") {
        3
    } else if n >= 5 && ends("ies") {
        return format!("{}y", &word[..word.len() - 3]);
    } else if n >= 5 && TWO_LETTER_SUFFIXES.iter().any(|s| ends(s)) {
        2
    } else if n >= 4 && ends("s") && !["ss", "us", "is"].iter().any(|s| ends(s)) {
        1
    } else {
        0
    };
    let mut stem = word[..word.len() - cut].to_string();
    // "dropped" and "dropping" -> "drop", not "dropp".
    let bytes = stem.as_bytes();
    if (cut == 2 && word.ends_with("ed") || cut == 3)
        && bytes.len() >= 4
        && bytes[bytes.len() - 1] == bytes[bytes.len() - 2]
        && !b"lsz".contains(&bytes[bytes.len() - 1])
        && bytes[bytes.len() - 1].is_ascii_alphabetic()
    {
        stem.pop();
    }
    stem
}

/// A sparse vector over words, unit length (or empty).
pub type Vector = BTreeMap<String, f64>;

/// TF-IDF vectors of documents (each a word list), normalized to unit length; idf is
/// `ln((1 + N) / (1 + df)) + 1`, the smoothed form.
pub fn tfidf(docs: &[Vec<String>]) -> Vec<Vector> {
    let mut df: BTreeMap<&str, usize> = BTreeMap::new();
    for doc in docs {
        for w in doc.iter().map(String::as_str).collect::<BTreeSet<_>>() {
            *df.entry(w).or_default() += 1;
        }
    }
    let n = docs.len() as f64;
    docs.iter()
        .map(|doc| {
            let mut v = Vector::new();
            for w in doc {
                *v.entry(w.clone()).or_default() += 1.0;
            }
            for (w, x) in v.iter_mut() {
                let d = df.get(w.as_str()).copied().unwrap_or(0) as f64;
                *x *= ((1.0 + n) / (1.0 + d)).ln() + 1.0;
            }
            normalize(v)
        })
        .collect()
}

fn normalize(mut v: Vector) -> Vector {
    let norm = v.values().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.values_mut().for_each(|x| *x /= norm);
    }
    v
}

/// Cosine of two unit vectors.
pub fn cosine(a: &Vector, b: &Vector) -> f64 {
    let (small, big) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    small
        .iter()
        .filter_map(|(w, x)| big.get(w).map(|y| x * y))
        .sum()
}

/// Groups of vectors whose cosine to their group's centroid is at least `threshold`: leader
/// clustering in input order (each vector joins the most similar centroid at or above the
/// threshold, else starts a group), then one pass that moves each vector to its most similar
/// final centroid. Empty vectors (reasons without words) form one group of their own. Returns
/// the member indices of each group, groups in order of their first member.
pub fn cluster(vectors: &[Vector], threshold: f64) -> Vec<Vec<usize>> {
    let mut centroids: Vec<Vector> = Vec::new();
    let mut sums: Vec<Vector> = Vec::new();
    let mut empty = Vec::new();
    for v in vectors {
        if v.is_empty() {
            continue;
        }
        match best(&centroids, v, threshold) {
            Some(g) => {
                add(&mut sums[g], v);
                centroids[g] = normalize(sums[g].clone());
            }
            None => {
                sums.push(v.clone());
                centroids.push(v.clone());
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); centroids.len()];
    for (i, v) in vectors.iter().enumerate() {
        if v.is_empty() {
            empty.push(i);
        } else {
            // Every vector started or joined a group above the threshold with itself in it, so a
            // best centroid exists; fall back to the most similar one regardless.
            let g = best(&centroids, v, threshold)
                .or_else(|| best(&centroids, v, f64::NEG_INFINITY))
                .unwrap_or(0);
            if let Some(members) = groups.get_mut(g) {
                members.push(i);
            }
        }
    }
    groups.retain(|g| !g.is_empty());
    if !empty.is_empty() {
        groups.push(empty);
    }
    groups.sort_by_key(|g| g[0]);
    groups
}

fn best(centroids: &[Vector], v: &Vector, threshold: f64) -> Option<usize> {
    let mut found: Option<(usize, f64)> = None;
    for (g, c) in centroids.iter().enumerate() {
        let s = cosine(c, v);
        if s >= threshold && found.is_none_or(|(_, b)| s > b) {
            found = Some((g, s));
        }
    }
    found.map(|(g, _)| g)
}

fn add(sum: &mut Vector, v: &Vector) {
    for (w, x) in v {
        *sum.entry(w.clone()).or_default() += x;
    }
}

/// The `n` heaviest words of the summed vectors of `members` (ties by word), the group's label.
pub fn top_words(vectors: &[Vector], members: &[usize], n: usize) -> Vec<String> {
    let mut sum = Vector::new();
    for &i in members {
        if let Some(v) = vectors.get(i) {
            add(&mut sum, v);
        }
    }
    let mut ranked: Vec<(String, f64)> = sum.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.into_iter().take(n).map(|(w, _)| w).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(s: &str) -> Vec<String> {
        words(s, &BTreeSet::new())
    }

    #[test]
    fn words_drop_stop_words_names_and_numbers_and_share_stems() {
        let ignore = BTreeSet::from(["websurfer".to_string()]);
        assert_eq!(
            words(
                "The WebSurfer searched 3 pages for the wrong year, searching 2019",
                &ignore
            ),
            vec!["search", "page", "wrong", "year", "search"]
        );
        assert_eq!(doc("studies cases"), vec!["study", "case"]);
        assert_eq!(doc("class status"), vec!["class", "status"]);
        assert_eq!(doc("dropped dropping called"), vec!["drop", "drop", "call"]);
        assert_eq!(doc("analysis"), vec!["analysis"]);
        // Agent names are ignored as stems: "PythonDebugging_Expert" covers "debugging".
        let names: BTreeSet<String> = words("PythonDebugging_Expert", &BTreeSet::new())
            .into_iter()
            .collect();
        assert_eq!(
            words("the pythondebugging expert's fix", &names),
            vec!["fix"]
        );
        let forms = surface_forms(["provided providing", "provided"].into_iter());
        assert_eq!(forms.get("provid").map(String::as_str), Some("provided"));
    }

    #[test]
    fn similar_reasons_cluster_and_different_ones_do_not() {
        let docs: Vec<Vec<String>> = [
            "wrong unit conversion of miles to kilometres",
            "hallucinated a citation that does not exist",
            "unit conversion wrong: miles into kilometres",
            "",
            "hallucinated citation for the claim",
        ]
        .iter()
        .map(|s| doc(s))
        .collect();
        let v = tfidf(&docs);
        assert!(cosine(&v[0], &v[2]) > 0.5);
        assert!(cosine(&v[0], &v[1]) < 0.01);
        assert_eq!(cluster(&v, 0.3), vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(top_words(&v, &[0, 2], 2), vec!["conversion", "kilometre"]);
        // A threshold above any cosine keeps reasons apart, but identical ones (0 and 2 have the
        // same words) still meet in the reassignment pass.
        assert_eq!(
            cluster(&v, 1.01),
            vec![vec![0, 2], vec![1], vec![3], vec![4]]
        );
    }
}
