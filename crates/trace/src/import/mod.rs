//! Streaming importers: Who&When, Aegis-Bench JSONL, MAD (MAST) JSONL, chat transcripts, maslens
//! native JSON/JSONL.
//!
//! [`read_path`] walks a file or a directory (recursively, sorted by name) and yields one
//! [`Imported`] trace (or one [`ImportError`]) per record, holding at most one record in memory.
//! A file whose first line is a complete JSON value, or whose name ends in `.jsonl`/`.ndjson`,
//! is read line by line (one record per line); any other file is one JSON document.

pub mod aegis;
pub mod chat;
mod content;
mod json;
pub mod mad;
pub mod native;
mod pipeline;
mod records;
mod walk;
pub mod whowhen;

pub(crate) use json::{parse_value, path_string, plain_message, strip_bom, typed};
pub use pipeline::parser_threads;
pub use records::{read_lines, TraceReader};
pub use walk::{files, Files};

use crate::diag::Diagnostic;
use crate::model::Trace;
use crate::validate::validate;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Input format. `Auto` detects it from the content of each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    #[default]
    Auto,
    WhoWhen,
    Aegis,
    Chat,
    Native,
    Mad,
}

impl Format {
    pub const ALL: [Format; 6] = [
        Format::Auto,
        Format::WhoWhen,
        Format::Aegis,
        Format::Chat,
        Format::Native,
        Format::Mad,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::WhoWhen => "whowhen",
            Format::Aegis => "aegis",
            Format::Chat => "chat",
            Format::Native => "native",
            Format::Mad => "mad",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown format name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format `{0}`: expected one of auto, whowhen, aegis, chat, native, mad")]
pub struct ParseFormatError(pub String);

impl FromStr for Format {
    type Err = ParseFormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        match norm.as_str() {
            "auto" => Ok(Format::Auto),
            "whowhen" | "ww" => Ok(Format::WhoWhen),
            "aegis" | "aegisbench" => Ok(Format::Aegis),
            "chat" | "openai" | "messages" => Ok(Format::Chat),
            "native" | "maslens" | "jsonl" => Ok(Format::Native),
            "mad" | "mast" | "mastdata" => Ok(Format::Mad),
            _ => Err(ParseFormatError(s.to_string())),
        }
    }
}

/// One imported trace with the diagnostics found while importing and validating it.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub trace: Trace,
    pub diagnostics: Vec<Diagnostic>,
    /// Where it was read: the file as shown in messages and the record (`line 3`), when known.
    pub file: Option<String>,
    pub record: Option<String>,
}

impl Imported {
    /// Where the trace was read, for messages: `FILE: line N`, `FILE`, or the trace id.
    pub fn location(&self) -> String {
        match (&self.file, &self.record) {
            (Some(f), Some(r)) => format!("{f}: {r}"),
            (Some(f), None) => f.clone(),
            _ => format!("trace {}", self.trace.id),
        }
    }
}

/// A record (or file) that could not be read as a trace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ImportError {
    /// The file.
    pub file: String,
    /// The record inside the file (`line 3`), when the file holds one record per line.
    pub record: Option<String>,
    /// JSON path inside the record, e.g. `history[3].content`.
    pub path: Option<String>,
    /// What went wrong and what was expected.
    pub message: String,
}

impl ImportError {
    fn describe(&self) -> String {
        let mut s = self.file.clone();
        if let Some(r) = &self.record {
            s.push_str(": ");
            s.push_str(r);
        }
        if let Some(p) = &self.path {
            s.push_str(": at ");
            s.push_str(p);
        }
        s.push_str(": ");
        s.push_str(&self.message);
        s
    }
}

/// Where a record comes from, for ids and error messages.
#[derive(Debug, Clone, Copy)]
pub struct RecordCtx<'a> {
    /// The file as shown in messages.
    pub file: &'a str,
    /// The file path (used for ids such as Who&When's `<folder>/<stem>`), if any.
    pub path: Option<&'a Path>,
    /// 1-based line number for line-per-record files.
    pub line: Option<u64>,
}

impl<'a> RecordCtx<'a> {
    /// A context for in-memory input (tests, fuzzing).
    pub fn memory(name: &'a str) -> Self {
        RecordCtx {
            file: name,
            path: None,
            line: None,
        }
    }

    pub fn record(&self) -> Option<String> {
        self.line.map(|l| format!("line {l}"))
    }

    pub fn error(&self, path: Option<String>, message: impl Into<String>) -> ImportError {
        ImportError {
            file: self.file.to_string(),
            record: self.record(),
            path,
            message: message.into(),
        }
    }

    /// `<folder>/<stem>` of the file (just `<stem>` without a folder), with `#<line>` added for
    /// records after the first line of a line-per-record file.
    pub fn default_id(&self, with_folder: bool) -> String {
        let mut id = String::new();
        if let Some(p) = self.path {
            if with_folder {
                if let Some(folder) = p.parent().and_then(|d| d.file_name()) {
                    id.push_str(&folder.to_string_lossy());
                    id.push('/');
                }
            }
            match p.file_stem() {
                Some(stem) => id.push_str(&stem.to_string_lossy()),
                None => id.push_str(self.file),
            }
        } else {
            id.push_str(self.file);
        }
        if let Some(l) = self.line {
            if l > 1 {
                id.push('#');
                id.push_str(&l.to_string());
            }
        }
        id
    }

    fn source(&self, format: &str) -> crate::model::Source {
        crate::model::Source {
            format: format.to_string(),
            file: Some(self.file.to_string()),
            record: self.record(),
        }
    }
}

