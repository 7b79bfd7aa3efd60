//! Text the store can hold. PostgreSQL refuses a NUL character in TEXT (and SQLite's search
//! tokenizers stop at one), so a span carrying one (in its name, service, an attribute key or
//! value, an event) would either fail its whole request or poison its run's assembly for good.
//! [`sanitize_span`] replaces each NUL with U+FFFD before anything is stored, and says so.

use maslens_otlp::span::SpanRecord;
use serde_json::{Map, Value};

/// The replacement for a character the store cannot hold.
pub const REPLACEMENT: char = '\u{FFFD}';

fn clean(s: &mut String) -> bool {
    if s.contains('\0') {
        *s = s.replace('\0', "\u{FFFD}");
        true
    } else {
        false
    }
}

fn clean_value(v: &mut Value) -> bool {
    match v {
        Value::String(s) => clean(s),
        Value::Array(a) => a.iter_mut().fold(false, |acc, x| clean_value(x) | acc),
        Value::Object(o) => clean_map(o),
        _ => false,
    }
}

fn clean_map(m: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    if m.keys().any(|k| k.contains('\0')) {
        let old = std::mem::take(m);
        for (mut k, v) in old {
            clean(&mut k);
            m.insert(k, v);
        }
        changed = true;
    }
    m.values_mut().fold(changed, |acc, v| clean_value(v) | acc)
}

fn value_has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(value_has_nul),
        Value::Object(o) => map_has_nul(o),
        _ => false,
    }
}

fn map_has_nul(m: &Map<String, Value>) -> bool {
    m.iter().any(|(k, v)| k.contains('\0') || value_has_nul(v))
}

/// Whether `span` has text the store cannot hold (checked without copying it).
pub fn needs_sanitizing(span: &SpanRecord) -> bool {
    let opt = |s: &Option<String>| s.as_deref().is_some_and(|s| s.contains('\0'));
    [&span.trace_id, &span.span_id, &span.name]
        .iter()
        .any(|s| s.contains('\0'))
        || opt(&span.parent_span_id)
        || opt(&span.error)
        || opt(&span.service)
        || map_has_nul(&span.attributes)
        || span
            .events
            .iter()
            .any(|e| e.name.contains('\0') || map_has_nul(&e.attributes))
}

/// Replace every NUL character of `span`'s text with U+FFFD; true when something changed.
pub fn sanitize_span(span: &mut SpanRecord) -> bool {
    let mut changed = false;
    for s in [&mut span.trace_id, &mut span.span_id, &mut span.name] {
        changed |= clean(s);
    }
    for s in [&mut span.parent_span_id, &mut span.error, &mut span.service]
        .into_iter()
        .flatten()
    {
        changed |= clean(s);
    }
    changed |= clean_map(&mut span.attributes);
    for e in &mut span.events {
        changed |= clean(&mut e.name);
        changed |= clean_map(&mut e.attributes);
    }
    changed
}

/// `s` with NUL characters replaced (for an error message stored as a run's reason).
pub fn storable(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// The longest run id the store keeps (conversation ids and imported ids). Every index entry of
/// an id stays far under PostgreSQL's 2,704-byte btree limit, and a page of runs stays small.
pub const MAX_ID_CHARS: usize = 256;

/// A conversation id as a run id: itself up to [`MAX_ID_CHARS`] characters; a longer one
/// becomes its first 200 characters, `~` and a 64-bit hash of the whole, so the spans of one
/// conversation still meet in one run and an index can hold it.
pub fn bounded_id(id: &str) -> std::borrow::Cow<'_, str> {
    if id.chars().count() <= MAX_ID_CHARS {
        return std::borrow::Cow::Borrowed(id);
    }
    let head: String = id.chars().take(200).collect();
    std::borrow::Cow::Owned(format!("{head}~{:016x}", maslens_trace::fnv1a(id)))
}

/// The agent name a search index row keeps: at most [`MAX_ID_CHARS`] characters (the trace
/// keeps the whole name; only the index entry is cut).
pub fn indexed_name(name: &str) -> &str {
    match name.char_indices().nth(MAX_ID_CHARS) {
        Some((end, _)) => &name[..end],
        None => name,
    }
}

/// A trace with every NUL character in its text replaced by U+FFFD (an import: PostgreSQL
/// cannot hold one); `None` when it has none.
pub fn sanitize_trace(trace: &maslens_trace::Trace) -> Option<maslens_trace::Trace> {
    let mut v = serde_json::to_value(trace).ok()?;
    if !clean_value(&mut v) {
        return None;
    }
    serde_json::from_value(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_otlp::span::SpanEvent;
    use serde_json::json;

    #[test]
    fn every_string_of_a_span_is_cleaned_and_reported() {
        let mut span = SpanRecord {
            trace_id: "a".repeat(32),
            span_id: "b".repeat(16),
            parent_span_id: None,
            name: "ch\0at".into(),
            start_ns: 1,
            end_ns: 2,
            error: Some("e\0".into()),
            attributes: json!({"k\0": "v", "gen_ai.agent.name": "Pl\0anner", "n": [{"x": "\0"}]})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            events: vec![SpanEvent {
                name: "ev\0".into(),
                time_ns: 1,
                attributes: Map::new(),
            }],
            service: Some("svc\0".into()),
        };
        assert!(needs_sanitizing(&span));
        assert!(sanitize_span(&mut span));
        assert!(!needs_sanitizing(&span));
        let text = serde_json::to_string(&span).unwrap_or_default();
        assert!(!text.contains("\\u0000"), "{text}");
        assert_eq!(span.name, "ch\u{FFFD}at");
        assert_eq!(span.attributes["gen_ai.agent.name"], "Pl\u{FFFD}anner");
        assert!(span.attributes.contains_key("k\u{FFFD}"));
        assert_eq!(span.service.as_deref(), Some("svc\u{FFFD}"));
        // A clean span is left alone and not reported.
        assert!(!sanitize_span(&mut span));
    }
}
