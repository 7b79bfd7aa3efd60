//! Streaming importers: Who&When, Aegis-Bench JSONL, chat transcripts, maslens native JSON/JSONL.
//!
//! [`read_path`] walks a file or a directory (recursively, sorted by name) and yields one
//! [`Imported`] trace (or one [`ImportError`]) per record, holding at most one record in memory.
//! A file whose first line is a complete JSON value, or whose name ends in `.jsonl`/`.ndjson`,
//! is read line by line (one record per line); any other file is one JSON document.

pub mod aegis;
pub mod chat;
pub mod native;
mod pipeline;
pub mod whowhen;

pub use pipeline::parser_threads;

use crate::diag::Diagnostic;
use crate::model::Trace;
use crate::validate::validate;
use serde::de::DeserializeOwned;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
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
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::Auto,
        Format::WhoWhen,
        Format::Aegis,
        Format::Chat,
        Format::Native,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::WhoWhen => "whowhen",
            Format::Aegis => "aegis",
            Format::Chat => "chat",
            Format::Native => "native",
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
#[error("unknown format `{0}`: expected one of auto, whowhen, aegis, chat, native")]
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

/// JSON path of a serde_path_to_error path; `None` for the root.
pub(crate) fn path_string(p: &serde_path_to_error::Path) -> Option<String> {
    let s = p.to_string();
    // serde_path_to_error writes `?` for a map key it could not read (e.g. at EOF).
    let s = s.strip_suffix(".?").unwrap_or(&s).to_string();
    if s == "." || s == "?" || s.is_empty() {
        None
    } else {
        Some(s)
    }
}

/// Parse bytes into a JSON value, with the JSON path of a syntax error.
pub(crate) fn parse_value(
    bytes: &[u8],
    ctx: &RecordCtx<'_>,
) -> Result<serde_json::Value, ImportError> {
    let text = simdutf8::compat::from_utf8(bytes).map_err(|e| {
        let message = match wide_encoding(bytes) {
            Some(m) => m.to_string(),
            None => format!(
                "invalid UTF-8 at byte {}: expected UTF-8 encoded JSON",
                e.valid_up_to()
            ),
        };
        ctx.error(None, message)
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value: serde_json::Value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        ctx.error(
            path_string(e.path()),
            format!("invalid JSON: {}", e.inner()),
        )
    })?;
    de.end()
        .map_err(|e| ctx.error(None, format!("invalid JSON: {e}")))?;
    Ok(value)
}

/// Deserialize a typed view of a JSON value, with the JSON path of a mismatch.
pub(crate) fn typed<T: DeserializeOwned>(
    value: serde_json::Value,
    ctx: &RecordCtx<'_>,
    what: &str,
) -> Result<T, ImportError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        ctx.error(
            path_string(e.path()),
            format!(
                "not a valid {what} record: {}",
                plain_message(&e.inner().to_string())
            ),
        )
    })
}

