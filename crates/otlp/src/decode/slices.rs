//! A protobuf request read in slices, so that memory stays proportional to the body.
//!
//! Decoded whole, an attribute-dense request takes some ten times its wire size as `prost`
//! structs, and as many again once flattened into span records: a red-team measured about 40
//! times the body. Here the request's structure (its resources, scopes and the byte range of each
//! span) is read first without decoding a span; then [`Slices`] yields requests of consecutive
//! spans of at most a slice's worth of wire bytes, each span decoded on its own (and repaired on
//! its own when its text is not UTF-8, [`super::utf8`]), so the caller can store one slice and
//! drop it before the next. Storing is idempotent by span id, so a request stored in several
//! transactions and retried after a failure in the middle loses and duplicates nothing.

use super::utf8::{self, varint, Msg};
use super::Decoded;
use crate::span::Rejected;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::ops::Range;

/// Wire bytes of spans per slice.
pub const SLICE_BYTES: usize = 256 << 10;

/// One `ResourceSpans`' resource (decoded) and schema URL.
struct ResourcePart {
    resource: Option<Resource>,
    schema_url: String,
}

/// One `ScopeSpans`' scope (decoded), schema URL and resource.
struct ScopePart {
    resource: usize,
    scope: Option<InstrumentationScope>,
    schema_url: String,
}

/// A request's structure: what each span belongs to and where its bytes are.
#[derive(Default)]
struct Plan {
    resources: Vec<ResourcePart>,
    scopes: Vec<ScopePart>,
    /// (scope, byte range in the body) per span, in body order.
    spans: Vec<(usize, Range<usize>)>,
    /// Strings repaired in resources and scopes.
    repaired: usize,
}

