//! Reading records: one file (whole or line per record, with parser threads for large
//! line files) and streams such as stdin ([`read_lines`]).

use super::json::{wide_encoding, UTF8_BOM};
use super::parser_threads;
use super::walk::Files;
use super::{
    detect, parse_record, parse_record_detect, pipeline, Format, ImportError, Imported, RecordCtx,
};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

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
    pub(super) fn new(format: Format, files: Files) -> Self {
        TraceReader {
            format,
            files,
            current: None,
            threads: None,
        }
    }

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
