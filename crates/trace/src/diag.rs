//! Diagnostics: problems found in readable input, with their location.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Odd but usable (e.g. a label agent that does not act at the label step).
    Warning,
    /// The trace breaks an invariant methods rely on (e.g. a label step out of range).
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found in a trace, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The file the trace came from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The record: a line number (`line 3`) or a trace id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    /// JSON path (`history[3].role`) or step (`steps[3]`) inside the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub message: String,
}

impl Diagnostic {
    pub fn new(severity: Severity, message: impl Into<String>) -> Self {
        Diagnostic {
            severity,
            file: None,
            record: None,
            path: None,
            message: message.into(),
        }
    }

    pub fn warning(message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, message)
    }

    pub fn error(message: impl Into<String>) -> Self {
        Self::new(Severity::Error, message)
    }

    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }

    pub fn in_record(mut self, record: impl Into<String>) -> Self {
        self.record = Some(record.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.severity)?;
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if let Some(record) = &self.record {
            write!(f, "{record}: ")?;
        }
        if let Some(path) = &self.path {
            write!(f, "at {path}: ")?;
        }
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_every_part() {
        let d = Diagnostic::warning("label agent does not act here")
            .in_file("a/b.json")
            .in_record("line 3")
            .at("labels.decisive");
        assert_eq!(
            d.to_string(),
            "warning: a/b.json: line 3: at labels.decisive: label agent does not act here"
        );
        assert_eq!(Diagnostic::error("x").to_string(), "error: x");
    }
}