/// serde's message with what it expected said in JSON terms: serde names the Rust type it was
/// filling (`expected struct GroundTruth`, `untagged enum Text`, `expected usize`), which means
/// nothing to someone fixing a file.
pub(crate) fn plain_message(message: &str) -> String {
    const UNTAGGED: &str = "data did not match any variant of untagged enum ";
    if let Some(at) = message.find(UNTAGGED) {
        let rest = &message[at + UNTAGGED.len()..];
        let name_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        return format!(
            "{}the value has none of the accepted JSON types{}",
            &message[..at],
            &rest[name_end..]
        );
    }
    // `invalid type: X, expected Y[ at line L column C]`: serde's word for X when it is not
    // data (`sequence`, `map`, `unit value`), and Y, are rewritten; quoted data is left alone.
    const WORDS: [(&str, &str); 5] = [
        ("invalid type: sequence,", "invalid type: array,"),
        ("invalid type: map,", "invalid type: object,"),
        ("invalid type: unit value,", "invalid type: null,"),
        ("invalid value: sequence,", "invalid value: array,"),
        ("invalid value: map,", "invalid value: object,"),
    ];
    let message = WORDS
        .iter()
        .find(|(from, _)| message.starts_with(from))
        .map(|(from, to)| format!("{to}{}", &message[from.len()..]))
        .unwrap_or_else(|| message.to_string());
    let Some(at) = message.rfind("expected ") else {
        return message;
    };
    let start = at + "expected ".len();
    let end = message[start..]
        .find(" at line ")
        .map(|i| start + i)
        .unwrap_or(message.len());
    let expected = &message[start..end];
    let plain = match expected.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["struct", name] if is_rust_name(name) => "a JSON object",
        ["struct", "variant", ..] | ["tuple", "variant", ..] => "a JSON object",
        ["enum", name] if is_rust_name(name) => "one of the accepted values",
        ["tuple", "struct", ..] => "a JSON array",
        ["usize" | "u64" | "u32" | "u16" | "u8" | "u128"] => "a non-negative integer",
        ["isize" | "i64" | "i32" | "i16" | "i8" | "i128"] => "an integer",
        ["f64" | "f32"] => "a number",
        ["a", "borrowed", "string"] => "a string",
        ["a", "sequence"] => "a JSON array",
        ["a", "map"] => "a JSON object",
        ["unit"] => "null",
        ["variant", "identifier"] | ["field", "identifier"] => "one of the accepted names",
        ["a", "tuple", ..] | ["tuple", ..] => "a JSON array",
        _ => return message,
    };
    format!("{}{plain}{}", &message[..start], &message[end..])
}

fn is_rust_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A UTF-8 byte-order mark, which some editors put at the start of a file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// `bytes` without a leading UTF-8 byte-order mark.
pub(crate) fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes)
}

/// The error for input that starts with a UTF-16 or UTF-32 byte-order mark (maslens reads UTF-8).
fn wide_encoding(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x00, 0x00, 0xFE, 0xFF, ..] | [0xFF, 0xFE, 0x00, 0x00, ..] => Some(
            "the input is UTF-32 encoded (it starts with a UTF-32 byte-order mark): convert it to UTF-8, e.g. `iconv -f UTF-32 -t UTF-8`",
        ),
        [0xFE, 0xFF, ..] | [0xFF, 0xFE, ..] => Some(
            "the input is UTF-16 encoded (it starts with a UTF-16 byte-order mark): convert it to UTF-8, e.g. `iconv -f UTF-16 -t UTF-8`",
        ),
        _ => None,
    }
}

/// Detect the format of one parsed record.
pub fn detect(value: &serde_json::Value) -> Option<Format> {
    use serde_json::Value;
    match value {
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
(`input.conversation_history`), a Who&When record (`history`, `mistake_agent`) or a chat transcript \
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
    TraceReader {
        format,
        files: files(paths, is_trace_file),
        current: None,
        threads: None,
    }
}

/// The files under several paths, in the order given, walked as the trace reader walks them
/// (natural name order, hidden entries below a named path left out, symlinks followed and loops
/// ended, a directory reached twice read once). A named path is always returned; below it, the
/// regular files `wanted` accepts. Other readers of input trees (OTLP exports) walk with this.
pub fn files(paths: &[PathBuf], wanted: fn(&Path) -> bool) -> Files {
    Files {
        roots: paths.iter().rev().cloned().collect(),
        walk: None,
        visited: Default::default(),
        wanted,
    }
}

/// Iterator of [`files`]: each file, or the error of a path that cannot be walked or listed.
pub struct Files {
    /// Named paths still to walk (popped from the end).
    roots: Vec<PathBuf>,
    /// The walk under the named path being walked.
    walk: Option<Walk>,
    /// Directories already walked (canonical paths), so symlink loops end.
    visited: std::collections::HashSet<PathBuf>,
    wanted: fn(&Path) -> bool,
}

impl Iterator for Files {
    type Item = Result<PathBuf, ImportError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(walk) = &mut self.walk else {
                let root = self.roots.pop()?;
                self.walk = Some(walk_under(&root));
                continue;
            };
            let entry = match walk.next() {
                Some(Ok(entry)) => entry,
                Some(Err(e)) => match walk_error(e, self.wanted) {
                    Some(err) => return Some(Err(err)),
                    None => continue,
                },
                None => {
                    self.walk = None;
                    continue;
                }
            };
            // A path named by the caller is always read (a pipe such as `<(zcat x.jsonl.gz)`
            // included); below a directory only regular wanted files are.
            let explicit = entry.depth() == 0;
            if entry.file_type().is_dir() {
                // A directory reached twice (two links to it, or named twice) is read once.
                if let Ok(canonical) = std::fs::canonicalize(entry.path()) {
                    if !self.visited.insert(canonical) {
                        walk.skip_current_dir();
                    }
                }
                continue;
            }
            let regular = entry.file_type().is_file();
            let path = entry.into_path();
            if explicit || (regular && (self.wanted)(&path)) {
                return Some(Ok(path));
            }
        }
    }
}

