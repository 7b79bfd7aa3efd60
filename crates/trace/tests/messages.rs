//! Issue 16 item 10: import errors speak JSON, not Rust. A byte-order mark is skipped (it was
//! "expected value at line 1 column 1"), UTF-16 input is named as such, a wrong type anywhere in
//! a record says which JSON type was expected (it said "expected struct GroundTruth" or "did not
//! match any variant of untagged enum Text"), and a pretty-printed document on a stream is one
//! record (it was one error per line).

use maslens_trace::import::{parse_record, read_lines, read_path, Format, RecordCtx};
use serde_json::{json, Value};

/// Words of serde's messages that name Rust types.
const RUST_WORDS: [&str; 12] = [
    "struct ",
    "enum ",
    "variant of",
    "usize",
    "u64",
    "u32",
    "i64",
    "f64",
    "tuple",
    "sequence",
    "a map",
    "borrowed",
];

fn records() -> Vec<(Format, Value)> {
    let native = serde_json::to_value(
        maslens_trace::TraceBuilder::new("n1")
            .steps(&["Planner", "Coder"])
            .build(),
    )
    .unwrap();
    vec![
        (Format::Native, native),
        (
            Format::WhoWhen,
            json!({"question": "q", "ground_truth": "a", "mistake_agent": "Coder",
                   "mistake_step": "1", "mistake_reason": "r", "is_correct": false,
                   "history": [{"content": "c", "role": "user", "name": "human"},
                               {"content": "d", "role": "assistant", "name": "Coder"}]}),
        ),
        (
            Format::Aegis,
            json!({"id": "a1", "metadata": {"framework": "x"},
                   "input": {"query": "q", "conversation_history": [
                       {"step": 1, "agent_name": "A", "content": "c", "phase": "p", "agent_role": "r"}]},
                   "output": {"faulty_agents": [{"agent_name": "A", "error_type": "FM-1.1"}]},
                   "ground_truth": {"correct_answer": "x", "injected_agents": [], "is_injection_successful": true}}),
        ),
        (
            Format::Chat,
            json!({"id": "c1", "messages": [
                {"role": "user", "content": "hi", "name": "u", "timestamp": "t"},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}],
                 "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}]}]}),
        ),
    ]
}

/// Every JSON path of a value (objects and arrays included), as pointer segments.
fn paths(v: &Value, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let mut p = prefix.clone();
                p.push(k.clone());
                paths(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let mut p = prefix.clone();
                p.push(i.to_string());
                paths(x, p, out);
            }
        }
        _ => {}
    }
}

fn pointer(p: &[String]) -> String {
    p.iter().map(|s| format!("/{s}")).collect()
}

#[test]
fn a_wrong_type_anywhere_is_named_in_json_terms() {
    let wrong = [
        json!({"x": 1}),
        json!([1, 2]),
        json!(3),
        json!(-2.5),
        json!("text"),
        json!(true),
    ];
    let mut errors = 0;
    for (format, record) in records() {
        let mut all = Vec::new();
        paths(&record, Vec::new(), &mut all);
        for path in all.iter().filter(|p| !p.is_empty()) {
            for w in &wrong {
                let mut v = record.clone();
                *v.pointer_mut(&pointer(path)).unwrap() = w.clone();
                let bytes = serde_json::to_vec(&v).unwrap();
                let Err(e) = parse_record(&bytes, format, &RecordCtx::memory("r.json")) else {
                    continue;
                };
                errors += 1;
                let message = e.to_string();
                for word in RUST_WORDS {
                    assert!(
                        !message.contains(word),
                        "{format} with {} = {w}: {message}",
                        pointer(path)
                    );
                }
            }
        }
    }
    assert!(errors > 50, "the mutations produced errors ({errors})");
}

