//! How much memory a protobuf `ExportTraceServiceRequest` takes once decoded, estimated from the
//! wire before decoding it. An empty message is 2 bytes on the wire and a whole struct in memory
//! (a `Span` is some 250 bytes): a 4 KB gzip body of 2 million empty spans decoded to 800 MB. The
//! walk counts the repeated messages of each type (resource spans, scope spans, spans, events,
//! links, attributes, nested values) and sizes them at their Rust struct size; a body whose
//! estimate is far beyond its own size is refused before `prost` allocates anything.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use std::mem::size_of;

/// The message types the walk descends into.
#[derive(Clone, Copy)]
enum Kind {
    Request,
    ResourceSpans,
    Resource,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
}

impl Kind {
    /// The message type of field `field` (a length-delimited one) of this message, when it is
    /// one the walk counts.
    fn child(self, field: u64) -> Option<Kind> {
        let child = match (self, field) {
            (Kind::Request, 1) => Kind::ResourceSpans,
            (Kind::ResourceSpans, 1) => Kind::Resource,
            (Kind::ResourceSpans, 2) => Kind::ScopeSpans,
            (Kind::Resource, 1) => Kind::KeyValue,
            (Kind::ScopeSpans, 1) => Kind::Scope,
            (Kind::ScopeSpans, 2) => Kind::Span,
            (Kind::Scope, 3) => Kind::KeyValue,
            (Kind::Span, 9) => Kind::KeyValue,
            (Kind::Span, 11) => Kind::Event,
            (Kind::Span, 13) => Kind::Link,
            (Kind::Event, 3) => Kind::KeyValue,
            (Kind::Link, 4) => Kind::KeyValue,
            (Kind::KeyValue, 2) => Kind::AnyValue,
            (Kind::AnyValue, 5) => Kind::ArrayValue,
            (Kind::AnyValue, 6) => Kind::KeyValueList,
            (Kind::ArrayValue, 1) => Kind::AnyValue,
            (Kind::KeyValueList, 1) => Kind::KeyValue,
            _ => return None,
        };
        Some(child)
    }

    /// Bytes one such message takes in memory beyond its own wire bytes.
    fn size(self) -> usize {
        match self {
            Kind::Request | Kind::Resource | Kind::Scope => 64,
            Kind::ArrayValue | Kind::KeyValueList => 64,
            Kind::ResourceSpans => size_of::<ResourceSpans>(),
            Kind::ScopeSpans => size_of::<ScopeSpans>(),
            Kind::Span => size_of::<Span>(),
            Kind::Event => size_of::<Event>(),
            Kind::Link => size_of::<Link>(),
            Kind::KeyValue => size_of::<KeyValue>(),
            Kind::AnyValue => size_of::<AnyValue>(),
        }
    }
}

/// The bytes one JSON object (`{`) of an OTLP/JSON body is taken to make decoded: about the
/// average of the structs an object becomes (a span, an attribute, its value).
const JSON_OBJECT_BYTES: usize = 128;

/// The estimated decoded size of an OTLP/JSON body: its length plus [`JSON_OBJECT_BYTES`] per
/// `{` (an upper bound on its objects). `{}` is 2 bytes and a whole span decoded.
pub fn json_decoded_bytes(bytes: &[u8]) -> usize {
    let objects = bytes.iter().filter(|&&b| b == b'{').count();
    bytes
        .len()
        .saturating_add(objects.saturating_mul(JSON_OBJECT_BYTES))
}

/// Nesting deeper than this is left to `prost`, which refuses it.
const MAX_DEPTH: usize = 100;

/// The estimated decoded size of `bytes` (its own length plus the structs it makes), or `None`
/// when the wire format does not parse (then `prost` says why).
pub fn decoded_bytes(bytes: &[u8]) -> Option<usize> {
    let mut total = bytes.len();
    walk(bytes, Kind::Request, 0, &mut total)?;
    Some(total)
}

fn walk(mut bytes: &[u8], kind: Kind, depth: usize, total: &mut usize) -> Option<()> {
    if depth > MAX_DEPTH {
        return Some(());
    }
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(&mut bytes)?;
            }
            1 => bytes = bytes.get(8..)?,
            5 => bytes = bytes.get(4..)?,
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).ok()?;
                let body = bytes.get(..len)?;
                bytes = &bytes[len..];
                if let Some(child) = kind.child(field) {
                    *total = total.saturating_add(child.size());
                    walk(body, child, depth + 1, total)?;
                }
            }
            _ => return None,
        }
    }
    Some(())
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    fn request(spans: usize, attributes: usize) -> ExportTraceServiceRequest {
        let span = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "chat".into(),
            attributes: (0..attributes)
                .map(|i| KeyValue {
                    key: format!("k{i}"),
                    value: Some(AnyValue {
                        value: Some(
                            opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                                "v".into(),
                            ),
                        ),
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span; spans],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn counts_every_nested_message() {
        let bytes = request(3, 2).encode_to_vec();
        let want = bytes.len()
            + Kind::ResourceSpans.size()
            + Kind::ScopeSpans.size()
            + 3 * Kind::Span.size()
            + 6 * (Kind::KeyValue.size() + Kind::AnyValue.size());
        assert_eq!(decoded_bytes(&bytes), Some(want));
    }

    /// Empty spans are 2 bytes each on the wire and a whole struct decoded: the estimate shows it.
    #[test]
    fn empty_spans_amplify_and_real_ones_do_not_much() {
        let spans: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 10_000)
            .flatten()
            .collect();
        // Request { resource_spans (1): { scope_spans (2): { spans (2): 10,000 empty } } }.
        let resource_body = [&[0x12], &varint_bytes(spans.len())[..], &spans[..]].concat();
        let empty = [
            &[0x0a][..],
            &varint_bytes(resource_body.len()),
            &resource_body,
        ]
        .concat();
        let ratio = decoded_bytes(&empty).unwrap() / empty.len();
        assert!(ratio > 50, "{ratio}");
        // Real spans, even with ten one-letter attributes each (denser than any instrumentor
        // writes), stay under the limit.
        let real = request(1000, 10).encode_to_vec();
        let ratio = decoded_bytes(&real).unwrap() as f64 / real.len() as f64;
        assert!(ratio < super::super::MAX_AMPLIFICATION as f64, "{ratio}");
        assert_eq!(
            decoded_bytes(&[0x0a, 0x05, 0x00]),
            None,
            "a length past the end"
        );
        let braces = format!(
            "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}]}}]}}]}}",
            vec!["{}"; 1000].join(",")
        );
        assert!(json_decoded_bytes(braces.as_bytes()) / braces.len() > 30);
    }

    fn varint_bytes(mut n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }
}