/// The walk under one named path: symlinks followed (loops end: walkdir reports a link back to
/// an ancestor, which is skipped), entries in natural name order, hidden entries below the
/// named path left out.
type Walk = walkdir::FilterEntry<walkdir::IntoIter, fn(&walkdir::DirEntry) -> bool>;

fn walk_under(root: &Path) -> Walk {
    fn shown(e: &walkdir::DirEntry) -> bool {
        e.depth() == 0 || !is_hidden(e.path())
    }
    walkdir::WalkDir::new(root)
        .follow_links(true)
        .sort_by(|a, b| natural_cmp(a.path(), b.path()))
        .into_iter()
        .filter_entry(shown as fn(&walkdir::DirEntry) -> bool)
}

/// Streaming iterator over the records of files and directories; see [`read_path`].
pub struct TraceReader {
    format: Format,
    /// The trace files still to read.
    files: Files,
    /// Parser threads for large line-per-record files (`None`: [`parser_threads`]).
    threads: Option<usize>,
    current: Option<FileRecords>,
}

impl TraceReader {
    /// Use `n` parser threads for large line-per-record files (1: parse on the calling thread).
    /// Records come out in file order whatever `n` is.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n.max(1));
        self
    }

    /// The file currently being read, if any.
    pub fn current_file(&self) -> Option<&str> {
        self.current.as_ref().map(|c| c.display.as_str())
    }
}

fn is_trace_file(p: &Path) -> bool {
    matches!(
        p.extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref(),
        Some("json" | "jsonl" | "ndjson")
    )
}

fn is_hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

