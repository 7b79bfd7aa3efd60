//! Text that is not UTF-8, made UTF-8 so the rest of a request survives it.
//!
//! A protobuf string field holding invalid UTF-8, an OTLP/JSON body with raw invalid bytes, or a
//! JSON `\ud800` escape with no partner (a lone surrogate, which some JSON encoders write) made
//! the whole request fail to decode, losing every good span beside the one bad string. Here each
//! such string is rewritten with U+FFFD in place of what could not be read, and the count of
//! repairs is returned so the sender is told.
//!
//! The protobuf repair walks the wire format with the OTLP trace schema (which field of which
//! message is a string, which a nested message); fields it does not know are copied unchanged.

/// The OTLP trace messages whose string and message fields the walk must know.
#[derive(Debug, Clone, Copy)]
pub(super) enum Msg {
    Request,
    ResourceSpans,
    Resource,
    EntityRef,
    ScopeSpans,
    Scope,
    Span,
    Event,
    Link,
    Status,
    KeyValue,
    AnyValue,
    ArrayValue,
    KeyValueList,
}

/// What a length-delimited field holds.
enum Field {
    Text,
    Message(Msg),
    /// Bytes, or a field this schema does not know: copied as sent.
    Opaque,
}

/// The kind of field `number` of `msg` (opentelemetry-proto's trace, resource and common v1).
fn field(msg: Msg, number: u64) -> Field {
    use Field::{Message, Opaque, Text};
    use Msg::*;
    match (msg, number) {
        (Request, 1) => Message(ResourceSpans),
        (ResourceSpans, 1) => Message(Resource),
        (ResourceSpans, 2) => Message(ScopeSpans),
        (ResourceSpans | ScopeSpans, 3) => Text,
        (Resource, 1) => Message(KeyValue),
        (Resource, 3) => Message(EntityRef),
        (EntityRef, 1..=4) => Text,
        (ScopeSpans, 1) => Message(Scope),
        (ScopeSpans, 2) => Message(Span),
        (Scope, 1 | 2) => Text,
        (Scope, 3) => Message(KeyValue),
        (Span, 3 | 5) => Text,
        (Span, 9) => Message(KeyValue),
        (Span, 11) => Message(Event),
        (Span, 13) => Message(Link),
        (Span, 15) => Message(Status),
        (Event, 2) | (Link, 3) | (Status, 2) | (KeyValue, 1) | (AnyValue, 1) => Text,
        (Event, 3) | (Link, 4) | (KeyValueList, 1) => Message(KeyValue),
        (KeyValue, 2) | (ArrayValue, 1) => Message(AnyValue),
        (AnyValue, 5) => Message(ArrayValue),
        (AnyValue, 6) => Message(KeyValueList),
        _ => Opaque,
    }
}

/// prost's own nesting limit: a deeper body fails to decode anyway.
const MAX_DEPTH: usize = 100;

/// A protobuf `ExportTraceServiceRequest` with every string field made UTF-8, and how many
/// strings were repaired; `None` when the body is not well-formed protobuf (its decode error
/// stands).
pub(super) fn protobuf(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    message(bytes, Msg::Request)
}

/// [`protobuf`] for one message of type `msg` (a span, a resource, a scope).
pub(super) fn message(bytes: &[u8], msg: Msg) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut repaired = 0;
    walk(bytes, msg, 0, &mut out, &mut repaired)?;
    Some((out, repaired))
}

/// Copy the fields of one `msg` from `bytes` to `out`, repairing its strings and recursing into
/// its messages (whose lengths may change, so each is re-encoded).
fn walk(
    bytes: &[u8],
    msg: Msg,
    depth: usize,
    out: &mut Vec<u8>,
    repaired: &mut usize,
) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        let key = varint(bytes, &mut at)?;
        match key & 7 {
            0 => {
                varint(bytes, &mut at)?;
            }
            1 => at = at.checked_add(8).filter(|&end| end <= bytes.len())?,
            5 => at = at.checked_add(4).filter(|&end| end <= bytes.len())?,
            2 => {
                let len = usize::try_from(varint(bytes, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|&end| end <= bytes.len())?;
                let body = &bytes[at..end];
                at = end;
                match field(msg, key >> 3) {
                    Field::Text if std::str::from_utf8(body).is_err() => {
                        let text = String::from_utf8_lossy(body);
                        push_field(out, key, text.as_bytes());
                        *repaired += 1;
                    }
                    Field::Message(inner) => {
                        let mut nested = Vec::with_capacity(body.len());
                        walk(body, inner, depth + 1, &mut nested, repaired)?;
                        push_field(out, key, &nested);
                    }
                    Field::Text | Field::Opaque => out.extend_from_slice(&bytes[start..at]),
                }
                continue;
            }
            // Groups (deprecated, never in OTLP) and unknown wire types.
            _ => return None,
        }
        out.extend_from_slice(&bytes[start..at]);
    }
    Some(())
}

fn push_field(out: &mut Vec<u8>, key: u64, body: &[u8]) {
    push_varint(out, key);
    push_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

pub(super) fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

pub(super) fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// An OTLP/JSON body made UTF-8 (each run of invalid bytes becomes U+FFFD) with every lone
/// surrogate escape replaced by `\ufffd`, and how many repairs that took.
pub(super) fn json(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut text = Vec::with_capacity(bytes.len());
    let mut repaired = 0;
    for chunk in bytes.utf8_chunks() {
        text.extend_from_slice(chunk.valid().as_bytes());
        if !chunk.invalid().is_empty() {
            text.extend_from_slice("\u{fffd}".as_bytes());
            repaired += 1;
        }
    }
    let (text, lone) = lone_surrogates(&text);
    (text, repaired + lone)
}

/// `\uD800`-`\uDFFF` escapes that are not a high-low pair, replaced by `\ufffd`. Other escapes
/// (`\\` included, so `\\ud800` is left alone) are copied as they are.
fn lone_surrogates(bytes: &[u8]) -> (Vec<u8>, usize) {
    let escape_at = |i: usize| -> Option<u16> {
        let hex = bytes.get(i..i + 6)?;
        if !hex.starts_with(b"\\u") {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut repaired) = (0, 0);
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let len = match escape_at(i) {
            Some(0xD800..=0xDBFF) if matches!(escape_at(i + 6), Some(0xDC00..=0xDFFF)) => 12,
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(b"\\ufffd");
                repaired += 1;
                i += 6;
                continue;
            }
            Some(_) => 6,
            None => 2,
        };
        let end = (i + len).min(bytes.len());
        out.extend_from_slice(&bytes[i..end]);
        i = end;
    }
    (out, repaired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_are_replaced_and_pairs_and_escaped_backslashes_kept() {
        let (out, n) = lone_surrogates(br#""a\ud800b" "\ud83d\ude00" "\\ud800" "\udc00\n""#);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""a\ufffdb" "\ud83d\ude00" "\\ud800" "\ufffd\n""#
        );
        assert_eq!(n, 2);
        // A high surrogate at the very end, and a truncated escape, do not read past the end.
        assert_eq!(lone_surrogates(br"\ud800").1, 1);
        assert_eq!(lone_surrogates(br"\ud8").0, br"\ud8".to_vec());
    }

    #[test]
    fn invalid_json_bytes_become_replacement_characters() {
        let (out, n) = json(b"{\"a\":\"x\xff\xfey\",\"b\":\"\\udfff\"}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\":\"x\u{fffd}\u{fffd}y\",\"b\":\"\\ufffd\"}"
        );
        assert_eq!(n, 3);
    }
}
