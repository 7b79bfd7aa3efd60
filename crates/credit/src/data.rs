//! Multiple-choice tasks: MMLU CSV, AQuA-RAT JSON lines, a generic MCQ JSONL, MedMCQA and GPQA
//! JSON lines ([`crate::data_mcq`]), and deterministic optimization / held-out splits.
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
    /// 1-based record number (JSON lines: the line; CSV: the row, as in the question's id).
    pub record: usize,
    /// 1-based line where the record starts (a CSV record may span lines).
    pub line: usize,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for LoadProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: record {}", self.file, self.record)?;
        if self.line != self.record {
            write!(f, " (line {})", self.line)?;
        }
        write!(f, ": field {}: {}", self.field, self.message)
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
    #[error(
        "unknown dataset spec {0:?}: use mmlu:PATH, aqua:PATH, jsonl:PATH, medmcqa:PATH, \
         medmcqa-hf:PATH or gpqa:PATH"
    )]
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
    /// MedMCQA as released (`cop` 1..4).
    Medmcqa,
    /// MedMCQA exported from Hugging Face `datasets` (`cop` 0..3).
    #[serde(rename = "medmcqa-hf")]
    MedmcqaHf,
    Gpqa,
}

/// Load a dataset from `kind:PATH` (or a bare path: `.csv` files and folders are MMLU, `.json`
/// files with an `options` list are AQuA, anything else generic JSONL).
pub fn load_spec(spec: &str) -> Result<Loaded, DataError> {
    let (kind, path) = match spec.split_once(':') {
        Some(("mmlu", p)) => (DatasetKind::Mmlu, p),
        Some(("aqua", p)) => (DatasetKind::Aqua, p),
        Some(("jsonl", p)) => (DatasetKind::Jsonl, p),
        Some(("medmcqa", p)) => (DatasetKind::Medmcqa, p),
        Some(("medmcqa-hf", p)) => (DatasetKind::MedmcqaHf, p),
        Some(("gpqa", p)) => (DatasetKind::Gpqa, p),
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
        DatasetKind::Medmcqa => crate::data_mcq::load_medmcqa(path, crate::data_mcq::CopBase::One),
        DatasetKind::MedmcqaHf => {
            crate::data_mcq::load_medmcqa(path, crate::data_mcq::CopBase::Zero)
        }
        DatasetKind::Gpqa => crate::data_mcq::load_gpqa(path),
    }
}