impl Iterator for TraceReader {
    type Item = Result<Imported, ImportError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(cur) = &mut self.current {
                match cur.next_record() {
                    Some(item) => return Some(item),
                    None => self.current = None,
                }
            }
            let path = match self.files.next()? {
                Ok(path) => path,
                Err(e) => return Some(Err(e)),
            };
            let display = path.display().to_string();
            match FileRecords::open(
                path,
                display,
                self.format,
                self.threads.unwrap_or_else(parser_threads),
            ) {
                Ok(fr) => self.current = Some(fr),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The error for a failed walk step, or `None` for what is skipped silently: a link back to a
/// directory being walked, and (below the named path) entries that are neither a directory nor
/// a wanted file, such as a dangling `notes.txt` link.
fn walk_error(e: walkdir::Error, wanted: fn(&Path) -> bool) -> Option<ImportError> {
    if e.loop_ancestor().is_some() {
        return None;
    }
    let path = e.path().map(Path::to_path_buf).unwrap_or_default();
    let listing = std::fs::metadata(&path).is_ok_and(|m| m.is_dir());
    if e.depth() > 0 && !listing && !wanted(&path) {
        return None;
    }
    let io = e
        .io_error()
        .map_or_else(|| e.to_string(), ToString::to_string);
    Some(ImportError {
        file: path.display().to_string(),
        record: None,
        path: None,
        message: if listing {
            format!("cannot list directory: {io}")
        } else {
            format!("cannot read: {io}")
        },
    })
}

/// Sort by name, with digit runs compared as numbers (`2.json` before `10.json`).
fn natural_cmp(a: &Path, b: &Path) -> std::cmp::Ordering {
    let a = a
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let b = b
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ka = natural_key(&a);
    let kb = natural_key(&b);
    ka.cmp(&kb).then_with(|| a.cmp(&b))
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Chunk {
    Num(u128, usize),
    Text(String),
}

fn natural_key(s: &str) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_digit() {
            let mut digits = String::new();
            while let Some(&d) = chars.peek() {
                if !d.is_ascii_digit() {
                    break;
                }
                digits.push(d);
                chars.next();
            }
            let trimmed = digits.trim_start_matches('0');
            match trimmed.parse::<u128>() {
                Ok(n) => out.push(Chunk::Num(n, digits.len())),
                Err(_) if trimmed.is_empty() => out.push(Chunk::Num(0, digits.len())),
                Err(_) => out.push(Chunk::Text(digits)),
            }
        } else {
            let mut text = String::new();
            while let Some(&d) = chars.peek() {
                if d.is_ascii_digit() {
                    break;
                }
                text.push(d);
                chars.next();
            }
            out.push(Chunk::Text(text));
        }
    }
    out
}

enum Body {
    /// One record per line; `pending` holds an already-read first line.
    Lines {
        reader: BufReader<File>,
        pending: Option<(u64, Vec<u8>)>,
    },
    /// One record per line, parsed on worker threads.
    Parallel(pipeline::Pipeline),
    /// The whole file is one document, not yet parsed.
    Whole(Vec<u8>),
    Done,
}

struct FileRecords {
    path: PathBuf,
    display: String,
    format: Format,
    line: u64,
    buf: Vec<u8>,
    body: Body,
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| b.is_ascii_whitespace())
}

impl FileRecords {
    fn open(
        path: PathBuf,
        display: String,
        format: Format,
        workers: usize,
    ) -> Result<Self, ImportError> {
        let io_err = |e: std::io::Error| ImportError {
            file: display.clone(),
            record: None,
            path: None,
            message: format!("cannot read: {e}"),
        };
        let file = File::open(&path).map_err(io_err)?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let force_lines = matches!(
            path.extension()
                .and_then(|e| e.to_str())
                .map(|e| e.to_ascii_lowercase())
                .as_deref(),
            Some("jsonl" | "ndjson")
        );
        // Sniff: skip blank lines, read the first non-blank one.
        let mut line = 0u64;
        let mut first = Vec::new();
        loop {
            first.clear();
            let n = reader.read_until(b'\n', &mut first).map_err(io_err)?;
            if n == 0 {
                break;
            }
            line += 1;
            if line == 1 {
                if let Some(message) = wide_encoding(&first) {
                    return Err(ImportError {
                        file: display.clone(),
                        record: None,
                        path: None,
                        message: message.into(),
                    });
                }
                if first.starts_with(UTF8_BOM) {
                    first.drain(..UTF8_BOM.len());
                }
            }
            if !is_blank(&first) {
                break;
            }
        }
        let body = if first.is_empty() || is_blank(&first) {
            if force_lines {
                Body::Done
            } else {
                Body::Whole(first)
            }
        } else if force_lines || serde_json::from_slice::<serde::de::IgnoredAny>(&first).is_ok() {
            Body::Lines {
                reader,
                pending: Some((line, first)),
            }
        } else {
            // One JSON document spread over several lines: read it whole.
            // Leading blank lines are kept so that error line numbers match the file.
            let mut all = vec![b'\n'; line.saturating_sub(1) as usize];
            all.extend_from_slice(&first);
            reader.read_to_end(&mut all).map_err(io_err)?;
            Body::Whole(all)
        };
        let mut format = format;
        let body = match body {
            Body::Lines { reader, pending } => {
                // Resolve `auto` from the first record so that parser threads share one format.
                if format == Format::Auto {
                    if let Some((_, first)) = &pending {
                        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(first) {
                            if let Some(f) = detect(&v) {
                                format = f;
                            }
                        }
                    }
                }
                let size = reader.get_ref().metadata().map(|m| m.len()).unwrap_or(0);
                if format != Format::Auto && workers > 1 && size >= pipeline::PARALLEL_MIN_BYTES {
                    Body::Parallel(pipeline::Pipeline::start(
                        reader,
                        pending,
                        path.clone(),
                        display.clone(),
                        format,
                        workers,
                    ))
                } else {
                    Body::Lines { reader, pending }
                }
            }
            other => other,
        };
        Ok(FileRecords {
            path,
            display,
            format,
            line: 0,
            buf: Vec::new(),
            body,
        })
    }

