//! JSON helpers shared by the importers: parsing with the JSON path of an error, typed views,
//! serde's messages in JSON terms, byte-order marks.

use super::{ImportError, RecordCtx};
use serde::de::DeserializeOwned;

/// JSON path of a serde_path_to_error path; `None` for the root.
pub(crate) fn path_string(p: &serde_path_to_error::Path) -> Option<String> {
    let s = p.to_string();
    // serde_path_to_error writes `?` for a map key it could not read (e.g. at EOF).
    let s = s.strip_suffix(".?").unwrap_or(&s).to_string();
    if s == "." || s == "?" || s.is_empty() {
        None
    } else {
        Some(s)
    }
}

/// Parse bytes into a JSON value, with the JSON path of a syntax error.
pub(crate) fn parse_value(
    bytes: &[u8],
    ctx: &RecordCtx<'_>,
) -> Result<serde_json::Value, ImportError> {
    let text = simdutf8::compat::from_utf8(bytes).map_err(|e| {
        let message = match wide_encoding(bytes) {
            Some(m) => m.to_string(),
            None => format!(
                "invalid UTF-8 at byte {}: expected UTF-8 encoded JSON",
                e.valid_up_to()
            ),
        };
        ctx.error(None, message)
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value: serde_json::Value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        ctx.error(
            path_string(e.path()),
            format!("invalid JSON: {}", e.inner()),
        )
    })?;
    de.end()
        .map_err(|e| ctx.error(None, format!("invalid JSON: {e}")))?;
    Ok(value)
}

/// Deserialize a typed view of a JSON value, with the JSON path of a mismatch.
pub(crate) fn typed<T: DeserializeOwned>(
    value: serde_json::Value,
    ctx: &RecordCtx<'_>,
    what: &str,
) -> Result<T, ImportError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        ctx.error(
            path_string(e.path()),
            format!(
                "not a valid {what} record: {}",
                plain_message(&e.inner().to_string())
            ),
        )
    })
}

/// serde's message with what it expected said in JSON terms: serde names the Rust type it was
/// filling (`expected struct GroundTruth`, `untagged enum Text`, `expected usize`), which means
/// nothing to someone fixing a file.
pub(crate) fn plain_message(message: &str) -> String {
    const UNTAGGED: &str = "data did not match any variant of untagged enum ";
    if let Some(at) = message.find(UNTAGGED) {
        let rest = &message[at + UNTAGGED.len()..];
        let name_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        return format!(
            "{}the value has none of the accepted JSON types{}",
            &message[..at],
            &rest[name_end..]
        );
    }
    // `invalid type: X, expected Y[ at line L column C]`: serde's word for X when it is not
    // data (`sequence`, `map`, `unit value`), and Y, are rewritten; quoted data is left alone.
    const WORDS: [(&str, &str); 5] = [
        ("invalid type: sequence,", "invalid type: array,"),
        ("invalid type: map,", "invalid type: object,"),
        ("invalid type: unit value,", "invalid type: null,"),
        ("invalid value: sequence,", "invalid value: array,"),
        ("invalid value: map,", "invalid value: object,"),
    ];
    let message = WORDS
        .iter()
        .find(|(from, _)| message.starts_with(from))
        .map(|(from, to)| format!("{to}{}", &message[from.len()..]))
        .unwrap_or_else(|| message.to_string());
    let Some(at) = message.rfind("expected ") else {
        return message;
    };
    let start = at + "expected ".len();
    let end = message[start..]
        .find(" at line ")
        .map(|i| start + i)
        .unwrap_or(message.len());
    let expected = &message[start..end];
    let plain = match expected.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["struct", name] if is_rust_name(name) => "a JSON object",
        ["struct", "variant", ..] | ["tuple", "variant", ..] => "a JSON object",
        ["enum", name] if is_rust_name(name) => "one of the accepted values",
        ["tuple", "struct", ..] => "a JSON array",
        ["usize" | "u64" | "u32" | "u16" | "u8" | "u128"] => "a non-negative integer",
        ["isize" | "i64" | "i32" | "i16" | "i8" | "i128"] => "an integer",
        ["f64" | "f32"] => "a number",
        ["a", "borrowed", "string"] => "a string",
        ["a", "sequence"] => "a JSON array",
        ["a", "map"] => "a JSON object",
        ["unit"] => "null",
        ["variant", "identifier"] | ["field", "identifier"] => "one of the accepted names",
        ["a", "tuple", ..] | ["tuple", ..] => "a JSON array",
        _ => return message,
    };
    format!("{}{plain}{}", &message[..start], &message[end..])
}

fn is_rust_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A UTF-8 byte-order mark, which some editors put at the start of a file.
pub(super) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// `bytes` without a leading UTF-8 byte-order mark.
pub(crate) fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes)
}

/// The error for input that starts with a UTF-16 or UTF-32 byte-order mark (maslens reads UTF-8).
pub(super) fn wide_encoding(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x00, 0x00, 0xFE, 0xFF, ..] | [0xFF, 0xFE, 0x00, 0x00, ..] => Some(
            "the input is UTF-32 encoded (it starts with a UTF-32 byte-order mark): convert it to UTF-8, e.g. `iconv -f UTF-32 -t UTF-8`",
        ),
        [0xFE, 0xFF, ..] | [0xFF, 0xFE, ..] => Some(
            "the input is UTF-16 encoded (it starts with a UTF-16 byte-order mark): convert it to UTF-8, e.g. `iconv -f UTF-16 -t UTF-8`",
        ),
        _ => None,
    }
}
