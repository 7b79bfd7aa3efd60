//! Writing traces in the native format.

use crate::model::Trace;
use std::io::Write;

/// One trace as one native JSONL line (without the newline).
pub fn to_jsonl_line(trace: &Trace) -> Result<String, serde_json::Error> {
    serde_json::to_string(trace)
}

/// Write one trace as one native JSONL line, newline included.
pub fn write_jsonl<W: Write>(mut w: W, trace: &Trace) -> std::io::Result<()> {
    serde_json::to_writer(&mut w, trace)?;
    w.write_all(b"\n")
}

/// One trace as a pretty-printed native JSON document.
pub fn to_json_pretty(trace: &Trace) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(trace)
}
