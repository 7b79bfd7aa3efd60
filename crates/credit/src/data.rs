//! Multiple-choice tasks: MMLU CSV, AQuA-RAT JSON lines, a generic MCQ JSONL, and deterministic
//! optimization / held-out splits.
//!
//! Loaders never panic on bad input: a record that cannot be read becomes a [`LoadProblem`]
//! naming the file, the record (line) and the field, and loading goes on with the next record.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One multiple-choice question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mcq {
    /// Stable id, e.g. `mmlu/anatomy_test/12` or `aqua/test/3`.
    pub id: String,
    pub question: String,
    /// Option texts in order (A, B, C, ...), without the letter prefix.
    pub options: Vec<String>,
    /// Gold option letter (upper case).
    pub answer: char,
    /// Subject / category when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl Mcq {
    /// Option lines as shown to models: `A) text`.
    pub fn options_block(&self) -> String {
        self.options
            .iter()
            .enumerate()
            .map(|(i, o)| format!("{}) {}", (b'A' + i as u8) as char, o))
            .collect::<Vec<_>>()
            .join("\n")
    }
    /// Index of the gold answer.
    pub fn answer_index(&self) -> usize {
        (self.answer as u8).saturating_sub(b'A') as usize
    }
}

/// A record that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadProblem {
    pub file: String,
    /// 1-based line / record number.
    pub record: usize,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for LoadProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: record {}: field {}: {}",
            self.file, self.record, self.field, self.message
        )
    }
}

/// Questions loaded plus the records that were skipped.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub items: Vec<Mcq>,
    pub problems: Vec<LoadProblem>,
}

/// Errors that stop loading altogether (the path itself is unreadable or unknown).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("unknown dataset spec {0:?}: use mmlu:PATH, aqua:PATH or jsonl:PATH")]
    Spec(String),
    #[error("{0}: no questions found")]
    Empty(String),
}

/// Dataset kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetKind {
    Mmlu,
    Aqua,
    Jsonl,
}

/// Load a dataset from `kind:PATH` (or a bare path: `.csv` files and folders are MMLU, `.json`
/// files with an `options` list are AQuA, anything else generic JSONL).
pub fn load_spec(spec: &str) -> Result<Loaded, DataError> {
    let (kind, path) = match spec.split_once(':') {
        Some(("mmlu", p)) => (DatasetKind::Mmlu, p),
        Some(("aqua", p)) => (DatasetKind::Aqua, p),
        Some(("jsonl", p)) => (DatasetKind::Jsonl, p),
        _ => {
            let p = Path::new(spec);
            if p.is_dir() || spec.ends_with(".csv") {
                (DatasetKind::Mmlu, spec)
            } else if spec.ends_with(".json") {
                (DatasetKind::Aqua, spec)
            } else if spec.ends_with(".jsonl") {
                (DatasetKind::Jsonl, spec)
            } else {
                return Err(DataError::Spec(spec.to_string()));
            }
        }
    };
    let loaded = load(kind, Path::new(path))?;
    if loaded.items.is_empty() {
        return Err(DataError::Empty(path.to_string()));
    }
    Ok(loaded)
}

/// Load a dataset of the given kind from a file or (MMLU) a folder of CSVs.
pub fn load(kind: DatasetKind, path: &Path) -> Result<Loaded, DataError> {
    match kind {
        DatasetKind::Mmlu => load_mmlu(path),
        DatasetKind::Aqua => load_aqua(path),
        DatasetKind::Jsonl => load_jsonl(path),
    }
}