#[test]
fn the_untagged_and_nested_types_say_what_they_take() {
    let ctx = RecordCtx::memory("r.json");
    let mut aegis = records()[2].1.clone();
    aegis["ground_truth"] = json!("yes");
    let e = parse_record(&serde_json::to_vec(&aegis).unwrap(), Format::Aegis, &ctx).unwrap_err();
    assert_eq!(e.path.as_deref(), Some("ground_truth"), "{e}");
    assert!(e.message.contains("expected a JSON object"), "{e}");
    let mut ww = records()[1].1.clone();
    ww["question"] = json!({"text": "q"});
    let e = parse_record(&serde_json::to_vec(&ww).unwrap(), Format::WhoWhen, &ctx).unwrap_err();
    assert!(
        e.message
            .contains("expected a string, a number or a boolean"),
        "{e}"
    );
    let mut chat = records()[3].1.clone();
    chat["messages"][0]["content"] = json!({"x": 7});
    let e = parse_record(&serde_json::to_vec(&chat).unwrap(), Format::Chat, &ctx).unwrap_err();
    assert!(
        e.message
            .contains("expected a string or an array of text parts"),
        "{e}"
    );
    let mut native = records()[0].1.clone();
    native["steps"][0]["index"] = json!("first");
    let e = parse_record(&serde_json::to_vec(&native).unwrap(), Format::Native, &ctx).unwrap_err();
    assert!(e.message.contains("expected a non-negative integer"), "{e}");
}

#[test]
fn a_byte_order_mark_is_skipped_and_utf16_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let doc = serde_json::to_vec_pretty(&records()[1].1).unwrap();
    let line = serde_json::to_vec(&records()[0].1).unwrap();
    let bom = |b: &[u8]| [&[0xEF, 0xBB, 0xBF][..], b].concat();
    for (name, bytes) in [
        ("doc.json", bom(&doc)),
        ("line.json", bom(&line)),
        ("lines.jsonl", bom(&[&line[..], b"\n", &line[..]].concat())),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let items: Vec<_> = read_path(&p, Format::Auto).collect();
        assert!(
            !items.is_empty() && items.iter().all(|i| i.is_ok()),
            "{name}: {items:?}"
        );
    }
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(
            String::from_utf8(line.clone())
                .unwrap()
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    let p = dir.path().join("wide.json");
    std::fs::write(&p, &utf16).unwrap();
    let items: Vec<_> = read_path(&p, Format::Auto).collect();
    let e = items[0].as_ref().unwrap_err();
    assert!(e.message.contains("UTF-16"), "{e}");
    // The same on a stream.
    let items: Vec<_> = read_lines(
        std::io::Cursor::new(bom(&doc)),
        "<stdin>".into(),
        Format::Auto,
    )
    .collect();
    assert_eq!(items.len(), 1);
    assert!(items[0].is_ok(), "{:?}", items[0]);
    let items: Vec<_> =
        read_lines(std::io::Cursor::new(utf16), "<stdin>".into(), Format::Auto).collect();
    assert!(items[0].as_ref().unwrap_err().message.contains("UTF-16"));
}

#[test]
fn a_stream_holds_records_per_line_or_one_pretty_document() {
    let stream = |bytes: Vec<u8>| -> Vec<_> {
        read_lines(std::io::Cursor::new(bytes), "<stdin>".into(), Format::Auto).collect()
    };
    let doc = serde_json::to_vec_pretty(&records()[0].1).unwrap();
    let items = stream([b"\n".as_slice(), &doc].concat());
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].as_ref().unwrap().trace.id, "n1");
    // A mistake inside a pretty document: one error, with the document's line number.
    let mut broken = String::from_utf8(doc.clone()).unwrap();
    broken = broken.replacen("\"steps\"", "\"steps\" oops", 1);
    let items = stream(broken.into_bytes());
    assert_eq!(items.len(), 1, "{items:?}");
    let e = items[0].as_ref().unwrap_err();
    assert!(e.message.contains("line"), "{e}");
    // JSONL whose first record is broken: that line fails, the next ones are read.
    let line = serde_json::to_string(&records()[0].1).unwrap();
    let items = stream(format!("{{\"id\": \n{line}\n{line}\n").into_bytes());
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(items[0].is_err() && items[1].is_ok() && items[2].is_ok());
    assert_eq!(items[2].as_ref().unwrap().record.as_deref(), Some("line 3"));
}
