//! The prior-probabilities file: a step distribution per trace, written by `maslens prior train
//! --oof-probs FILE` (out-of-fold, so LLM + prior experiments on the training traces stay honest)
//! and read by `--prior FILE` of `maslens locate` / `maslens eval locate`.
//!
//! JSONL, one line per trace: `{"format_version": 1, "trace": ID, "probs": [p_step0, p_step1, ...]}`
//! with one probability per step position (not per source index). Lines without
//! `format_version` (files written before it existed) are read as version 1. A line that is not
//! valid is skipped and reported with file, line and reason; a newer version is an error.

use crate::model::{PriorModel, TrainConfig};
use crate::PriorError;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Version of the lines this build writes.
pub const PROBS_FORMAT_VERSION: u32 = 1;

/// One line of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbsLine {
    #[serde(default = "v1")]
    pub format_version: u32,
    pub trace: String,
    pub probs: Vec<f64>,
    /// The agent-level distribution (agent head), best first, when the writer had one: the
    /// agent-level answer of a prior may differ from the agent of its best step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<(String, f64)>,
}

fn v1() -> u32 {
    1
}

/// A line that was skipped, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub file: String,
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: line {}: {}", self.file, self.line, self.reason)
    }
}

/// A read file: distributions by trace id, and the lines skipped.
#[derive(Debug, Clone, Default)]
pub struct ProbsFile {
    pub by_trace: HashMap<String, Vec<f64>>,
    /// Agent distributions (best first) of the lines that carry one.
    pub agents_by_trace: HashMap<String, Vec<(String, f64)>>,
    pub skipped: Vec<LineError>,
}

/// Parse the file's text (`name` is used in messages).
pub fn parse(name: &str, text: &str) -> ProbsFile {
    let mut out = ProbsFile::default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |reason: String| LineError {
            file: name.to_string(),
            line: i + 1,
            reason,
        };
        let row: ProbsLine = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(e) => {
                out.skipped.push(err(format!(
                    "expected {{\"trace\": ID, \"probs\": [numbers]}}: {e}"
                )));
                continue;
            }
        };
        if row.format_version > PROBS_FORMAT_VERSION {
            out.skipped.push(err(format!(
                "format_version {} is newer than this maslens reads ({PROBS_FORMAT_VERSION})",
                row.format_version
            )));
            continue;
        }
        if let Some(p) = row.probs.iter().position(|p| !(p.is_finite() && *p >= 0.0)) {
            out.skipped.push(err(format!(
                "field `probs[{p}]` is not a non-negative number"
            )));
            continue;
        }
        if out.by_trace.contains_key(&row.trace) {
            out.skipped.push(err(format!(
                "trace {:?} appears more than once; the first line is used",
                row.trace
            )));
            continue;
        }
        if !row.agents.is_empty() {
            out.agents_by_trace.insert(row.trace.clone(), row.agents);
        }
        out.by_trace.insert(row.trace, row.probs);
    }
    out
}

/// Read a probabilities file.
pub fn read(path: &Path) -> Result<ProbsFile, PriorError> {
    let text = std::fs::read_to_string(path).map_err(|source| PriorError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(parse(&path.display().to_string(), &text))
}

/// A model's line for a trace: its step and agent distributions.
pub fn line(model: &PriorModel, t: &Trace) -> ProbsLine {
    ProbsLine {
        format_version: PROBS_FORMAT_VERSION,
        trace: t.id.clone(),
        probs: model.step_distribution(t),
        agents: model.agent_distribution(t),
    }
}

/// The out-of-fold step distribution of every labelled trace (the folds and training sets of the
/// pooled cross-validation, [`crate::eval::out_of_fold`]).
pub fn out_of_fold(
    traces: &[&Trace],
    folds: usize,
    cfg: &TrainConfig,
) -> Result<Vec<ProbsLine>, PriorError> {
    crate::eval::out_of_fold(traces, folds, cfg, line)
}

/// Write lines as JSONL to `path`, atomically (a temporary file beside it, then a rename).
pub fn write(path: &Path, lines: &[ProbsLine]) -> Result<(), PriorError> {
    let mut text = String::new();
    for l in lines {
        // A line of strings and finite numbers always serializes.
        text.push_str(&serde_json::to_string(l).unwrap_or_default());
        text.push('\n');
    }
    let io = |source: std::io::Error| PriorError::Io {
        path: path.display().to_string(),
        source,
    };
    maslens_eval::atomic::write_atomic(path, text.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_old_and_new_lines_and_skips_bad_ones_with_reasons() {
        let text = "\u{feff}{\"trace\":\"a\",\"probs\":[0.5,0.5]}\n\
                    {\"format_version\":1,\"trace\":\"b\",\"probs\":[1.0]}\n\
                    not json\n\
                    {\"trace\":\"c\",\"probs\":[-1.0]}\n\
                    {\"format_version\":9,\"trace\":\"d\",\"probs\":[]}\n\
                    \n\
                    {\"trace\":\"a\",\"probs\":[1.0,0.0]}\n";
        let f = parse("p.jsonl", text);
        assert_eq!(f.by_trace.len(), 2);
        assert_eq!(f.by_trace["a"], vec![0.5, 0.5]);
        let lines: Vec<usize> = f.skipped.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 7]);
        assert!(f.skipped[1].to_string().contains("probs[0]"));
        assert!(f.skipped[2].reason.contains("newer"));
        assert!(f.skipped[0].to_string().starts_with("p.jsonl: line 3:"));
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probs.jsonl");
        let lines = vec![ProbsLine {
            format_version: PROBS_FORMAT_VERSION,
            trace: "x/1".into(),
            probs: vec![0.25, 0.75],
            agents: vec![("A".into(), 0.9), ("B".into(), 0.1)],
        }];
        write(&path, &lines).unwrap();
        let f = read(&path).unwrap();
        assert!(f.skipped.is_empty());
        assert_eq!(f.by_trace["x/1"], vec![0.25, 0.75]);
        assert_eq!(f.agents_by_trace["x/1"][0], ("A".to_string(), 0.9));
        assert!(matches!(
            read(&dir.path().join("missing")),
            Err(PriorError::Io { .. })
        ));
    }
}