fn read(path: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// MMLU CSV: no header; `question,A,B,C,D,answer`. A folder loads every `*.csv` in name order.
pub fn load_mmlu(path: &Path) -> Result<Loaded, DataError> {
    let mut files: Vec<PathBuf> = Vec::new();
    if path.is_dir() {
        let rd = std::fs::read_dir(path).map_err(|source| DataError::Io {
            path: path.display().to_string(),
            source,
        })?;
        for entry in rd.flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "csv") {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut out = Loaded::default();
    for file in files {
        let text = read(&file)?;
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let subject = stem
            .trim_end_matches("_test")
            .trim_end_matches("_dev")
            .trim_end_matches("_val")
            .to_string();
        let fname = file.display().to_string();
        for (n, rec) in parse_csv(&text).into_iter().enumerate() {
            let record = n + 1;
            let rec = match rec {
                Ok(r) => r,
                Err(message) => {
                    out.problems.push(LoadProblem {
                        file: fname.clone(),
                        record,
                        field: "csv".into(),
                        message,
                    });
                    continue;
                }
            };
            if rec.len() != 6 {
                out.problems.push(LoadProblem {
                    file: fname.clone(),
                    record,
                    field: "columns".into(),
                    message: format!(
                        "expected 6 columns (question,A,B,C,D,answer), found {}",
                        rec.len()
                    ),
                });
                continue;
            }
            let ans = rec[5].trim().to_ascii_uppercase();
            let answer = match ans.chars().next() {
                Some(c @ 'A'..='D') if ans.len() == 1 => c,
                _ => {
                    out.problems.push(LoadProblem {
                        file: fname.clone(),
                        record,
                        field: "answer".into(),
                        message: format!("expected one of A-D, found {:?}", rec[5]),
                    });
                    continue;
                }
            };
            out.items.push(Mcq {
                id: format!("mmlu/{stem}/{record}"),
                question: rec[0].clone(),
                options: rec[1..5].to_vec(),
                answer,
                subject: Some(subject.clone()),
            });
        }
    }
    Ok(out)
}

/// Parse RFC 4180 CSV (quoted fields, doubled quotes, newlines inside quotes). One entry per
/// record; an unterminated quote is an error for that (last) record.
pub fn parse_csv(text: &str) -> Vec<Result<Vec<String>, String>> {
    let mut records = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut chars = text.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        any = true;
        if in_quotes {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    in_quotes = false;
                }
            } else {
                field.push(c);
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => in_quotes = true,
            ',' => fields.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                fields.push(std::mem::take(&mut field));
                let rec = std::mem::take(&mut fields);
                if !(rec.len() == 1 && rec[0].is_empty()) {
                    records.push(Ok(rec));
                }
                any = false;
            }
            _ => field.push(c),
        }
    }
    if in_quotes {
        records.push(Err("unterminated quoted field at end of file".to_string()));
    } else if any {
        fields.push(field);
        if !(fields.len() == 1 && fields[0].is_empty()) {
            records.push(Ok(fields));
        }
    }
    records
}

fn strip_letter_prefix(option: &str, letter: char) -> String {
    let t = option.trim_start();
    let mut cs = t.chars();
    if cs.next().map(|c| c.to_ascii_uppercase()) == Some(letter) {
        let rest = cs.as_str();
        if let Some(r) = rest
            .strip_prefix(')')
            .or_else(|| rest.strip_prefix('.'))
            .or_else(|| rest.strip_prefix(':'))
        {
            return r.trim().to_string();
        }
    }
    t.trim().to_string()
}

/// Parse each non-blank line of a JSON-lines file with `parse(record, value)`. A line that is not
/// JSON, or that `parse` rejects with `(field, message)`, becomes a [`LoadProblem`] naming the file,
/// the 1-based line and the field; loading goes on with the next line.
fn load_json_lines(
    path: &Path,
    mut parse: impl FnMut(usize, &serde_json::Value) -> Result<Mcq, (&'static str, String)>,
) -> Result<Loaded, DataError> {
    let text = read(path)?;
    let fname = path.display().to_string();
    let mut out = Loaded::default();
    for (n, line) in text.lines().enumerate() {
        let record = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<serde_json::Value>(line)
            .map_err(|e| ("json", e.to_string()))
            .and_then(|v| parse(record, &v));
        match parsed {
            Ok(item) => out.items.push(item),
            Err((field, message)) => out.problems.push(LoadProblem {
                file: fname.clone(),
                record,
                field: field.into(),
                message,
            }),
        }
    }
    Ok(out)
}

/// AQuA-RAT JSON lines: `{"question", "options": ["A)..", ..., "E).."], "correct": "A"}`.
pub fn load_aqua(path: &Path) -> Result<Loaded, DataError> {
    let split = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    load_json_lines(path, |record, v| {
        let Some(question) = v.get("question").and_then(|q| q.as_str()) else {
            return Err(("question", "missing or not a string".into()));
        };
        let Some(opts) = v.get("options").and_then(|o| o.as_array()) else {
            return Err(("options", "missing or not a list".into()));
        };
        let mut options = Vec::new();
        let mut bad = false;
        for (i, o) in opts.iter().enumerate() {
            match o.as_str() {
                Some(s) => options.push(strip_letter_prefix(s, (b'A' + i as u8) as char)),
                None => bad = true,
            }
        }
        if bad || options.len() < 2 || options.len() > 26 {
            return Err((
                "options",
                format!("expected 2-26 strings, found {}", opts.len()),
            ));
        }
        let correct = v
            .get("correct")
            .and_then(|c| c.as_str())
            .unwrap_or("")
            .trim()
            .to_ascii_uppercase();
        let answer = match correct.chars().next() {
            Some(c)
                if correct.len() == 1
                    && c.is_ascii_uppercase()
                    && ((c as u8 - b'A') as usize) < options.len() =>
            {
                c
            }
            _ => {
                return Err((
                    "correct",
                    format!("expected an option letter, found {correct:?}"),
                ))
            }
        };
        Ok(Mcq {
            id: format!("aqua/{split}/{record}"),
            question: question.to_string(),
            options,
            answer,
            subject: None,
        })
    })
}

/// Generic MCQ JSONL: `{"id"?, "question", "options": [..] | {"A": .., ...}, "answer": "B" | 1, "subject"?}`.
pub fn load_jsonl(path: &Path) -> Result<Loaded, DataError> {
    load_json_lines(path, |record, v| {
        let Some(question) = v.get("question").and_then(|q| q.as_str()) else {
            return Err(("question", "missing or not a string".into()));
        };
        let options: Option<Vec<String>> = match v.get("options") {
            Some(serde_json::Value::Array(a)) => {
                a.iter().map(|o| o.as_str().map(str::to_string)).collect()
            }
            Some(serde_json::Value::Object(m)) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                keys.iter()
                    .map(|k| m.get(*k).and_then(|o| o.as_str()).map(str::to_string))
                    .collect()
            }
            _ => None,
        };
        let Some(options) = options.filter(|o| (2..=26).contains(&o.len())) else {
            return Err((
                "options",
                "expected a list or letter-keyed map of 2-26 strings".into(),
            ));
        };
        let answer = match v.get("answer") {
            Some(serde_json::Value::String(s)) => {
                let s = s.trim().to_ascii_uppercase();
                s.chars()
                    .next()
                    .filter(|c| s.len() == 1 && c.is_ascii_uppercase())
            }
            Some(serde_json::Value::Number(n)) => n
                .as_u64()
                .and_then(|i| (i < 26).then(|| (b'A' + i as u8) as char)),
            _ => None,
        };
        let Some(answer) = answer.filter(|c| ((*c as u8 - b'A') as usize) < options.len()) else {
            return Err((
                "answer",
                "expected an option letter or a 0-based index within the options".into(),
            ));
        };
        let id = v
            .get("id")
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| i.to_string())
            })
            .unwrap_or_else(|| format!("jsonl/{record}"));
        let subject = v
            .get("subject")
            .and_then(|s| s.as_str())
            .map(str::to_string);
        Ok(Mcq {
            id,
            question: question.to_string(),
            options,
            answer,
            subject,
        })
    })
}