    fn next_record(&mut self) -> Option<Result<Imported, ImportError>> {
        match std::mem::replace(&mut self.body, Body::Done) {
            Body::Done => None,
            Body::Parallel(mut p) => {
                let item = p.next();
                if item.is_some() {
                    self.body = Body::Parallel(p);
                }
                item
            }
            Body::Whole(bytes) => {
                let ctx = RecordCtx {
                    file: &self.display,
                    path: Some(&self.path),
                    line: None,
                };
                if is_blank(&bytes) {
                    return Some(Err(ctx.error(None, "empty file: expected a JSON document")));
                }
                Some(parse_record(&bytes, self.format, &ctx))
            }
            Body::Lines {
                mut reader,
                mut pending,
            } => loop {
                let line_no;
                if let Some((n, bytes)) = pending.take() {
                    line_no = n;
                    self.buf = bytes;
                } else {
                    self.buf.clear();
                    match reader.read_until(b'\n', &mut self.buf) {
                        Ok(0) => return None,
                        Ok(_) => {
                            self.line += 1;
                            line_no = self.line;
                        }
                        Err(e) => {
                            return Some(Err(ImportError {
                                file: self.display.clone(),
                                record: Some(format!("line {}", self.line + 1)),
                                path: None,
                                message: format!("cannot read: {e}"),
                            }))
                        }
                    }
                }
                self.line = self.line.max(line_no);
                if is_blank(&self.buf) {
                    continue;
                }
                let ctx = RecordCtx {
                    file: &self.display,
                    path: Some(&self.path),
                    line: Some(line_no),
                };
                let (fmt, result) = parse_record_detect(&self.buf, self.format, &ctx);
                if self.format == Format::Auto && result.is_ok() {
                    self.format = fmt;
                }
                self.body = Body::Lines { reader, pending };
                return Some(result);
            },
        }
    }
}

