//! The fuzz targets' bodies, one function per target: any bytes must give a value or an error,
//! never a panic, and what is accepted must keep the invariants each function asserts.
//!
//! The libFuzzer binaries in `fuzz_targets/` call these functions; the stable test
//! `crates/cli/tests/fuzz_corpus.rs` includes this file with `#[path]` and runs every target over
//! its seed corpus (`fuzz/seeds/<target>/`), the committed regressions (`fuzz/regressions/`) and a
//! few thousand seeded mutations of the seeds, so CI replays them without nightly or libFuzzer.
//! Only crates the `maslens` CLI package also depends on are used here.

use maslens_trace::import::{parse_record, read_lines, read_path, Format, RecordCtx};
use serde_json::Value;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target: its name (the directory of its seeds) and its body.
pub const TARGETS: &[(&str, Target)] = &[
    ("whowhen", whowhen),
    ("aegis", aegis),
    ("mad", mad),
    ("chat", chat),
    ("native", native),
    ("auto", auto),
    ("otlp", otlp),
    ("json_extract", json_extract),
    ("typed_answer", typed_answer),
    ("serve_request", serve_request),
    ("serve_tools", serve_tools),
];

/// What an importer accepts must survive native export and import unchanged.
fn round_trips(trace: &maslens_trace::Trace) {
    let line = maslens_trace::export::to_jsonl_line(trace).expect("a trace serializes");
    let back = parse_record(line.as_bytes(), Format::Native, &RecordCtx::memory("fuzz"))
        .expect("native output reads back");
    assert_eq!(&back.trace, trace, "native round trip changed the trace");
    assert_eq!(
        maslens_trace::export::to_jsonl_line(&back.trace).expect("a trace serializes"),
        line,
        "native output is not stable"
    );
}

fn importer(data: &[u8], format: Format) {
    if let Ok(imp) = parse_record(data, format, &RecordCtx::memory("fuzz")) {
        round_trips(&imp.trace);
    }
}

/// The Who&When importer.
pub fn whowhen(data: &[u8]) {
    importer(data, Format::WhoWhen)
}

/// The Aegis-Bench importer.
pub fn aegis(data: &[u8]) {
    importer(data, Format::Aegis)
}

/// The MAD (MAST) importer.
pub fn mad(data: &[u8]) {
    importer(data, Format::Mad)
}

/// The chat-transcript importer.
pub fn chat(data: &[u8]) {
    importer(data, Format::Chat)
}

/// The native reader.
pub fn native(data: &[u8]) {
    importer(data, Format::Native)
}

