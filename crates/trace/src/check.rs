//! Checking a corpus (`maslens validate`): each imported trace's diagnostics plus the corpus
//! checks (duplicate ids), counted by severity, and their JSON records.

use crate::validate::CorpusValidator;
use crate::{Diagnostic, ImportError, Imported, Severity};
use serde_json::{json, Value};

/// The running check of a corpus.
#[derive(Debug, Default)]
pub struct CorpusCheck {
    validator: CorpusValidator,
    pub errors: u64,
    pub warnings: u64,
}

impl CorpusCheck {
    pub fn new() -> Self {
        Self::default()
    }

    /// The diagnostics of one imported trace: the importer's (it already ran the per-trace
    /// validation) and the corpus checks (a duplicate id).
    pub fn check(&mut self, imp: &Imported) -> Vec<Diagnostic> {
        let t = &imp.trace;
        let mut diags = imp.diagnostics.clone();
        // The duplicate is named where it was read (the second copy), the first copy where it was.
        diags.extend(
            self.validator
                .check(t, &imp.location())
                .into_iter()
                .filter(|d| d.message.starts_with("duplicate trace id"))
                .map(|mut d| {
                    d.file = imp.file.clone();
                    d.record = imp.record.clone();
                    d
                }),
        );
        for d in &diags {
            match d.severity {
                Severity::Error => self.errors += 1,
                Severity::Warning => self.warnings += 1,
            }
        }
        diags
    }

    /// Whether the corpus passes: nothing skipped, no error, and no warning when they are denied.
    pub fn ok(&self, skipped: u64, deny_warnings: bool) -> bool {
        skipped == 0 && self.errors == 0 && (!deny_warnings || self.warnings == 0)
    }
}

/// A diagnostic as a JSON record with the trace id.
pub fn diagnostic_json(trace_id: &str, d: &Diagnostic) -> Value {
    let mut v = serde_json::to_value(d).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("trace".into(), json!(trace_id));
    }
    v
}

/// An unreadable (skipped) record as a JSON record.
pub fn skipped_json(e: &ImportError) -> Value {
    json!({
        "severity": "error",
        "file": e.file,
        "record": e.record,
        "path": e.path,
        "message": e.message,
        "skipped": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Trace;

    #[test]
    fn duplicate_ids_are_errors_and_records_carry_the_trace() {
        let imp = Imported {
            trace: Trace::new("x"),
            diagnostics: vec![Diagnostic::warning("w")],
            file: Some("f.jsonl".into()),
            record: Some("line 1".into()),
        };
        let mut c = CorpusCheck::new();
        assert_eq!(c.check(&imp).len(), 1);
        let again = Imported {
            record: Some("line 3".into()),
            ..imp.clone()
        };
        let second = c.check(&again);
        assert!(second[1].message.starts_with("duplicate trace id"));
        // Named at the second copy, pointing back at the first.
        assert_eq!(second[1].record.as_deref(), Some("line 3"));
        assert!(
            second[1].message.contains("first seen in f.jsonl: line 1"),
            "{}",
            second[1].message
        );
        assert_eq!((c.errors, c.warnings), (1, 2));
        assert!(!c.ok(0, false));
        assert_eq!(diagnostic_json("x", &second[0])["trace"], "x");
        let e = ImportError {
            file: "f".into(),
            record: None,
            path: None,
            message: "m".into(),
        };
        assert_eq!(skipped_json(&e)["skipped"], true);
    }
}