/// Read records from a stream (stdin): one record per line, as a `.jsonl` file, or one JSON
/// document spread over several lines (a pretty-printed trace), as a file whose first line is
/// not a complete JSON value. A UTF-8 byte-order mark is skipped; UTF-16 input is refused with
/// a message saying so.
///
/// When the first non-blank line is not a complete JSON value, the stream is read whole: if it
/// parses as one document, or its second non-blank line is not a complete value either (a
/// document with a mistake in it: one error for the document, not one per line), it is one
/// record; otherwise it is read line by line (a JSONL stream whose first record is broken).
pub fn read_lines<R: BufRead + 'static>(
    reader: R,
    name: String,
    format: Format,
) -> impl Iterator<Item = Result<Imported, ImportError>> {
    let mut format = format;
    let mut lines = StreamLines {
        reader: Box::new(reader),
        line_no: 0,
    };
    let mut buf = Vec::new();
    let mut started = false;
    let mut done = false;
    std::iter::from_fn(move || loop {
        if done {
            return None;
        }
        buf.clear();
        match lines.next(&mut buf) {
            Ok(false) => return None,
            Ok(true) => {}
            Err(e) => {
                done = true;
                return Some(Err(ImportError {
                    file: name.clone(),
                    record: Some(format!("line {}", lines.line_no + 1)),
                    path: None,
                    message: format!("cannot read: {e}"),
                }));
            }
        }
        if lines.line_no == 1 {
            if let Some(message) = wide_encoding(&buf) {
                done = true;
                return Some(Err(ImportError {
                    file: name.clone(),
                    record: None,
                    path: None,
                    message: message.into(),
                }));
            }
            if buf.starts_with(UTF8_BOM) {
                buf.drain(..UTF8_BOM.len());
            }
        }
        if is_blank(&buf) {
            continue;
        }
        if !started {
            started = true;
            if serde_json::from_slice::<serde::de::IgnoredAny>(&buf).is_err() {
                match whole_or_lines(&mut lines, &buf) {
                    Ok(Some(document)) => {
                        done = true;
                        let ctx = RecordCtx {
                            file: &name,
                            path: None,
                            line: None,
                        };
                        return Some(parse_record(&document, format, &ctx));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        done = true;
                        return Some(Err(ImportError {
                            file: name.clone(),
                            record: None,
                            path: None,
                            message: format!("cannot read: {e}"),
                        }));
                    }
                }
            }
        }
        let ctx = RecordCtx {
            file: &name,
            path: None,
            line: Some(lines.line_no),
        };
        let (fmt, result) = parse_record_detect(&buf, format, &ctx);
        if format == Format::Auto && result.is_ok() {
            format = fmt;
        }
        return Some(result);
    })
}

/// The lines of a stream, counted; after [`whole_or_lines`] chose lines, served from memory.
struct StreamLines {
    reader: Box<dyn BufRead>,
    line_no: u64,
}

impl StreamLines {
    /// Read the next line into `buf`; `false` at the end.
    fn next(&mut self, buf: &mut Vec<u8>) -> std::io::Result<bool> {
        let n = self.reader.read_until(b'\n', buf)?;
        if n > 0 {
            self.line_no += 1;
        }
        Ok(n > 0)
    }
}

/// The first non-blank line `first` (line `lines.line_no`) is not a complete JSON value: read
/// the rest and decide. `Some(document)`: the stream is one document (leading blank lines kept
/// as newlines, so error line numbers match the input); `None`: go on line by line (the rest is
/// then served from memory).
fn whole_or_lines(lines: &mut StreamLines, first: &[u8]) -> std::io::Result<Option<Vec<u8>>> {
    let mut rest = Vec::new();
    lines.reader.read_to_end(&mut rest)?;
    let mut document = vec![b'\n'; lines.line_no.saturating_sub(1) as usize];
    document.extend_from_slice(first);
    document.extend_from_slice(&rest);
    let one_value = serde_json::from_slice::<serde::de::IgnoredAny>(&document).is_ok();
    let second_is_value = rest
        .split(|b| *b == b'\n')
        .find(|l| !is_blank(l))
        .is_some_and(|l| serde_json::from_slice::<serde::de::IgnoredAny>(l).is_ok());
    if one_value || !second_is_value {
        return Ok(Some(document));
    }
    lines.reader = Box::new(std::io::Cursor::new(rest));
    Ok(None)
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
    fn natural_order() {
        let mut v: Vec<PathBuf> = ["10.json", "2.json", "1.json", "b", "a10", "a9"]
            .iter()
            .map(PathBuf::from)
            .collect();
        v.sort_by(|a, b| natural_cmp(a, b));
        let names: Vec<_> = v.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, ["1.json", "2.json", "10.json", "a9", "a10", "b"]);
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
