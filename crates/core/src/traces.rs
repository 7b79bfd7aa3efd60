//! Reading traces and datasets. Import errors (file, record, JSON path) are returned beside the
//! traces, never printed here, and never stop the other files.

use maslens_eval::run::LabelledCase;
use maslens_trace::{Format, ImportError, Trace};
use std::path::{Path, PathBuf};

/// Traces read from inputs, and the records that could not be read.
#[derive(Debug, Default)]
pub struct TraceSet {
    pub traces: Vec<Trace>,
    pub errors: Vec<ImportError>,
}

/// Read every trace under `inputs` (files or directories) in `format` (auto-detected per file).
pub fn read(inputs: &[PathBuf], format: Format) -> TraceSet {
    let mut set = TraceSet::default();
    for r in maslens_trace::import::read_paths(inputs, format) {
        match r {
            Ok(imp) => set.traces.push(imp.trace),
            Err(e) => set.errors.push(e),
        }
    }
    set
}

/// A dataset spec: `whowhen:DIR`, `aegis:FILE`, or a path (format auto-detected).
pub fn parse_dataset(spec: &str) -> (PathBuf, Format) {
    if let Some(p) = spec.strip_prefix("whowhen:") {
        (PathBuf::from(p), Format::WhoWhen)
    } else if let Some(p) = spec.strip_prefix("aegis:") {
        (PathBuf::from(p), Format::Aegis)
    } else {
        (PathBuf::from(spec), Format::Auto)
    }
}

/// Labelled cases of a dataset, and what was left out and why.
#[derive(Debug, Default)]
pub struct Dataset {
    /// Sorted by id, one case per id.
    pub cases: Vec<LabelledCase>,
    pub import_errors: Vec<ImportError>,
    /// Traces without a decisive or faulty-agent label.
    pub unlabelled: Vec<String>,
    /// Ids that appeared more than once (the first copy in id order is kept).
    pub duplicates: Vec<String>,
}

impl Dataset {
    /// Problems that a run should count (exit code 1), as messages.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.import_errors.iter().map(|e| e.to_string()).collect();
        out.extend(
            self.unlabelled
                .iter()
                .map(|id| format!("{id}: no decisive or faulty-agent label; skipped")),
        );
        out.extend(
            self.duplicates
                .iter()
                .map(|id| format!("{id}: trace id appears more than once; one copy kept")),
        );
        out
    }
}

/// Load the labelled cases of `path` whose id starts with `subset` (all when `None`).
pub fn load_dataset(path: &Path, format: Format, subset: Option<&str>) -> Dataset {
    let set = read(&[path.to_path_buf()], format);
    let mut ds = Dataset {
        import_errors: set.errors,
        ..Default::default()
    };
    for t in set.traces {
        if subset.is_some_and(|s| !t.id.starts_with(s)) {
            continue;
        }
        match t.gold() {
            Some(gold) => ds.cases.push(LabelledCase { trace: t, gold }),
            None => ds.unlabelled.push(t.id),
        }
    }
    ds.duplicates = maslens_eval::run::dedup_by_id(&mut ds.cases);
    ds
}
