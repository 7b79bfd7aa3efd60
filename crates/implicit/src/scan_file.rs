//! The scan file: what `maslens scan --out` writes and `select` / `repair` read back.
//!
//! One pretty-printed JSON object (documented in docs/implicit.md, "Scan file"):
//! `format_version`, `maslens_version`, `model`, `judges`, `prompt_versions`, `weights`,
//! `config` (the [`ScanSettings`]), `report` (the corpus report), `traces` (one [`TraceScan`]
//! each) and `errors`. Version 1 is the unversioned shape of maslens before the field existed
//! (no `format_version`, `maslens_version` or `config`); it is read as version 1. A newer
//! version than [`SCAN_FILE_VERSION`] is refused with an error naming the file.

use crate::report::CorpusReport;
use crate::scan::TraceScan;
use crate::settings::ScanSettings;
use crate::weights::Weights;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The scan-file shape this maslens writes (and the newest it reads). Version 3 adds each
/// trace's `trace_tokens` and the report's `process` metrics (MASIF tables 6 and 9).
pub const SCAN_FILE_VERSION: u32 = 3;

fn version_1() -> u32 {
    1
}

/// What `maslens scan --out` writes: settings, corpus report and per-trace scans.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScanFile {
    /// Shape of this file; missing (an older file) reads as 1.
    #[serde(default = "version_1")]
    pub format_version: u32,
    /// Version of maslens that wrote the file (absent in version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maslens_version: Option<String>,
    /// The first (or only) judge model; it also classified absorption.
    pub model: String,
    /// Every judge model in multi-judge mode (empty with one judge).
    pub judges: Vec<String>,
    /// Prompt templates used, by versioned name.
    pub prompt_versions: Vec<String>,
    /// Severity weights the risks were computed with.
    pub weights: Weights,
    /// The other scan settings (absent in version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ScanSettings>,
    pub report: CorpusReport,
    pub traces: Vec<TraceScan>,
    /// Traces that could not be read or scanned, with the reason.
    pub errors: Vec<String>,
}

/// Errors reading or writing a scan file; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ScanFileError {
    #[error("cannot read scan file {file}: {message}")]
    Read { file: String, message: String },
    #[error("cannot write scan file {file}: {message}")]
    Write { file: String, message: String },
    #[error("scan file {file}: {message}")]
    Parse { file: String, message: String },
    #[error(
        "{file}: line {line}: not a `maslens scan --out` file nor a JSONL line of trace scans: {message}"
    )]
    Line {
        file: String,
        line: usize,
        message: String,
    },
    #[error("scan file {file} has format_version {found}, newer than this maslens reads ({supported}); use a newer maslens")]
    NewerVersion {
        file: String,
        found: u32,
        supported: u32,
    },
}

/// Just enough of a JSON object to tell a scan file and its version.
#[derive(Deserialize)]
struct Probe {
    format_version: Option<u32>,
    traces: Option<IgnoredAny>,
}

/// The prompt templates a scan uses, by versioned name.
pub fn prompt_versions() -> Vec<String> {
    vec![
        crate::detect::DETECT_SYSTEM.name.into(),
        crate::detect::DETECT_USER.name.into(),
        crate::absorb::ABSORB_SYSTEM.name.into(),
        crate::absorb::ABSORB_USER.name.into(),
    ]
}

fn read_text(path: &Path) -> Result<String, ScanFileError> {
    std::fs::read_to_string(path).map_err(|e| ScanFileError::Read {
        file: path.display().to_string(),
        message: e.to_string(),
    })
}

impl ScanFile {
    /// Parse a scan file's text; `file` names it in errors.
    pub fn from_json(text: &str, file: &str) -> Result<ScanFile, ScanFileError> {
        let parse = |e: serde_json::Error| ScanFileError::Parse {
            file: file.to_string(),
            message: e.to_string(),
        };
        let probe: Probe = serde_json::from_str(text).map_err(parse)?;
        let found = probe.format_version.unwrap_or(1);
        if found > SCAN_FILE_VERSION {
            return Err(ScanFileError::NewerVersion {
                file: file.to_string(),
                found,
                supported: SCAN_FILE_VERSION,
            });
        }
        serde_json::from_str(text).map_err(parse)
    }

    /// Read a scan file (any version up to [`SCAN_FILE_VERSION`]).
    pub fn read(path: &Path) -> Result<ScanFile, ScanFileError> {
        Self::from_json(&read_text(path)?, &path.display().to_string())
    }

    /// The file's text: pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // A ScanFile holds only strings, numbers and maps with string keys: serializing cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Write the file atomically: a temporary file in the same directory, then a rename.
    pub fn write(&self, path: &Path) -> Result<(), ScanFileError> {
        let err = |e: std::io::Error| ScanFileError::Write {
            file: path.display().to_string(),
            message: e.to_string(),
        };
        maslens_eval::atomic::write_atomic(path, self.to_json().as_bytes()).map_err(err)?;
        Ok(())
    }
}

/// The per-trace scans of a scan file, or of a JSONL file with one [`TraceScan`] per line
/// (what `select --scan` and `repair --scan` accept). The first bad JSONL line is an error
/// (`--strict`); [`read_trace_scans_skipping`] skips and reports bad lines instead.
pub fn read_trace_scans(path: &Path) -> Result<Vec<TraceScan>, ScanFileError> {
    let (scans, bad) = read_scans(path, true)?;
    debug_assert!(bad.is_empty());
    Ok(scans)
}