fn read(path: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(path).map_err(|source| DataError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// MMLU CSV: no header; `question,A,B,C,D,answer` (RFC 4180 quoting, embedded newlines, an
/// optional UTF-8 BOM). A folder loads every `*.csv` regular file in it (not below) in name order.
/// Ids count records (`mmlu/<stem>/<n>`, blank lines not counted); a bad row is a
/// [`LoadProblem`] with its record, line and field, and the rows after it still load.
pub fn load_mmlu(path: &Path) -> Result<Loaded, DataError> {
    let mut files: Vec<PathBuf> = Vec::new();
    if path.is_dir() {
        let walk = walkdir::WalkDir::new(path)
            .min_depth(1)
            .max_depth(1)
            .follow_links(true)
            .sort_by_file_name();
        for entry in walk {
            let entry = entry.map_err(|e| walk_error(path, e))?;
            // Regular files only (after symlinks): a FIFO named `x.csv` would block the read.
            if entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "csv") {
                files.push(entry.into_path());
            }
        }
    } else {
        files.push(path.to_path_buf());
    }
    let mut out = Loaded::default();
    for file in files {
        load_mmlu_file(&file, &mut out)?;
    }
    Ok(out)
}

fn walk_error(root: &Path, e: walkdir::Error) -> DataError {
    let path = e.path().unwrap_or(root).display().to_string();
    let source = e
        .into_io_error()
        .unwrap_or_else(|| std::io::Error::other("symbolic link loop"));
    DataError::Io { path, source }
}

/// MMLU column names, as [`LoadProblem::field`] names them.
const MMLU_FIELDS: [&str; 6] = ["question", "A", "B", "C", "D", "answer"];

fn load_mmlu_file(file: &Path, out: &mut Loaded) -> Result<(), DataError> {
    let reader = std::fs::File::open(file).map_err(|source| DataError::Io {
        path: file.display().to_string(),
        source,
    })?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    read_mmlu(reader, &file.display().to_string(), &stem, out)
}

/// Read MMLU rows from `reader` (named `fname`, questions `mmlu/<stem>/<n>`) into `out`.
fn read_mmlu(
    reader: impl std::io::Read,
    fname: &str,
    stem: &str,
    out: &mut Loaded,
) -> Result<(), DataError> {
    let subject = stem
        .trim_end_matches("_test")
        .trim_end_matches("_dev")
        .trim_end_matches("_val")
        .to_string();
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(reader);
    let mut record = 0usize;
    let mut row = csv::StringRecord::new();
    loop {
        let line_before = csv.position().line() as usize;
        let read = csv.read_record(&mut row);
        record += 1;
        let problem = |line: usize, field: &str, message: String| LoadProblem {
            file: fname.to_string(),
            record,
            line,
            field: field.into(),
            message,
        };
        match read {
            Ok(true) => {}
            Ok(false) => break,
            // A read error is the file's, not a row's: stop as an unreadable file does.
            Err(e) if matches!(e.kind(), csv::ErrorKind::Io(_)) => {
                return Err(DataError::Io {
                    path: fname.to_string(),
                    source: match e.into_kind() {
                        csv::ErrorKind::Io(source) => source,
                        other => std::io::Error::other(format!("{other:?}")),
                    },
                });
            }
            Err(e) => {
                let (line, field, message) = match e.kind() {
                    csv::ErrorKind::Utf8 { pos, err } => (
                        pos.as_ref().map_or(line_before, |p| p.line() as usize),
                        MMLU_FIELDS.get(err.field()).copied().unwrap_or("csv"),
                        "invalid UTF-8".to_string(),
                    ),
                    _ => (
                        e.position().map_or(line_before, |p| p.line() as usize),
                        "csv",
                        e.to_string(),
                    ),
                };
                out.problems.push(problem(line, field, message));
                continue;
            }
        }
        let line = row.position().map_or(line_before, |p| p.line() as usize);
        if row.len() != 6 {
            out.problems.push(problem(
                line,
                "columns",
                format!(
                    "expected 6 columns (question,A,B,C,D,answer), found {}",
                    row.len()
                ),
            ));
            continue;
        }
        let ans = row[5].trim().to_ascii_uppercase();
        let answer = match ans.chars().next() {
            Some(c @ 'A'..='D') if ans.len() == 1 => c,
            _ => {
                out.problems.push(problem(
                    line,
                    "answer",
                    format!("expected one of A-D, found {:?}", &row[5]),
                ));
                continue;
            }
        };
        out.items.push(Mcq {
            id: format!("mmlu/{stem}/{record}"),
            question: row[0].to_string(),
            options: row.iter().skip(1).take(4).map(str::to_string).collect(),
            answer,
            subject: Some(subject.clone()),
        });
    }
    Ok(())
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
pub(crate) fn load_json_lines(
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
                line: record,
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

    /// Load an MMLU CSV snippet; `(items, problems)`.
    fn mmlu(text: &[u8]) -> (Vec<Mcq>, Vec<LoadProblem>) {
        let mut out = Loaded::default();
        read_mmlu(text, "t.csv", "t_test", &mut out).unwrap();
        (out.items, out.problems)
    }

    #[test]
    fn csv_quotes_newlines_and_bom() {
        let (items, problems) = mmlu(
            b"\xef\xbb\xbf\"a, b\",x,y,z,w,A\r\n\"he said \"\"x\"\"\",\"multi\nline\",c,d,e,b\n\nlast,row,1,2,3,D",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(items.len(), 3);
        // The BOM is not part of the first question; CRLF ends a record.
        assert_eq!(items[0].question, "a, b");
        assert_eq!(items[0].options, vec!["x", "y", "z", "w"]);
        assert_eq!(items[1].question, "he said \"x\"");
        assert_eq!(items[1].options[0], "multi\nline");
        assert_eq!(items[1].answer, 'B');
        // Blank lines are not records: ids count records, as before.
        assert_eq!(
            items.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
            vec!["mmlu/t_test/1", "mmlu/t_test/2", "mmlu/t_test/3"]
        );
        assert_eq!(items[2].subject.as_deref(), Some("t"));
    }

    #[test]
    fn bad_csv_rows_name_file_line_and_field_and_the_rest_loads() {
        let (items, problems) = mmlu(
            b"q1,a,b,c,d,A\n\"q2\nspans\",a,b,c,d,E\nq3,a,b\nq4,\xff\xfe,b,c,d,C\nq5,a,b,c,d,\"B\"\n",
        );
        assert_eq!(
            items.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
            vec!["mmlu/t_test/1", "mmlu/t_test/5"]
        );
        let got: Vec<(usize, usize, &str)> = problems
            .iter()
            .map(|p| (p.record, p.line, p.field.as_str()))
            .collect();
        assert_eq!(got, vec![(2, 2, "answer"), (3, 4, "columns"), (4, 5, "A")]);
        assert_eq!(
            problems[1].to_string(),
            "t.csv: record 3 (line 4): field columns: expected 6 columns (question,A,B,C,D,answer), found 3"
        );
        assert_eq!(problems[2].message, "invalid UTF-8");
        assert_eq!(
            problems[0].to_string(),
            "t.csv: record 2: field answer: expected one of A-D, found \"E\""
        );
    }

    #[test]
    fn csv_unterminated_quote_and_odd_quotes() {
        // An unterminated quote swallows the rest of the file into one field: that row has too
        // few columns and is reported; nothing panics.
        let (items, problems) = mmlu(b"q1,a,b,c,d,A\n\"open,a,b,c,d,B\nq3,a,b,c,d,C\n");
        assert_eq!(items.len(), 1);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].field, "columns");
        assert_eq!(problems[0].line, 2);
        // A quote inside an unquoted field is kept as text.
        let (items, problems) = mmlu(b"5\" of rain,a,b,c,d,A\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(items[0].question, "5\" of rain");
        // Empty input: nothing, no problem.
        assert_eq!(mmlu(b"").0.len(), 0);
        assert_eq!(mmlu(b"\n\n").1.len(), 0);
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
