//! OTLP/HTTP request bodies in, responses out: `application/x-protobuf` or `application/json`,
//! optionally gzip-compressed, decoded with the published `opentelemetry-proto` definitions.
//! Every failure is a [`DecodeError`] that says what was wrong (the server answers it with a
//! 4xx); a body is never trusted to be small, even after decompression.

mod footprint;
mod slices;
mod utf8;

pub use slices::{Slices, SLICE_BYTES};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use std::io::Read;

/// The wire encoding of a request (and of its response, which must match).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("unsupported content type {0:?}: send application/x-protobuf or application/json")]
    ContentType(String),
    #[error("unsupported content encoding {0:?}: send gzip or identity")]
    ContentEncoding(String),
    #[error("the body is larger than {limit} bytes {when}")]
    TooLarge { limit: usize, when: &'static str },
    #[error("the gzip body is corrupt: {0}")]
    Gzip(String),
    #[error("the protobuf body is not an ExportTraceServiceRequest: {0}")]
    Protobuf(String),
    #[error("the JSON body is not an OTLP/JSON ExportTraceServiceRequest: {0}")]
    Json(String),
    /// Many tiny or empty messages: small on the wire, huge decoded (a memory bomb).
    #[error(
        "the body would take about {decoded} bytes decoded, {ratio} times its {sent} bytes \
         (at most {MAX_AMPLIFICATION}): too many empty or tiny messages"
    )]
    TooDense {
        sent: usize,
        decoded: usize,
        ratio: usize,
    },
}

/// How many times its own size a body may take decoded (real spans: under 8; empty messages
/// 50-200). Bodies up to 1 MiB decoded always pass.
pub const MAX_AMPLIFICATION: usize = 16;

/// Refuse a body whose estimated decoded size is over [`MAX_AMPLIFICATION`] times its own.
fn check_density(sent: usize, decoded: usize) -> Result<(), DecodeError> {
    if decoded <= (1 << 20) || decoded <= sent.saturating_mul(MAX_AMPLIFICATION) {
        return Ok(());
    }
    Err(DecodeError::TooDense {
        sent,
        decoded,
        ratio: decoded / sent.max(1),
    })
}

impl Encoding {
    /// The encoding a `Content-Type` names (parameters such as `; charset=utf-8` ignored). A
    /// missing header means protobuf, OTLP/HTTP's default.
    pub fn from_content_type(value: Option<&str>) -> Result<Encoding, DecodeError> {
        let Some(value) = value else {
            return Ok(Encoding::Protobuf);
        };
        let mime = value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match mime.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(Encoding::Protobuf),
            "application/json" => Ok(Encoding::Json),
            _ => Err(DecodeError::ContentType(value.to_string())),
        }
    }

    /// The `Content-Type` of a response in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// A decoded request and the spans left out of it: in OTLP/JSON, a span that does not parse (an
/// id of odd length or not hex, a field of the wrong type) is dropped with its reason and the
/// others kept, as a protobuf request's unplaceable spans are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    pub request: ExportTraceServiceRequest,
    pub rejected: Vec<crate::span::Rejected>,
    /// Strings that were not UTF-8 (invalid bytes, lone surrogate escapes), kept with U+FFFD in
    /// place of what could not be read rather than failing the request.
    pub repaired_text: usize,
}

impl Decoded {
    /// What the sender should hear about [`Decoded::repaired_text`]; empty when nothing was.
    pub fn repair_message(&self) -> String {
        match self.repaired_text {
            0 => String::new(),
            n => format!(
                "{n} string{} held text that is not UTF-8 (invalid bytes or a lone surrogate): \
                 stored with U+FFFD in its place",
                if n == 1 { "" } else { "s" }
            ),
        }
    }
}

/// [`decode_request`], span by span where the JSON allows it: one span that does not parse no
/// longer fails the whole request. A body that is not JSON, or whose structure around the spans
/// is wrong, is still an error.
pub fn decode_request_spans(
    body: &[u8],
    encoding: Encoding,
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<Decoded, DecodeError> {
    let bytes = inflated(body, content_encoding, limit)?;
    decode_inflated(&bytes, encoding)
}

/// The body as sent, decompressed (gzip) to at most `limit` bytes: what [`decode_slices`] reads.
pub fn inflated_body<'a>(
    body: &'a [u8],
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    inflated(body, content_encoding, limit)
}

