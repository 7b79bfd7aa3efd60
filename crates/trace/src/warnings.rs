//! What maslens could not understand about a run, said on the run itself: run-level warnings
//! (`{"code", "message", "fix"}`) in the trace's metadata under [`WARNINGS_KEY`], written where
//! a run is assembled (`maslens_otlp`) and read by every front end (the store's run list, the UI,
//! `maslens show`) and by the localizers, which give no verdict on a run that has nothing to read.

use crate::Trace;
use serde::{Deserialize, Serialize};

/// The metadata key of a trace's run-level warnings.
pub const WARNINGS_KEY: &str = "otel_warnings";

/// Codes of the warnings that leave nothing to diagnose: no step at all, or steps with no text.
pub const BLOCKING: [&str; 2] = ["no_steps", "no_content"];

/// One thing maslens could not understand about a run, with the fix when one is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunWarning {
    /// `no_steps`, `no_content`, `no_output`, `agents_from_service`, ...
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl RunWarning {
    /// Whether the run has nothing a localizer could read ([`BLOCKING`]).
    pub fn blocks_diagnosis(&self) -> bool {
        BLOCKING.contains(&self.code.as_str())
    }

    /// `code: message (fix: ...)`, one line.
    pub fn line(&self) -> String {
        match &self.fix {
            Some(fix) => format!("{}: {} (fix: {fix})", self.code, self.message),
            None => format!("{}: {}", self.code, self.message),
        }
    }
}

impl Trace {
    /// The run-level warnings in the metadata; entries that are not warnings are skipped.
    pub fn run_warnings(&self) -> Vec<RunWarning> {
        match self.metadata.get(WARNINGS_KEY) {
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(|v| serde_json::from_value(v.clone()).ok())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Why no verdict on this run would mean anything, when that is so: its first warning that
    /// leaves nothing to diagnose.
    pub fn not_understood(&self) -> Option<RunWarning> {
        self.run_warnings()
            .into_iter()
            .find(RunWarning::blocks_diagnosis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceBuilder;
    use serde_json::json;

    #[test]
    fn warnings_are_read_from_the_metadata_and_blocking_ones_named() {
        let mut t = TraceBuilder::new("r").step("a", "").build();
        assert!(t.run_warnings().is_empty() && t.not_understood().is_none());
        t.metadata.insert(
            WARNINGS_KEY.into(),
            json!([
                {"code": "agents_from_service", "message": "m1", "fix": "f1"},
                "not a warning",
                {"code": "no_content", "message": "m2"}
            ]),
        );
        let w = t.run_warnings();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].line(), "agents_from_service: m1 (fix: f1)");
        assert!(!w[0].blocks_diagnosis());
        let blocking = t.not_understood().unwrap();
        assert_eq!(blocking.code, "no_content");
        assert_eq!(blocking.line(), "no_content: m2");
    }
}