/// A deterministic optimization / held-out split.
#[derive(Debug, Clone, Default)]
pub struct Split {
    pub optimization: Vec<Mcq>,
    pub test: Vec<Mcq>,
}

/// Shuffle with `seed` (ChaCha8) and take `opt_size` questions for optimization and the next
/// `test_size` (all the rest when `None`) for the disjoint held-out test set.
pub fn split(items: &[Mcq], opt_size: usize, test_size: Option<usize>, seed: u64) -> Split {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    idx.shuffle(&mut rng);
    let opt_n = opt_size.min(idx.len());
    let rest = &idx[opt_n..];
    let test_n = test_size.unwrap_or(rest.len()).min(rest.len());
    Split {
        optimization: idx[..opt_n].iter().map(|&i| items[i].clone()).collect(),
        test: rest[..test_n].iter().map(|&i| items[i].clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_and_newlines() {
        let recs = parse_csv("\"a, b\",c\n\"he said \"\"x\"\"\",\"multi\nline\"\nlast,row");
        assert_eq!(recs.len(), 3);
        assert_eq!(
            recs[0].as_ref().unwrap(),
            &vec!["a, b".to_string(), "c".into()]
        );
        assert_eq!(
            recs[1].as_ref().unwrap(),
            &vec!["he said \"x\"".to_string(), "multi\nline".into()]
        );
        assert_eq!(
            recs[2].as_ref().unwrap(),
            &vec!["last".to_string(), "row".into()]
        );
        assert!(parse_csv("\"open").last().unwrap().is_err());
    }

    #[test]
    fn split_is_deterministic_and_disjoint() {
        let items: Vec<Mcq> = (0..50)
            .map(|i| Mcq {
                id: format!("q{i}"),
                question: "q".into(),
                options: vec!["x".into(), "y".into()],
                answer: 'A',
                subject: None,
            })
            .collect();
        let a = split(&items, 10, Some(20), 7);
        let b = split(&items, 10, Some(20), 7);
        let c = split(&items, 10, Some(20), 8);
        assert_eq!(a.optimization, b.optimization);
        assert_eq!(a.test, b.test);
        assert_ne!(a.optimization, c.optimization);
        assert_eq!(a.optimization.len(), 10);
        assert_eq!(a.test.len(), 20);
        for q in &a.test {
            assert!(!a.optimization.iter().any(|o| o.id == q.id));
        }
        assert_eq!(split(&items, 45, None, 1).test.len(), 5);
    }

    #[test]
    fn strip_prefix() {
        assert_eq!(strip_letter_prefix("A)5(√3 + 1)", 'A'), "5(√3 + 1)");
        assert_eq!(strip_letter_prefix("Apple", 'A'), "Apple");
    }
}