/// A decompressed body ([`inflated_body`]) as slices of at most [`SLICE_BYTES`] of spans each
/// ([`Slices`]), so that a large protobuf request is stored slice by slice with memory
/// proportional to the body. OTLP/JSON, and a protobuf body whose structure is malformed, come
/// whole as one slice (or the error [`decode_request_spans`] gives).
pub fn decode_slices<'a>(
    bytes: &'a [u8],
    encoding: Encoding,
) -> Result<Box<dyn Iterator<Item = Decoded> + Send + 'a>, DecodeError> {
    if encoding == Encoding::Protobuf {
        if let Some(decoded) = footprint::decoded_bytes(bytes) {
            check_density(bytes.len(), decoded)?;
        }
        if let Some(slices) = Slices::new(bytes, SLICE_BYTES) {
            return Ok(Box::new(slices));
        }
    }
    Ok(Box::new(std::iter::once(decode_inflated(bytes, encoding)?)))
}

/// [`decode_request_spans`] of a body already decompressed.
fn decode_inflated(bytes: &[u8], encoding: Encoding) -> Result<Decoded, DecodeError> {
    let bytes = std::borrow::Cow::Borrowed(bytes);
    let (bytes, repaired_text, decoded) = match decode_bytes(&bytes, encoding) {
        Err(e @ (DecodeError::Protobuf(_) | DecodeError::Json(_))) => {
            match repair(&bytes, encoding) {
                Some((fixed, n)) => {
                    let decoded = decode_bytes(&fixed, encoding);
                    (std::borrow::Cow::Owned(fixed), n, decoded)
                }
                None => (bytes, 0, Err(e)),
            }
        }
        decoded => (bytes, 0, decoded),
    };
    let mut decoded = match (decoded, encoding) {
        (Ok(request), _) => Decoded {
            request,
            ..Decoded::default()
        },
        (Err(DecodeError::Json(why)), Encoding::Json) => {
            json_span_by_span(&bytes).ok_or(DecodeError::Json(why))?
        }
        (Err(e), _) => return Err(e),
    };
    decoded.repaired_text = repaired_text;
    Ok(decoded)
}

/// The body with its text made UTF-8 ([`utf8`]) and how many repairs that took; `None` when
/// there was nothing to repair (or the protobuf is malformed), so the first error stands.
fn repair(bytes: &[u8], encoding: Encoding) -> Option<(Vec<u8>, usize)> {
    let (fixed, n) = match encoding {
        Encoding::Protobuf => utf8::protobuf(bytes)?,
        Encoding::Json => utf8::json(bytes),
    };
    (n > 0).then_some((fixed, n))
}

/// The body as its content encoding says (gzip or identity), at most `limit` bytes inflated.
fn inflate<'a>(
    body: &'a [u8],
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    match content_encoding.map(|e| e.trim().to_ascii_lowercase()) {
        None => Ok(std::borrow::Cow::Borrowed(body)),
        Some(e) if e.is_empty() || e == "identity" => Ok(std::borrow::Cow::Borrowed(body)),
        Some(e) if e == "gzip" => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body)
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| DecodeError::Gzip(e.to_string()))?;
            if out.len() > limit {
                return Err(DecodeError::TooLarge {
                    limit,
                    when: "after gzip decompression",
                });
            }
            Ok(std::borrow::Cow::Owned(out))
        }
        Some(_) => Err(DecodeError::ContentEncoding(
            content_encoding.unwrap_or_default().to_string(),
        )),
    }
}

