//! Tests as data for the chat, Aegis and Who&When importers: every record in
//! `tests/fixtures/import_cases/<format>.jsonl` (`{"case": ..., "record": ...}`) is imported and
//! the trace with its diagnostics, or the error, is pinned in a snapshot. Each case exercises one
//! branch of the mapping (header fields, outcome words, content parts, tool calls, label
//! matching, step numbering, error paths), so a refactor of an importer is checked line by line.

use maslens_trace::import::{parse_record, Format, RecordCtx};
use serde_json::{json, Value};
use std::path::PathBuf;

fn cases(name: &str) -> Vec<(String, Value)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import_cases")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["case"].as_str().unwrap().to_string(), v["record"].clone())
        })
        .collect()
}

/// `{case: {trace, diagnostics} | {error: {path, message}}}` for every case of the file.
fn imported(name: &str, format: Format) -> Value {
    let ctx = RecordCtx::memory("cases.jsonl");
    let mut out = serde_json::Map::new();
    for (case, record) in cases(name) {
        let bytes = serde_json::to_vec(&record).unwrap();
        let result = match parse_record(&bytes, format, &ctx) {
            Ok(imp) => json!({"trace": imp.trace, "diagnostics": imp.diagnostics}),
            Err(e) => json!({"error": {"path": e.path, "message": e.message}}),
        };
        out.insert(case, result);
    }
    Value::Object(out)
}

#[test]
fn chat_records_map_to_traces() {
    insta::assert_json_snapshot!(imported("chat.jsonl", Format::Chat));
}

#[test]
fn aegis_records_map_to_traces() {
    insta::assert_json_snapshot!(imported("aegis.jsonl", Format::Aegis));
}

#[test]
fn whowhen_records_map_to_traces() {
    insta::assert_json_snapshot!(imported("whowhen.jsonl", Format::WhoWhen));
}