/// [`read_trace_scans`], skipping bad JSONL lines: the scans read and one message per skipped
/// line (file, line, reason). A scan file (one JSON document) is read whole or not at all.
pub fn read_trace_scans_skipping(
    path: &Path,
) -> Result<(Vec<TraceScan>, Vec<String>), ScanFileError> {
    read_scans(path, false)
}

fn read_scans(path: &Path, strict: bool) -> Result<(Vec<TraceScan>, Vec<String>), ScanFileError> {
    let text = read_text(path)?;
    let file = path.display().to_string();
    if serde_json::from_str::<Probe>(&text).is_ok_and(|p| p.traces.is_some()) {
        return Ok((ScanFile::from_json(&text, &file)?.traces, Vec::new()));
    }
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(scan) => out.push(scan),
            Err(e) => {
                let err = ScanFileError::Line {
                    file: file.clone(),
                    line: i + 1,
                    message: e.to_string(),
                };
                if strict {
                    return Err(err);
                }
                bad.push(format!("{err}; skipped"));
            }
        }
    }
    Ok((out, bad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::corpus_report;
    use maslens_trace::Outcome;
    use serde_json::json;

    fn trace_scan(id: &str) -> serde_json::Value {
        json!({"id": id, "task": "t", "outcome": "failure", "steps": 4, "events": [], "cost": 0.0,
            "risk": 0.0, "risk_grouped": 0.0, "windows": 1, "abstentions": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "calls": 1, "seconds": 0.5})
    }

    fn file() -> ScanFile {
        let traces: Vec<TraceScan> =
            vec![serde_json::from_value(trace_scan("a")).unwrap_or_else(|e| panic!("{e}"))];
        ScanFile {
            format_version: SCAN_FILE_VERSION,
            maslens_version: Some(env!("CARGO_PKG_VERSION").into()),
            model: "fixture".into(),
            judges: Vec::new(),
            prompt_versions: prompt_versions(),
            weights: Weights::default(),
            config: Some(ScanSettings {
                min_judges: Some(1),
                ..Default::default()
            }),
            report: corpus_report(&traces, 0),
            traces,
            errors: vec!["b: unreadable".into()],
        }
    }

    #[test]
    fn scan_file_round_trips_through_an_atomic_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.json");
        let f = file();
        f.write(&path).unwrap();
        // Only the file itself is left in the directory (the temporary file was renamed).
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let back = ScanFile::read(&path).unwrap();
        assert_eq!(back.to_json(), f.to_json());
        assert_eq!(back.format_version, SCAN_FILE_VERSION);
        assert_eq!(back.config, f.config);
        assert_eq!(back.traces[0].outcome, Outcome::Failure);
        let v: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(v["format_version"], SCAN_FILE_VERSION);
        assert_eq!(v["maslens_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(v["config"]["overlap_steps"], 2);
        assert_eq!(read_trace_scans(&path).unwrap().len(), 1);
    }

    #[test]
    fn unversioned_scan_file_reads_as_version_1() {
        // The shape `maslens scan --out` wrote before `format_version` existed.
        let traces: Vec<TraceScan> = vec![serde_json::from_value(trace_scan("a")).unwrap()];
        let old = json!({"model": "m", "judges": [], "prompt_versions": [],
            "weights": Weights::default(), "report": corpus_report(&traces, 0),
            "traces": [trace_scan("a"), trace_scan("b")], "errors": []});
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.json");
        std::fs::write(&path, serde_json::to_string_pretty(&old).unwrap()).unwrap();
        let f = ScanFile::read(&path).unwrap();
        assert_eq!(f.format_version, 1);
        assert_eq!(f.maslens_version, None);
        assert_eq!(f.config, None);
        assert_eq!(f.traces.len(), 2);
        assert_eq!(read_trace_scans(&path).unwrap().len(), 2);
    }

    #[test]
    fn newer_version_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("future.json");
        let mut v: serde_json::Value = serde_json::from_str(&file().to_json()).unwrap();
        v["format_version"] = json!(SCAN_FILE_VERSION + 1);
        v["renamed_in_the_future"] = json!(true);
        std::fs::write(&path, v.to_string()).unwrap();
        for e in [
            ScanFile::read(&path).unwrap_err(),
            read_trace_scans(&path).unwrap_err(),
        ] {
            assert!(matches!(e, ScanFileError::NewerVersion { found: 4, .. }));
            let msg = e.to_string();
            assert!(
                msg.contains("future.json") && msg.contains("format_version 4"),
                "{msg}"
            );
        }
    }

    #[test]
    fn jsonl_of_trace_scans_and_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scans.jsonl");
        std::fs::write(
            &path,
            format!("{}\n\n{}\n", trace_scan("a"), trace_scan("b")),
        )
        .unwrap();
        let scans = read_trace_scans(&path).unwrap();
        assert_eq!(
            scans.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        std::fs::write(&path, format!("{}\nnot json\n", trace_scan("a"))).unwrap();
        let e = read_trace_scans(&path).unwrap_err();
        assert!(matches!(e, ScanFileError::Line { line: 2, .. }), "{e}");
        let (scans, bad) = read_trace_scans_skipping(&path).unwrap();
        assert_eq!(scans.len(), 1);
        assert_eq!(bad.len(), 1);
        assert!(
            bad[0].contains("scans.jsonl") && bad[0].contains("line 2"),
            "{bad:?}"
        );
        let missing = dir.path().join("missing.json");
        let e = read_trace_scans(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot read scan file") && e.contains("missing.json"),
            "{e}"
        );
    }
}