/// The spans of an OTLP/JSON body that parse, and the others with their reason; `None` when the
/// body is not JSON or still fails without the bad spans.
fn json_span_by_span(bytes: &[u8]) -> Option<Decoded> {
    use opentelemetry_proto::tonic::trace::v1::Span;
    let mut v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let mut rejected = Vec::new();
    for rs in v.get_mut("resourceSpans")?.as_array_mut()? {
        let Some(scopes) = rs.get_mut("scopeSpans").and_then(|s| s.as_array_mut()) else {
            continue;
        };
        for ss in scopes {
            let Some(spans) = ss.get_mut("spans").and_then(|s| s.as_array_mut()) else {
                continue;
            };
            spans.retain(|span| match serde_json::from_value::<Span>(span.clone()) {
                Ok(_) => true,
                Err(e) => {
                    let span_id = span
                        .get("spanId")
                        .and_then(|i| i.as_str())
                        .map(String::from);
                    rejected.push(crate::span::Rejected {
                        span_id,
                        reason: format!("not an OTLP/JSON span: {e}"),
                    });
                    false
                }
            });
        }
    }
    let request = serde_json::from_value(v).ok()?;
    Some(Decoded {
        request,
        rejected,
        repaired_text: 0,
    })
}

/// Decode a request body of at most `limit` bytes (before and after decompression).
pub fn decode_request(
    body: &[u8],
    encoding: Encoding,
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<ExportTraceServiceRequest, DecodeError> {
    decode_bytes(&inflated(body, content_encoding, limit)?, encoding)
}

/// The body of at most `limit` bytes as sent, decompressed to at most `limit` bytes.
fn inflated<'a>(
    body: &'a [u8],
    content_encoding: Option<&str>,
    limit: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, DecodeError> {
    if body.len() > limit {
        return Err(DecodeError::TooLarge {
            limit,
            when: "as sent",
        });
    }
    inflate(body, content_encoding, limit)
}

/// A decompressed body as a request, refused first when it would be too dense to decode.
fn decode_bytes(
    bytes: &[u8],
    encoding: Encoding,
) -> Result<ExportTraceServiceRequest, DecodeError> {
    match encoding {
        Encoding::Protobuf => {
            if let Some(decoded) = footprint::decoded_bytes(bytes) {
                check_density(bytes.len(), decoded)?;
            }
            ExportTraceServiceRequest::decode(bytes)
                .map_err(|e| DecodeError::Protobuf(e.to_string()))
        }
        Encoding::Json => {
            check_density(bytes.len(), footprint::json_decoded_bytes(bytes))?;
            serde_json::from_slice(bytes).map_err(|e| DecodeError::Json(e.to_string()))
        }
    }
}

/// The response body for a request in `encoding`: empty success, or a partial success that
/// counts the rejected spans and says why.
pub fn encode_response(encoding: Encoding, rejected: usize, message: &str) -> Vec<u8> {
    let partial = (rejected > 0 || !message.is_empty()).then(|| ExportTracePartialSuccess {
        rejected_spans: i64::try_from(rejected).unwrap_or(i64::MAX),
        error_message: message.to_string(),
    });
    match encoding {
        Encoding::Protobuf => ExportTraceServiceResponse {
            partial_success: partial,
        }
        .encode_to_vec(),
        // Written by hand: OTLP/JSON wants the int64 as a string and omits an empty message.
        Encoding::Json => match partial {
            None => b"{}".to_vec(),
            Some(p) => serde_json::json!({"partialSuccess": {
                "rejectedSpans": p.rejected_spans.to_string(),
                "errorMessage": p.error_message,
            }})
            .to_string()
            .into_bytes(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const JSON: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
        "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
        "name":"chat","startTimeUnixNano":"1544712660000000000","endTimeUnixNano":1544712661000000000,
        "kind":3,"attributes":[{"key":"gen_ai.agent.name","value":{"stringValue":"Planner"}}]}]}]}]}"#;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn json_protobuf_and_gzip_decode_to_the_same_request() {
        let from_json = decode_request(JSON.as_bytes(), Encoding::Json, None, 1 << 20).unwrap();
        let span = &from_json.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.trace_id.len(), 16);
        assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
        assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);
        let pb = from_json.encode_to_vec();
        let from_pb = decode_request(&pb, Encoding::Protobuf, Some("identity"), 1 << 20).unwrap();
        assert_eq!(from_pb, from_json);
        let from_gz =
            decode_request(&gzip(&pb), Encoding::Protobuf, Some("gzip"), 1 << 20).unwrap();
        assert_eq!(from_gz, from_json);
    }

    #[test]
    fn bad_bodies_are_named_errors() {
        assert_eq!(
            Encoding::from_content_type(Some("application/json; charset=utf-8")),
            Ok(Encoding::Json)
        );
        assert_eq!(Encoding::from_content_type(None), Ok(Encoding::Protobuf));
        assert!(matches!(
            Encoding::from_content_type(Some("text/plain")),
            Err(DecodeError::ContentType(_))
        ));
        let pb = decode_request(JSON.as_bytes(), Encoding::Json, None, 1 << 20)
            .unwrap()
            .encode_to_vec();
        let truncated = &pb[..pb.len() - 3];
        assert!(matches!(
            decode_request(truncated, Encoding::Protobuf, None, 1 << 20),
            Err(DecodeError::Protobuf(_))
        ));
        assert!(matches!(
            decode_request(b"{\"resourceSpans\": [", Encoding::Json, None, 1 << 20),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            decode_request(b"not gzip", Encoding::Json, Some("gzip"), 1 << 20),
            Err(DecodeError::Gzip(_))
        ));
        assert!(matches!(
            decode_request(&pb, Encoding::Protobuf, Some("br"), 1 << 20),
            Err(DecodeError::ContentEncoding(_))
        ));
        assert!(matches!(
            decode_request(&pb, Encoding::Protobuf, None, 10),
            Err(DecodeError::TooLarge {
                when: "as sent",
                ..
            })
        ));
        // A small body that inflates past the limit (a zip bomb) is stopped while inflating.
        let bomb = gzip(&vec![b' '; 1 << 20]);
        assert!(bomb.len() < 8192, "{}", bomb.len());
        assert!(matches!(
            decode_request(&bomb, Encoding::Json, Some("gzip"), 64 << 10),
            Err(DecodeError::TooLarge {
                when: "after gzip decompression",
                ..
            })
        ));
    }

    #[test]
    fn responses_match_the_request_encoding() {
        assert_eq!(encode_response(Encoding::Json, 0, ""), b"{}");
        let j: serde_json::Value =
            serde_json::from_slice(&encode_response(Encoding::Json, 2, "2 spans without ids"))
                .unwrap();
        assert_eq!(j["partialSuccess"]["rejectedSpans"], "2");
        let pb = encode_response(Encoding::Protobuf, 3, "why");
        let r = ExportTraceServiceResponse::decode(pb.as_slice()).unwrap();
        assert_eq!(r.partial_success.map(|p| p.rejected_spans), Some(3));
        assert!(encode_response(Encoding::Protobuf, 0, "").is_empty());
    }

    /// A red-team finding: 4 KB of gzip made 2 million empty spans and 800 MB decoded. Such a
    /// body is refused before it is decoded, in both encodings; a real export passes.
    #[test]
    fn a_body_of_empty_messages_is_refused_before_decoding() {
        let spans: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 200_000)
            .flatten()
            .collect();
        let mut body = vec![0x0a];
        let mut inner = vec![0x12];
        push_varint(&mut inner, spans.len());
        inner.extend(&spans);
        push_varint(&mut body, inner.len());
        body.extend(&inner);
        let err = decode_request(&body, Encoding::Protobuf, None, 1 << 26).unwrap_err();
        assert!(matches!(err, DecodeError::TooDense { .. }), "{err}");
        assert!(err.to_string().contains("empty or tiny messages"), "{err}");
        let json = format!(
            "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}]}}]}}]}}",
            vec!["{}"; 200_000].join(",")
        );
        let err = decode_request(json.as_bytes(), Encoding::Json, None, 1 << 26).unwrap_err();
        assert!(matches!(err, DecodeError::TooDense { .. }), "{err}");
    }

    fn push_varint(out: &mut Vec<u8>, n: usize) {
        utf8::push_varint(out, n as u64);
    }

    /// A red-team finding: one span with an odd-length or non-hex id failed the whole OTLP/JSON
    /// request (400), dropping the good spans beside it. That span is left out with its reason.
    #[test]
    fn a_json_span_that_does_not_parse_is_left_out_and_the_others_kept() {
        let good = r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"ok"}"#;
        let odd = r#"{"traceId":"5b8efff798038103d269b633813fc60","spanId":"eee19b7ec3c1b175","name":"odd"}"#;
        let not_hex = r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"zzzz9b7ec3c1b176","name":"x"}"#;
        let body = format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{good},{odd},{not_hex}]}}]}}]}}"#
        );
        assert!(decode_request(body.as_bytes(), Encoding::Json, None, 1 << 20).is_err());
        let d = decode_request_spans(body.as_bytes(), Encoding::Json, None, 1 << 20).unwrap();
        let spans = &d.request.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].name, "ok");
        assert_eq!(d.rejected.len(), 2);
        assert_eq!(d.rejected[0].span_id.as_deref(), Some("eee19b7ec3c1b175"));
        assert!(
            d.rejected[0].reason.starts_with("not an OTLP/JSON span"),
            "{:?}",
            d.rejected
        );
        // Not JSON at all is still an error for the whole body.
        assert!(decode_request_spans(b"{nope", Encoding::Json, None, 1 << 20).is_err());
    }

    /// A red-team finding: one string of invalid UTF-8 in a protobuf span (or a lone surrogate
    /// escape, or a raw invalid byte, in OTLP/JSON) failed the whole request, losing the good
    /// spans beside it. The string is kept with U+FFFD and the sender is told.
    #[test]
    fn text_that_is_not_utf8_is_repaired_and_the_request_kept() {
        let two = JSON.replace(
            r#""name":"chat""#,
            r#""name":"chat","events":[{"name":"BADEVNT"}],"status":{"message":"BADSTAT"}"#,
        );
        let mut request = decode_request(two.as_bytes(), Encoding::Json, None, 1 << 20).unwrap();
        let span = request.resource_spans[0].scope_spans[0].spans[0].clone();
        let mut other = span.clone();
        other.span_id = vec![7; 8];
        other.name = "good".into();
        request.resource_spans[0].scope_spans[0].spans.push(other);
        let mut pb = request.encode_to_vec();
        for word in [&b"Planner"[..], b"BADEVNT", b"BADSTAT"] {
            let at = pb.windows(7).position(|w| w == word).unwrap();
            pb[at + 3] = 0xff;
        }
        assert!(decode_request(&pb, Encoding::Protobuf, None, 1 << 20).is_err());
        let d = decode_request_spans(&pb, Encoding::Protobuf, None, 1 << 20).unwrap();
        assert_eq!(d.repaired_text, 3);
        assert!(d
            .repair_message()
            .starts_with("3 strings held text that is not UTF-8"));
        let spans = &d.request.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[1].name, "good");
        let value = spans[0].attributes[0]
            .value
            .as_ref()
            .and_then(|v| v.value.clone());
        assert_eq!(
            value,
            Some(
                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                    "Pla\u{fffd}ner".into()
                )
            )
        );
        assert_eq!(spans[0].events[0].name, "BAD\u{fffd}VNT");
        // Nothing to repair: the original error stands, not a second one.
        let truncated = &pb[..pb.len() - 3];
        assert!(matches!(
            decode_request_spans(truncated, Encoding::Protobuf, None, 1 << 20),
            Err(DecodeError::Protobuf(_))
        ));

        let json = JSON.replace("Planner", r"Pl\ud800anner");
        let at = json.find(r#""chat""#).unwrap() + 3;
        let mut body = json.into_bytes();
        body.insert(at, 0xff);
        assert!(decode_request(&body, Encoding::Json, None, 1 << 20).is_err());
        let d = decode_request_spans(&body, Encoding::Json, None, 1 << 20).unwrap();
        assert_eq!(d.repaired_text, 2);
        let span = &d.request.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.name, "ch\u{fffd}at");
    }
}
