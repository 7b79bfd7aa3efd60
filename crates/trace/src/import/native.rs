//! maslens native format: one [`Trace`] per JSON document or JSONL line. Read exactly as
//! written (the `source` field is kept as stored), so `export(import(x)) == x` for our output.

use super::{path_string, plain_message, ImportError, RecordCtx};
use crate::model::Trace;

/// Parse one native trace. The fast path is a plain `serde_json` parse; only on failure is the
/// record parsed again with path tracking to name the JSON path of the problem.
pub fn import_bytes(bytes: &[u8], ctx: &RecordCtx<'_>) -> Result<Trace, ImportError> {
    // Validating UTF-8 once for the whole record is much faster than serde_json's per-string
    // checks on `from_slice` (many short segments between escapes).
    let parsed = match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => serde_json::from_str::<Trace>(text),
        Err(_) => serde_json::from_slice::<Trace>(bytes),
    };
    match parsed {
        Ok(t) => Ok(t),
        Err(first) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let err = match serde_path_to_error::deserialize::<_, Trace>(&mut de) {
                Err(e) => ctx.error(
                    path_string(e.path()),
                    format!(
                        "not a valid maslens trace: {}",
                        plain_message(&e.inner().to_string())
                    ),
                ),
                Ok(_) => ctx.error(
                    None,
                    format!(
                        "not a valid maslens trace: {}",
                        plain_message(&first.to_string())
                    ),
                ),
            };
            Err(err)
        }
    }
}

/// Native trace from an already parsed JSON value.
pub fn import_value(value: serde_json::Value, ctx: &RecordCtx<'_>) -> Result<Trace, ImportError> {
    super::typed(value, ctx, "maslens trace")
}
