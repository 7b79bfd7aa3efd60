//! OTLP spans flattened into [`SpanRecord`]s: hex ids, nanosecond times, attributes as JSON
//! values (resource attributes under `resource.*` are kept apart), events. A span that cannot be
//! placed (no valid trace or span id) is [`Rejected`] with its reason; the rest of the batch
//! goes on.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use serde_json::{Map, Value};

/// One span, flattened. Serializable: the store keeps each received span as this record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpanRecord {
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// 16 lower-case hex digits.
    pub span_id: String,
    /// `None` for a root span (an empty, all-zero or self-referencing parent id).
    pub parent_span_id: Option<String>,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The status message (or `error`) when the span's status is ERROR.
    pub error: Option<String>,
    pub attributes: Map<String, Value>,
    pub events: Vec<SpanEvent>,
    /// The resource's `service.name`.
    pub service: Option<String>,
}

/// A span event (older GenAI instrumentations put messages here).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpanEvent {
    pub name: String,
    pub time_ns: u64,
    pub attributes: Map<String, Value>,
}

/// A span that was not kept, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Its span id, when it had a readable one.
    pub span_id: Option<String>,
    pub reason: String,
}

/// The spans of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flattened {
    pub spans: Vec<SpanRecord>,
    pub rejected: Vec<Rejected>,
}

impl Flattened {
    /// One line for a partial-success response: how many spans were rejected, and the first
    /// reasons.
    pub fn rejection_message(&self) -> String {
        let mut reasons: Vec<&str> = self.rejected.iter().map(|r| r.reason.as_str()).collect();
        reasons.sort_unstable();
        reasons.dedup();
        let shown: Vec<&str> = reasons.iter().take(3).copied().collect();
        match self.rejected.len() {
            0 => String::new(),
            n => format!("{n} span(s) rejected: {}", shown.join("; ")),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON value for an OTLP attribute value (bytes as hex; a non-finite double as null).
pub fn any_value(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number)
        }
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(any_value).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(attributes(&kv.values)),
        Some(any_value::Value::BytesValue(b)) => Value::String(hex(b)),
        // An index into a profiles string table: traces have no such table.
        Some(any_value::Value::StringValueStrindex(_)) => Value::Null,
    }
}

/// Attributes as a JSON object (a repeated key: the last one wins).
pub fn attributes(kvs: &[KeyValue]) -> Map<String, Value> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map_or(Value::Null, any_value),
            )
        })
        .collect()
}

fn id(bytes: &[u8], len: usize, what: &str) -> Result<String, String> {
    if bytes.len() != len {
        return Err(format!("{what} has {} bytes, not {len}", bytes.len()));
    }
    if bytes.iter().all(|b| *b == 0) {
        return Err(format!("{what} is all zeros"));
    }
    Ok(hex(bytes))
}

fn flatten_span(span: &Span, service: Option<&str>) -> Result<SpanRecord, Rejected> {
    let span_id = id(&span.span_id, 8, "span id").map_err(|reason| Rejected {
        span_id: None,
        reason,
    })?;
    let reject = |reason: String| Rejected {
        span_id: Some(span_id.clone()),
        reason,
    };
    let trace_id = id(&span.trace_id, 16, "trace id").map_err(reject)?;
    let parent_span_id = match span.parent_span_id.as_slice() {
        [] => None,
        p if p.iter().all(|b| *b == 0) => None,
        p => Some(id(p, 8, "parent span id").map_err(reject)?),
    }
    // A span that names itself as its parent is a root (a cycle of one).
    .filter(|p| *p != span_id);
    let error = span.status.as_ref().and_then(|s| {
        (s.code == StatusCode::Error as i32).then(|| {
            if s.message.is_empty() {
                "error".to_string()
            } else {
                s.message.clone()
            }
        })
    });
    Ok(SpanRecord {
        trace_id,
        span_id: span_id.clone(),
        parent_span_id,
        name: span.name.clone(),
        start_ns: span.start_time_unix_nano,
        // A span that ends before it starts (skewed clocks) is taken to end when it starts.
        end_ns: span.end_time_unix_nano.max(span.start_time_unix_nano),
        error,
        attributes: attributes(&span.attributes),
        events: span
            .events
            .iter()
            .map(|e| SpanEvent {
                name: e.name.clone(),
                time_ns: e.time_unix_nano,
                attributes: attributes(&e.attributes),
            })
            .collect(),
        service: service.map(String::from),
    })
}

/// Every span of a request, flattened; unplaceable ones rejected with their reason.
pub fn flatten(request: &ExportTraceServiceRequest) -> Flattened {
    let mut out = Flattened::default();
    for rs in &request.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").and_then(Value::as_str);
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                match flatten_span(span, service) {
                    Ok(r) => out.spans.push(r),
                    Err(r) => out.rejected.push(r),
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Status};

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn span(trace: &[u8], id: &[u8], parent: &[u8]) -> Span {
        Span {
            trace_id: trace.to_vec(),
            span_id: id.to_vec(),
            parent_span_id: parent.to_vec(),
            name: "s".into(),
            start_time_unix_nano: 20,
            end_time_unix_nano: 10,
            ..Default::default()
        }
    }

    #[test]
    fn ids_values_and_rejections() {
        use any_value::Value as V;
        let t = [7u8; 16];
        let mut ok = span(&t, &[1; 8], &[2; 8]);
        ok.attributes = vec![
            kv("s", V::StringValue("x".into())),
            kv("i", V::IntValue(-3)),
            kv("d", V::DoubleValue(f64::NAN)),
            kv("b", V::BytesValue(vec![0xab])),
            kv(
                "a",
                V::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(V::BoolValue(true)),
                    }],
                }),
            ),
            kv(
                "m",
                V::KvlistValue(KeyValueList {
                    values: vec![kv("k", V::StringValue("v".into()))],
                }),
            ),
        ];
        ok.status = Some(Status {
            code: StatusCode::Error as i32,
            message: String::new(),
        });
        let own_parent = span(&t, &[3; 8], &[3; 8]);
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", V::StringValue("crew".into()))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        ok,
                        span(&t, &[], &[]),
                        span(&[0; 16], &[4; 8], &[]),
                        span(&t, &[5; 8], &[1, 2]),
                        own_parent,
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let f = flatten(&request);
        assert_eq!(f.spans.len(), 2);
        let s = &f.spans[0];
        assert_eq!(s.trace_id, "07".repeat(16));
        assert_eq!(s.span_id, "0101010101010101");
        assert_eq!(s.parent_span_id.as_deref(), Some("0202020202020202"));
        assert_eq!((s.start_ns, s.end_ns), (20, 20), "skewed end clamped");
        assert_eq!(s.error.as_deref(), Some("error"));
        assert_eq!(s.service.as_deref(), Some("crew"));
        let a = serde_json::Value::Object(s.attributes.clone());
        assert_eq!(
            a,
            serde_json::json!({"s": "x", "i": -3, "d": null, "b": "ab", "a": [true], "m": {"k": "v"}})
        );
        assert_eq!(f.spans[1].parent_span_id, None, "self-parent is a root");
        let reasons: Vec<&str> = f.rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "span id has 0 bytes, not 8",
                "trace id is all zeros",
                "parent span id has 2 bytes, not 8"
            ]
        );
        assert!(f.rejection_message().starts_with("3 span(s) rejected: "));
    }
}
