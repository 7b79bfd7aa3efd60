//! OTLP export files: what the OpenTelemetry Collector's `file` exporter writes (OTLP/JSON, one
//! `ExportTraceServiceRequest` per line), a single OTLP/JSON document, or a protobuf request
//! (`.pb`, `.binpb`, `.protobuf`). Directories are walked in name order. A line that is not a
//! request is a problem naming the file and line; the rest of the file is read.

use crate::decode::{decode_request_spans, Encoding};
use crate::span::{flatten, SpanRecord};
use std::path::{Path, PathBuf};

/// No single request may be larger than this (the server's default body limit too).
pub const MAX_REQUEST_BYTES: usize = 64 << 20;

/// A record that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    /// `line N`, or `span SPAN_ID` for a rejected span.
    pub record: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.record {
            Some(r) => write!(f, "{}: {r}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Spans read from export files, and what could not be read.
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub spans: Vec<SpanRecord>,
    pub problems: Vec<Problem>,
}

fn is_protobuf(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("pb" | "binpb" | "protobuf")
    )
}

fn is_export_file(p: &Path) -> bool {
    is_protobuf(p)
        || matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("json" | "jsonl" | "ndjson")
        )
}

impl Read {
    fn add(&mut self, file: &str, record: Option<String>, bytes: &[u8], encoding: Encoding) {
        match decode_request_spans(bytes, encoding, None, MAX_REQUEST_BYTES) {
            Ok(decoded) => {
                if decoded.repaired_text > 0 {
                    self.problems.push(Problem {
                        file: file.to_string(),
                        record: record.clone(),
                        message: decoded.repair_message(),
                    });
                }
                let mut f = flatten(&decoded.request);
                f.rejected.extend(decoded.rejected);
                self.spans.extend(f.spans);
                self.problems
                    .extend(f.rejected.into_iter().map(|r| Problem {
                        file: file.to_string(),
                        record: Some(match (&record, r.span_id) {
                            (Some(rec), Some(id)) => format!("{rec}: span {id}"),
                            (None, Some(id)) => format!("span {id}"),
                            (rec, None) => rec.clone().unwrap_or_else(|| "a span".into()),
                        }),
                        message: r.reason,
                    }));
            }
            Err(e) => self.problems.push(Problem {
                file: file.to_string(),
                record,
                message: e.to_string(),
            }),
        }
    }
}

/// Read every span of the export files under `paths`.
pub fn read_paths(paths: &[PathBuf]) -> Read {
    let mut read = Read::default();
    // Walked exactly as the trace reader walks its inputs (maslens_trace::import::files).
    for item in maslens_trace::import::files(paths, is_export_file) {
        let path = match item {
            Ok(path) => path,
            Err(e) => {
                read.problems.push(Problem {
                    file: e.file,
                    record: e.record,
                    message: e.message,
                });
                continue;
            }
        };
        let name = path.display().to_string();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                read.problems.push(Problem {
                    file: name,
                    record: None,
                    message: e.to_string(),
                });
                continue;
            }
        };
        if is_protobuf(&path) {
            read.add(&name, None, &bytes, Encoding::Protobuf);
            continue;
        }
        // One request per line (collector file exporter), else the whole file as one document.
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        let per_line = lines
            .first()
            .is_some_and(|(_, l)| serde_json::from_str::<serde_json::Value>(l).is_ok());
        if per_line {
            for (i, line) in lines {
                read.add(
                    &name,
                    Some(format!("line {}", i + 1)),
                    line.as_bytes(),
                    Encoding::Json,
                );
            }
        } else {
            read.add(&name, None, &bytes, Encoding::Json);
        }
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_request;
    use prost::Message;

    const LINE: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"chat","startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}]},{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"","name":"no id"}]}]}]}"#;

    #[test]
    fn lines_documents_protobuf_and_problems() {
        let dir = std::env::temp_dir().join(format!("maslens-otlp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.jsonl"), format!("{LINE}\nnot json\n\n{LINE}\n")).unwrap();
        let pretty: serde_json::Value = serde_json::from_str(LINE).unwrap();
        std::fs::write(
            dir.join("b.json"),
            serde_json::to_string_pretty(&pretty).unwrap(),
        )
        .unwrap();
        let req = decode_request(LINE.as_bytes(), Encoding::Json, None, 1 << 20).unwrap();
        std::fs::write(dir.join("c.pb"), req.encode_to_vec()).unwrap();
        std::fs::write(dir.join("notes.txt"), "skipped").unwrap();
        // A link back to the directory ends (the shared walker of maslens_trace::import::files).
        #[cfg(unix)]
        std::os::unix::fs::symlink(&dir, dir.join("loop")).unwrap();
        let read = read_paths(std::slice::from_ref(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read.spans.len(), 4, "2 lines + 1 document + 1 protobuf");
        let problems: Vec<String> = read.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(
            problems[0].ends_with("a.jsonl: line 1: span id has 0 bytes, not 8")
                || problems[0].contains("line 1"),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("a.jsonl: line 2: the JSON body")),
            "{problems:?}"
        );
        let missing = read_paths(&[PathBuf::from("/nonexistent/x.json")]);
        assert_eq!(missing.problems.len(), 1);
    }
}