/// Format detection, the stream reader (stdin: JSONL or one pretty-printed document) and the
/// file reader (the bytes as a `.json` and as a `.jsonl` file), each with `--format auto`.
pub fn auto(data: &[u8]) {
    importer(data, Format::Auto);
    let stream = std::io::Cursor::new(data.to_vec());
    for imp in read_lines(stream, "<stdin>".into(), Format::Auto).flatten() {
        round_trips(&imp.trace);
    }
    let dir = std::env::temp_dir().join(format!("maslens-fuzz-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    for name in ["in.json", "in.jsonl"] {
        let p = dir.join(name);
        if std::fs::write(&p, data).is_ok() {
            for imp in read_path(&p, Format::Auto).flatten() {
                round_trips(&imp.trace);
            }
        }
    }
}

/// The OTLP importer (`maslens import` of collector export files, `maslens serve`'s
/// `/v1/traces`): a request body as protobuf, as JSON, and gzipped when it says so, then spans
/// flattened and assembled into traces, each of which must round-trip through native.
pub fn otlp(data: &[u8]) {
    use maslens_otlp::decode::decode_request;
    use maslens_otlp::Encoding;
    const LIMIT: usize = 1 << 20;
    for (encoding, gzip) in [
        (Encoding::Protobuf, None),
        (Encoding::Json, None),
        (Encoding::Protobuf, Some("gzip")),
    ] {
        if let Ok(req) = decode_request(data, encoding, gzip, LIMIT) {
            let flat = maslens_otlp::span::flatten(&req);
            let _ = flat.rejection_message();
            for trace in maslens_otlp::assemble::traces(&flat.spans) {
                round_trips(&trace);
            }
        }
    }
}

/// The JSON extractor (`maslens_llm::structured`): the JSON answer in a model's text.
pub fn json_extract(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let candidates = maslens_llm::structured::json_candidates(&text);
    for c in &candidates {
        assert!(
            c.is_object() || c.is_array(),
            "a candidate that is not an object or array: {c}"
        );
    }
    assert_eq!(
        maslens_llm::structured::extract_json(&text).as_ref(),
        candidates.first(),
        "extract_json is not the first candidate"
    );
}

/// The structured-output parser (`maslens_llm::typed`) on the answer types the methods read:
/// a location (Judge, Evaluators, with and without error modes) and a detector answer. The first
/// byte picks the finish reason; the rest is the model's text. An accepted answer validates
/// against its schema.
pub fn typed_answer(data: &[u8]) {
    use maslens_implicit::detect::{detect_schema, DetectAnswer};
    use maslens_llm::typed::parse_answer;
    use maslens_locate::judge::location_schema;
    use maslens_locate::LocationAnswer;
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let finish = if first & 1 == 0 { "stop" } else { "length" };
    let text = String::from_utf8_lossy(rest);
    for schema in [
        location_schema(&[]),
        location_schema(&["F1".to_string(), "F2".to_string()]),
    ] {
        match parse_answer::<LocationAnswer>(&text, finish, &schema) {
            Ok(a) => assert!(a.confidence.is_finite(), "a non-finite confidence passed"),
            Err(e) => assert!(!e.is_empty(), "an empty parse error"),
        }
    }
    let schema = detect_schema(8);
    if let Ok(a) = parse_answer::<DetectAnswer>(&text, finish, &schema) {
        assert!(a.implicit_failures.len() <= 8, "maxItems not held");
        for e in &a.implicit_failures {
            let _ = maslens_implicit::detect::parse_event(e);
        }
    }
    // The untyped path (`complete_json`'s validation) on every candidate.
    for c in maslens_llm::structured::json_candidates(&text) {
        let _ = maslens_llm::structured::validate(&c, &schema);
    }
}

/// The serve-model request parser (`maslens_server::parse_request`, the body of
/// `POST /v1/chat/completions`) and the checks a request's schema or grammar passes before the
/// embedded model sees it (`schema_check`, `schema_budget`, `schema_order`).
pub fn serve_request(data: &[u8]) {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(parsed) = maslens_server::parse_request(&body) else {
        return;
    };
    let r = &parsed.request;
    assert!(!r.messages.is_empty(), "a request without messages passed");
    assert!(r.max_tokens >= 1, "max_tokens 0 passed");
    if let Some(g) = &r.grammar {
        let _ = maslens_llm::schema_check::check_grammar(g);
    } else if let Some(schema) = &r.json_schema {
        if maslens_llm::schema_check::check_schema(schema).is_ok() {
            let fitted = maslens_llm::schema_budget::for_grammar(schema, r.max_tokens);
            let text = maslens_llm::schema_order::to_string(fitted.as_ref().unwrap_or(schema));
            // serde_json's float_roundtrip is on (maslens-trace asks for it), so numbers
            // come back exact.
            let back: Value = serde_json::from_str(&text).expect("schema_order writes JSON");
            assert_eq!(
                &back,
                fitted.as_ref().unwrap_or(schema),
                "schema_order changed the schema"
            );
        }
    }
}

/// Function calling in serve-model (`maslens_server::tools`): the bytes up to the first NUL are a
/// request body, the rest a model's answer. A request with tools is parsed, its call schema
/// checked, and the answer read for calls; every call found names an allowed function and
/// carries its arguments as a string.
pub fn serve_tools(data: &[u8]) {
    use maslens_server::tools;
    let (body, answer) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    if let Some(calls) = obj.get("tool_calls") {
        let _ = tools::calls_as_text(calls, 0);
    }
    let _ = maslens_server::parse_request(&Value::Object(obj.clone()));
    let Ok(Some(t)) = tools::parse_tools(obj.get("tools"), obj.get("tool_choice")) else {
        return;
    };
    let _ = t.instructions();
    if let Some(schema) = t.call_schema() {
        assert!(t.forces_call(), "a call schema without a forced call");
        let _ = maslens_llm::schema_check::check_schema(&schema);
    }
    let answer = String::from_utf8_lossy(answer);
    if let Some(calls) = t.calls_in(&answer, "call") {
        for c in calls {
            let name = c["function"]["name"].as_str().expect("a call has a name");
            assert!(
                t.functions.iter().any(|f| f.name == name),
                "a call to {name:?}, which the request did not list"
            );
            assert!(
                c["function"]["arguments"].is_string(),
                "arguments not a string"
            );
        }
    }
}