/// The length-delimited fields of one message: `(field number, byte range)`; `None` when the
/// message is malformed (or uses groups).
fn fields(bytes: &[u8], base: usize) -> Option<Vec<(u64, Range<usize>)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let key = varint(bytes, &mut at)?;
        match key & 7 {
            0 => {
                varint(bytes, &mut at)?;
            }
            1 => at = at.checked_add(8).filter(|&e| e <= bytes.len())?,
            5 => at = at.checked_add(4).filter(|&e| e <= bytes.len())?,
            2 => {
                let len = usize::try_from(varint(bytes, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|&e| e <= bytes.len())?;
                out.push((key >> 3, base + at..base + end));
                at = end;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Decode one message, repairing its text when that is what failed; `Err` with prost's reason.
fn decode_repaired<M: Message + Default>(
    bytes: &[u8],
    msg: Msg,
    repaired: &mut usize,
) -> Result<M, String> {
    match M::decode(bytes) {
        Ok(m) => Ok(m),
        Err(e) => match utf8::message(bytes, msg) {
            Some((fixed, n)) if n > 0 => {
                let m = M::decode(fixed.as_slice()).map_err(|e| e.to_string())?;
                *repaired += n;
                Ok(m)
            }
            _ => Err(e.to_string()),
        },
    }
}

impl Plan {
    /// The structure of a request body; `None` when it is not well-formed protobuf or a
    /// resource or scope does not decode (the whole-body decoder then says why).
    fn read(body: &[u8]) -> Option<Plan> {
        let mut plan = Plan::default();
        for (field, range) in fields(body, 0)? {
            if field == 1 {
                plan.resource_spans(body, range)?;
            }
        }
        Some(plan)
    }

    fn resource_spans(&mut self, body: &[u8], range: Range<usize>) -> Option<()> {
        let index = self.resources.len();
        let mut part = ResourcePart {
            resource: None,
            schema_url: String::new(),
        };
        for (field, r) in fields(&body[range.clone()], range.start)? {
            match field {
                1 => {
                    part.resource =
                        Some(decode_repaired(&body[r], Msg::Resource, &mut self.repaired).ok()?)
                }
                2 => self.scope_spans(body, r, index)?,
                3 => part.schema_url = String::from_utf8_lossy(&body[r]).into_owned(),
                _ => {}
            }
        }
        self.resources.push(part);
        Some(())
    }

    fn scope_spans(&mut self, body: &[u8], range: Range<usize>, resource: usize) -> Option<()> {
        let index = self.scopes.len();
        let mut part = ScopePart {
            resource,
            scope: None,
            schema_url: String::new(),
        };
        for (field, r) in fields(&body[range.clone()], range.start)? {
            match field {
                1 => {
                    part.scope =
                        Some(decode_repaired(&body[r], Msg::Scope, &mut self.repaired).ok()?)
                }
                2 => self.spans.push((index, r)),
                3 => part.schema_url = String::from_utf8_lossy(&body[r]).into_owned(),
                _ => {}
            }
        }
        self.scopes.push(part);
        Some(())
    }
}

/// The slices of one protobuf request (module docs), in body order.
pub struct Slices<'a> {
    body: &'a [u8],
    plan: Plan,
    next: usize,
    started: bool,
    slice_bytes: usize,
}

impl<'a> Slices<'a> {
    /// `None` when `body` is not a well-formed request (decode it whole to learn why).
    pub fn new(body: &'a [u8], slice_bytes: usize) -> Option<Slices<'a>> {
        Some(Slices {
            body,
            plan: Plan::read(body)?,
            next: 0,
            started: false,
            slice_bytes: slice_bytes.max(1),
        })
    }

    /// The resource spans a slice's spans go in, grouped by scope in body order.
    fn push(&self, request: &mut ExportTraceServiceRequest, scope: usize, span: Span) {
        let part = &self.plan.scopes[scope];
        let resource = &self.plan.resources[part.resource];
        let same_scope = request
            .resource_spans
            .last()
            .and_then(|rs| rs.scope_spans.last())
            .is_some_and(|ss| ss.scope == part.scope && ss.schema_url == part.schema_url)
            && request.resource_spans.last().is_some_and(|rs| {
                rs.resource == resource.resource && rs.schema_url == resource.schema_url
            });
        if !same_scope {
            request.resource_spans.push(ResourceSpans {
                resource: resource.resource.clone(),
                scope_spans: vec![ScopeSpans {
                    scope: part.scope.clone(),
                    spans: Vec::new(),
                    schema_url: part.schema_url.clone(),
                }],
                schema_url: resource.schema_url.clone(),
            });
        }
        if let Some(ss) = request
            .resource_spans
            .last_mut()
            .and_then(|rs| rs.scope_spans.last_mut())
        {
            ss.spans.push(span);
        }
    }
}

impl Iterator for Slices<'_> {
    type Item = Decoded;

    fn next(&mut self) -> Option<Decoded> {
        // Every slice holds at least one span; a request without spans is one empty slice.
        if self.next >= self.plan.spans.len() && (self.next > 0 || self.started) {
            return None;
        }
        self.started = true;
        let mut out = Decoded {
            repaired_text: if self.next == 0 {
                self.plan.repaired
            } else {
                0
            },
            ..Decoded::default()
        };
        let mut bytes = 0;
        while self.next < self.plan.spans.len() && (bytes == 0 || bytes < self.slice_bytes) {
            let (scope, range) = self.plan.spans[self.next].clone();
            self.next += 1;
            bytes += range.len();
            let mut repaired = 0;
            match decode_repaired::<Span>(&self.body[range], Msg::Span, &mut repaired) {
                Ok(span) => self.push(&mut out.request, scope, span),
                Err(why) => out.rejected.push(Rejected {
                    span_id: None,
                    reason: format!("not an OTLP span: {why}"),
                }),
            }
            out.repaired_text += repaired;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn span(id: u8, name: &str) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![id; 8],
            name: name.into(),
            attributes: vec![kv("gen_ai.agent.name", "Planner")],
            ..Default::default()
        }
    }

    fn request() -> ExportTraceServiceRequest {
        let scope = |name: &str, spans: Vec<Span>| ScopeSpans {
            scope: Some(InstrumentationScope {
                name: name.into(),
                ..Default::default()
            }),
            spans,
            schema_url: String::new(),
        };
        let resource = |service: &str, scopes: Vec<ScopeSpans>| ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", service)],
                ..Default::default()
            }),
            scope_spans: scopes,
            schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
        };
        ExportTraceServiceRequest {
            resource_spans: vec![
                resource(
                    "svc-a",
                    vec![
                        scope("s1", vec![span(1, "a"), span(2, "b")]),
                        scope("s2", vec![span(3, "c")]),
                    ],
                ),
                resource("svc-b", vec![scope("s3", vec![span(4, "d"), span(5, "e")])]),
            ],
        }
    }

    /// Slices of any size hold the same spans, with their resources and scopes, as the whole
    /// request decoded at once.
    #[test]
    fn slices_of_any_size_flatten_to_the_whole_request() {
        let req = request();
        let body = req.encode_to_vec();
        let whole = crate::span::flatten(&req).spans;
        for slice_bytes in [1, 40, 90, 1 << 20] {
            let mut spans = Vec::new();
            let mut slices = 0;
            for d in Slices::new(&body, slice_bytes).unwrap() {
                assert!(d.rejected.is_empty());
                spans.extend(crate::span::flatten(&d.request).spans);
                slices += 1;
            }
            assert_eq!(spans, whole, "slice_bytes {slice_bytes}");
            if slice_bytes == 1 {
                assert_eq!(slices, 5);
            }
            if slice_bytes == 1 << 20 {
                assert_eq!(slices, 1);
            }
        }
        assert_eq!(
            Slices::new(&[], 10).unwrap().count(),
            1,
            "an empty request is one slice"
        );
        assert!(
            Slices::new(&body[..body.len() - 3], 10).is_none(),
            "malformed"
        );
    }

    /// A span whose text is not UTF-8 is repaired on its own; one that does not decode at all is
    /// rejected with its reason and the others kept.
    #[test]
    fn a_bad_span_is_repaired_or_rejected_alone() {
        let mut req = request();
        req.resource_spans[0].scope_spans[0].spans[1].name = "BADNAME".into();
        let mut body = req.encode_to_vec();
        let at = body.windows(7).position(|w| w == b"BADNAME").unwrap();
        body[at + 3] = 0xff;
        let got: Vec<Decoded> = Slices::new(&body, 1).unwrap().collect();
        assert_eq!(got.iter().map(|d| d.repaired_text).sum::<usize>(), 1);
        assert_eq!(
            got[1].request.resource_spans[0].scope_spans[0].spans[0].name,
            "BAD\u{fffd}AME"
        );
        // A span whose trace id field claims to be a varint-typed string: prost refuses it.
        let mut req = request();
        req.resource_spans[1].scope_spans[0].spans[0].name = "ZZZZZZZ".into();
        let mut body = req.encode_to_vec();
        let at = body.windows(7).position(|w| w == b"ZZZZZZZ").unwrap();
        body[at - 2] = (5 << 3) | 5; // field 5 (name) as a fixed32: the wrong wire type
        body[at - 1] = b'Z';
        let got: Vec<Decoded> = Slices::new(&body, 1).unwrap().collect();
        let rejected: Vec<&Rejected> = got.iter().flat_map(|d| &d.rejected).collect();
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert!(rejected[0].reason.starts_with("not an OTLP span"));
        let kept: usize = got
            .iter()
            .map(|d| crate::span::flatten(&d.request).spans.len())
            .sum();
        assert_eq!(kept, 4);
    }
}