/// Detect the format of one parsed record.
pub fn detect(value: &serde_json::Value) -> Option<Format> {
    use serde_json::Value;
    match value {
        Value::Array(_) if mad::is_array_of_records(value) => Some(Format::Mad),
        Value::Array(items) => {
            if items.iter().all(|m| m.is_object()) {
                Some(Format::Chat)
            } else {
                None
            }
        }
        Value::Object(map) => {
            let has = |k: &str| map.contains_key(k);
            if has("steps") && has("id") {
                Some(Format::Native)
            } else if mad::looks_like(value) {
                Some(Format::Mad)
            } else if has("conversation_history")
                || map
                    .get("input")
                    .and_then(|i| i.get("conversation_history"))
                    .is_some()
            {
                Some(Format::Aegis)
            } else if has("history")
                && (has("mistake_agent") || has("mistake_step") || has("question"))
            {
                Some(Format::WhoWhen)
            } else if has("messages") || has("history") {
                Some(Format::Chat)
            } else {
                None
            }
        }
        _ => None,
    }
}

const DETECT_HELP: &str = "cannot detect the format: expected a maslens trace (`id`, `steps`), an Aegis record \
(`input.conversation_history`), a MAD record (`trace`, `mast_annotation`), a Who&When record (`history`, `mistake_agent`) or a chat transcript \
(an array of messages, or an object with `messages`/`history`); pass --format to choose";

const OTLP_HELP: &str = "this is an OpenTelemetry trace export (`resourceSpans`): its spans make \
traces only together, so read the inputs with --otlp (maslens-otlp)";

fn finish(trace: Trace, mut diagnostics: Vec<Diagnostic>, ctx: &RecordCtx<'_>) -> Imported {
    diagnostics.extend(validate(&trace));
    for d in &mut diagnostics {
        if d.file.is_none() {
            d.file = Some(ctx.file.to_string());
        }
        if d.record.is_none() {
            d.record = ctx.record();
        }
    }
    Imported {
        trace,
        diagnostics,
        file: Some(ctx.file.to_string()),
        record: ctx.record(),
    }
}

/// Import one record (a whole file's bytes, or one line) in the given format. `Auto` detects
/// the format from the content. Never panics: any input yields a trace or an [`ImportError`].
pub fn parse_record(
    bytes: &[u8],
    format: Format,
    ctx: &RecordCtx<'_>,
) -> Result<Imported, ImportError> {
    parse_record_detect(bytes, format, ctx).1
}

/// Like [`parse_record`], also returning the format used (the detected one for `Auto`).
pub fn parse_record_detect(
    bytes: &[u8],
    format: Format,
    ctx: &RecordCtx<'_>,
) -> (Format, Result<Imported, ImportError>) {
    let bytes = strip_bom(bytes);
    if format == Format::Native {
        return (
            Format::Native,
            native::import_bytes(bytes, ctx).map(|t| finish(t, Vec::new(), ctx)),
        );
    }
    let value = match parse_value(bytes, ctx) {
        Ok(v) => v,
        Err(e) => return (format, Err(e)),
    };
    let fmt = match format {
        Format::Auto => match detect(&value) {
            Some(f) => f,
            None if value.get("resourceSpans").is_some() => {
                return (format, Err(ctx.error(None, OTLP_HELP)))
            }
            None => return (format, Err(ctx.error(None, DETECT_HELP))),
        },
        f => f,
    };
    let result = match fmt {
        Format::Native => native::import_value(value, ctx).map(|t| (t, Vec::new())),
        Format::WhoWhen => whowhen::import_value(value, ctx),
        Format::Aegis => aegis::import_value(value, ctx),
        Format::Chat => chat::import_value(value, ctx),
        Format::Mad => mad::import_value(value, ctx),
        Format::Auto => Err(ctx.error(None, DETECT_HELP)),
    };
    (fmt, result.map(|(t, d)| finish(t, d, ctx)))
}

/// Read every trace under a file or directory (recursing, sorted by name), one record at a
/// time. In directories only `.json`, `.jsonl` and `.ndjson` files are read (hidden entries are
/// skipped); a file named explicitly is always read.
pub fn read_path(path: &Path, format: Format) -> TraceReader {
    read_paths(&[path.to_path_buf()], format)
}

/// The first trace of a file (or directory): a convenience for commands that take one trace.
/// An unreadable first record is returned as its error; an input without records is an error.
pub fn read_trace(path: &Path, format: Format) -> Result<Imported, ImportError> {
    read_path(path, format).next().unwrap_or_else(|| {
        Err(ImportError {
            file: path.display().to_string(),
            record: None,
            path: None,
            message: "no trace found (expected a .json, .jsonl or .ndjson file)".into(),
        })
    })
}

/// Read every trace under several paths, in the order given.
pub fn read_paths(paths: &[PathBuf], format: Format) -> TraceReader {
    TraceReader::new(format, files(paths, walk::is_trace_file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.to_string().parse::<Format>(), Ok(f));
        }
        assert_eq!("Who&When".parse::<Format>(), Ok(Format::WhoWhen));
        assert!("xml".parse::<Format>().is_err());
    }

    #[test]
    fn detects_formats() {
        use serde_json::json;
        assert_eq!(
            detect(&json!({"id": "x", "steps": []})),
            Some(Format::Native)
        );
        assert_eq!(
            detect(&json!({"input": {"conversation_history": []}})),
            Some(Format::Aegis)
        );
        assert_eq!(
            detect(&json!({"history": [], "mistake_agent": "a"})),
            Some(Format::WhoWhen)
        );
        assert_eq!(detect(&json!([{"role": "user"}])), Some(Format::Chat));
        assert_eq!(detect(&json!({"messages": []})), Some(Format::Chat));
        assert_eq!(detect(&json!({"foo": 1})), None);
        assert_eq!(detect(&json!(3)), None);
    }
}
