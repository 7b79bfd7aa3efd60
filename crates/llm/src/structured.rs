//! Structured output shared by all methods: extract the JSON value from model text (code
//! fences, prose around it), validate it against a schema, one repair call quoting the
//! validation error, then an explicit abstention carrying the raw text and the reason.

use crate::{ChatModel, ChatRequest, LlmError, Usage};
use serde_json::Value;

/// Result of a structured call: a validated value (JSON, or typed: see [`crate::typed`]), or an
/// abstention with the reason.
#[derive(Debug, Clone)]
pub struct StructuredOutput<T = Value> {
    /// The validated answer; `None` means the model abstained / could not be parsed.
    pub value: Option<T>,
    /// Raw text of the last model answer.
    pub raw: String,
    /// Why no value was produced.
    pub abstain_reason: Option<String>,
    /// Whether the repair call was needed.
    pub repaired: bool,
    /// Usage summed over the calls made (1 or 2).
    pub usage: Usage,
    /// Backend calls made (cache hits included).
    pub calls: u32,
}

/// At most this many candidate start positions are tried (bounds the work on long answers).
const MAX_CANDIDATES: usize = 64;

/// Find the first JSON object or array in `text`: inside a ```json fence if any, else the first
/// balanced `{...}` / `[...]` that parses (leniently: trailing commas and Python's
/// `True`/`False`/`None` are accepted).
pub fn extract_json(text: &str) -> Option<Value> {
    json_candidates(text).into_iter().next()
}

/// All JSON objects / arrays found in `text`, in order of preference: fenced blocks first, then
/// balanced values in reading order (values nested in an earlier candidate are skipped).
pub fn json_candidates(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    // Fenced blocks first.
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(0);
        let body = &after[body_start..];
        if let Some(end) = body.find("```") {
            if let Some(v) = parse_lenient(body[..end].trim()) {
                if v.is_object() || v.is_array() {
                    out.push(v);
                }
            }
            rest = &body[end + 3..];
        } else {
            break;
        }
    }
    // Then balanced objects/arrays in reading order.
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut tried = 0;
    while start < bytes.len() && tried < MAX_CANDIDATES {
        let b = bytes[start];
        if b != b'{' && b != b'[' {
            start += 1;
            continue;
        }
        tried += 1;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let strict = match stream.next() {
            Some(Ok(v)) => Some((v, stream.byte_offset())),
            _ => None,
        };
        let found = strict.or_else(|| {
            let end = balanced_end(&text[start..])?;
            parse_lenient(&text[start..start + end]).map(|v| (v, end))
        });
        match found {
            Some((v, len)) if v.is_object() || v.is_array() => {
                if !out.contains(&v) {
                    out.push(v);
                }
                start += len.max(1);
            }
            _ => start += 1,
        }
    }
    out
}

/// Byte length of the balanced `{...}` / `[...]` at the start of `s` (string-aware).
fn balanced_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Parse JSON; if that fails, drop trailing commas and map `True`/`False`/`None` outside strings.
fn parse_lenient(s: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(s) {
        return Some(v);
    }
    let mut out = String::with_capacity(s.len());
    let chars: Vec<char> = s.chars().collect();
    let mut in_str = false;
    let mut escaped = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c == '"' {
            in_str = true;
            out.push(c);
            i += 1;
            continue;
        }
        if c == ',' {
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                i += 1;
                continue;
            }
        }
        let word_start = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let mut replaced = false;
        if word_start {
            for (py, js) in [("True", "true"), ("False", "false"), ("None", "null")] {
                let w: Vec<char> = py.chars().collect();
                let end = i + w.len();
                if chars.len() >= end
                    && chars[i..end] == w[..]
                    && chars
                        .get(end)
                        .is_none_or(|c| !(c.is_alphanumeric() || *c == '_'))
                {
                    out.push_str(js);
                    i = end;
                    replaced = true;
                    break;
                }
            }
        }
        if !replaced {
            out.push(c);
            i += 1;
        }
    }
    serde_json::from_str(&out).ok()
}

/// Validate `value` against the subset of JSON Schema maslens uses: `type` (one or several),
/// `properties`, `required`, `additionalProperties` (false or a schema), `enum`, `const`,
/// `items`, `minItems`, `maxItems`, `minLength`, `maxLength`, `minimum`, `maximum`,
/// `exclusiveMinimum`, `exclusiveMaximum`, `anyOf`, `oneOf`, `allOf`, and local `$ref`s
/// (`#/$defs/..`, `#/definitions/..`, as schemars writes them).
/// Returns the first problem as `path: message`.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    validate_at(value, schema, schema, "$", 0)
}

fn type_matches(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        // JSON Schema: a number with a zero fractional part (3.0) is an integer.
        "integer" => {
            value.as_i64().is_some()
                || value.as_u64().is_some()
                || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}

fn short(value: &Value) -> String {
    let mut s = value.to_string();
    if let Some((i, _)) = s.char_indices().nth(80) {
        s.truncate(i);
        s.push_str("...");
    }
    s
}

fn validate_at(
    value: &Value,
    schema: &Value,
    root: &Value,
    path: &str,
    depth: usize,
) -> Result<(), String> {
    if depth > 64 {
        return Err(format!("{path}: schema nesting too deep (recursive $ref?)"));
    }
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let target = resolve(root, r)
            .ok_or_else(|| format!("{path}: unresolvable $ref {r:?} in the schema"))?;
        validate_at(value, target, root, path, depth + 1)?;
    }
    if let Some(ty) = schema.get("type") {
        let ok = match ty {
            Value::String(t) => type_matches(value, t),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(value, t)),
            _ => true,
        };
        if !ok {
            return Err(format!("{path}: expected {ty}, got {}", short(value)));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(value) {
            return Err(format!(
                "{path}: {} is not one of {}",
                short(value),
                short(&Value::Array(options.clone()))
            ));
        }
    }
    if let Some(c) = schema.get("const") {
        if c != value {
            return Err(format!(
                "{path}: expected {}, got {}",
                short(c),
                short(value)
            ));
        }
    }
    for (kw, any) in [("anyOf", true), ("oneOf", false)] {
        if let Some(Value::Array(subs)) = schema.get(kw) {
            let results: Vec<Result<(), String>> = subs
                .iter()
                .map(|sub| validate_at(value, sub, root, path, depth + 1))
                .collect();
            let n_ok = results.iter().filter(|r| r.is_ok()).count();
            if n_ok == 0 {
                let first = results
                    .into_iter()
                    .find_map(Result::err)
                    .unwrap_or_default();
                return Err(format!(
                    "{path}: matches none of the {kw} alternatives (first: {first})"
                ));
            }
            if !any && n_ok > 1 {
                return Err(format!(
                    "{path}: matches {n_ok} of the oneOf alternatives, expected exactly one"
                ));
            }
        }
    }
    if let Some(Value::Array(subs)) = schema.get("allOf") {
        for sub in subs {
            validate_at(value, sub, root, path, depth + 1)?;
        }
    }
    if let Some(n) = value.as_f64() {
        let num = |k: &str| schema.get(k).and_then(Value::as_f64);
        if let Some(min) = num("minimum") {
            if n < min {
                return Err(format!("{path}: {n} is below the minimum {min}"));
            }
        }
        if let Some(max) = num("maximum") {
            if n > max {
                return Err(format!("{path}: {n} is above the maximum {max}"));
            }
        }
        if let Some(min) = num("exclusiveMinimum") {
            if n <= min {
                return Err(format!("{path}: {n} must be greater than {min}"));
            }
        }
        if let Some(max) = num("exclusiveMaximum") {
            if n >= max {
                return Err(format!("{path}: {n} must be less than {max}"));
            }
        }
    }
    if let Some(text) = value.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
            if len < min {
                return Err(format!("{path}: string shorter than {min} characters"));
            }
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
            if len > max {
                return Err(format!("{path}: string longer than {max} characters"));
            }
        }
    }
    if let Some(obj) = value.as_object() {
        if let Some(Value::Array(required)) = schema.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(key) {
                    return Err(format!("{path}: missing required field \"{key}\""));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (key, v) in obj {
            match props.and_then(|p| p.get(key)) {
                Some(sub) => validate_at(v, sub, root, &format!("{path}.{key}"), depth + 1)?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        return Err(format!("{path}: unexpected field \"{key}\""))
                    }
                    Some(sub @ Value::Object(_)) => {
                        validate_at(v, sub, root, &format!("{path}.{key}"), depth + 1)?
                    }
                    _ => {}
                },
            }
        }
    }
    if let Some(arr) = value.as_array() {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
            if (arr.len() as u64) < min {
                return Err(format!(
                    "{path}: {} items, at least {min} expected",
                    arr.len()
                ));
            }
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
            if arr.len() as u64 > max {
                return Err(format!(
                    "{path}: {} items, at most {max} expected",
                    arr.len()
                ));
            }
        }
        if let Some(items) = schema.get("items") {
            for (i, v) in arr.iter().enumerate() {
                validate_at(v, items, root, &format!("{path}[{i}]"), depth + 1)?;
            }
        }
    }
    Ok(())
}

/// The first candidate in `text` that satisfies `schema`; else the problem with the first one.
/// Run `request` (its `json_schema` set to `schema`), validate, repair once, else abstain.
/// Backend errors (network, budget, replay miss) are returned as `Err`; model answers that do
/// not fit the schema are an abstention, never an error. [`crate::typed::complete_as`] reads the
/// answer into a struct instead.
pub async fn complete_json(
    model: &dyn ChatModel,
    request: ChatRequest,
    schema: &Value,
) -> Result<StructuredOutput, LlmError> {
    crate::typed::complete_as(model, request, schema).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use serde_json::json;

    #[test]
    fn extracts_from_fence_and_prose() {
        assert_eq!(
            extract_json("```json\n{\"a\":1}\n```"),
            Some(json!({"a":1}))
        );
        assert_eq!(
            extract_json("Sure! {\"a\": [1,2]} hope it helps"),
            Some(json!({"a":[1,2]}))
        );
        assert_eq!(extract_json("no json {here"), None);
    }

    #[test]
    fn validates_subset() {
        let schema = json!({"type":"object","required":["step"],"properties":{
            "step":{"type":"integer","minimum":0},"conf":{"type":"number","maximum":1}}});
        assert!(validate(&json!({"step":3,"conf":0.5}), &schema).is_ok());
        assert!(validate(&json!({"conf":0.5}), &schema)
            .unwrap_err()
            .contains("step"));
        assert!(validate(&json!({"step":-1}), &schema).is_err());
        assert!(validate(&json!({"step":1,"conf":2.0}), &schema).is_err());
    }

    #[tokio::test]
    async fn repairs_once_then_abstains() {
        let schema = json!({"type":"object","required":["x"]});
        let m = crate::testing::ScriptedModel::new("fixture")
            .then("nope")
            .then("{\"x\":1}");
        let out = complete_json(&m, ChatRequest::new(vec![Message::user("q")]), &schema)
            .await
            .unwrap();
        assert_eq!(out.value, Some(json!({"x":1})));
        assert!(out.repaired);
        let m = crate::testing::ScriptedModel::new("fixture")
            .then("nope")
            .then("still no");
        let out = complete_json(&m, ChatRequest::new(vec![Message::user("q")]), &schema)
            .await
            .unwrap();
        assert!(out.value.is_none());
        assert!(out.abstain_reason.is_some());
    }

    #[test]
    fn lenient_extraction() {
        assert_eq!(
            extract_json("{\"a\": [1, 2,], \"b\": True,}"),
            Some(json!({"a": [1, 2], "b": true}))
        );
        assert_eq!(
            extract_json("x = {'a': 1}"),
            None,
            "single quotes are not JSON"
        );
        // "None" inside a string is left alone.
        assert_eq!(
            extract_json("{\"s\": \"None, True,]\", \"n\": None}"),
            Some(json!({"s": "None, True,]", "n": null}))
        );
        // A nested value is not offered again as a separate candidate.
        assert_eq!(
            json_candidates("steps [1,2] then {\"step\": {\"x\": 1}}").len(),
            2
        );
        // Many unbalanced braces: bounded work, no panic.
        let noisy = "{".repeat(100_000);
        assert_eq!(extract_json(&noisy), None);
    }

    #[test]
    fn validates_refs_combinators_and_limits() {
        let schema = json!({
            "$defs": {"Verdict": {"type": "object", "required": ["agent", "step"], "additionalProperties": false,
                "properties": {"agent": {"type": "string", "minLength": 1},
                               "step": {"type": "integer", "minimum": 0},
                               "kind": {"anyOf": [{"const": "explicit"}, {"const": "implicit"}]}}}},
            "type": "object",
            "properties": {"verdicts": {"type": "array", "items": {"$ref": "#/$defs/Verdict"}, "maxItems": 2}}
        });
        assert!(validate(
            &json!({"verdicts": [{"agent": "a", "step": 3.0, "kind": "implicit"}]}),
            &schema
        )
        .is_ok());
        let e = validate(&json!({"verdicts": [{"agent": "", "step": 1}]}), &schema).unwrap_err();
        assert!(e.contains("$.verdicts[0].agent"), "{e}");
        assert!(validate(&json!({"verdicts": [{"agent": "a", "step": 1.5}]}), &schema).is_err());
        assert!(validate(
            &json!({"verdicts": [{"agent": "a", "step": 1, "kind": "other"}]}),
            &schema
        )
        .unwrap_err()
        .contains("anyOf"));
        assert!(validate(
            &json!({"verdicts": [{"agent": "a", "step": 1, "x": 0}]}),
            &schema
        )
        .unwrap_err()
        .contains("unexpected"));
        let three = json!({"verdicts": [{"agent": "a", "step": 1}, {"agent": "a", "step": 1}, {"agent": "a", "step": 1}]});
        assert!(validate(&three, &schema).unwrap_err().contains("at most 2"));
        let bad_ref = json!({"$ref": "#/$defs/Missing"});
        assert!(validate(&json!({}), &bad_ref)
            .unwrap_err()
            .contains("unresolvable"));
        let recursive = json!({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"});
        assert!(validate(&json!({}), &recursive)
            .unwrap_err()
            .contains("too deep"));
    }

    #[tokio::test]
    async fn repair_quotes_the_validation_error() {
        let schema = json!({"type": "object", "required": ["step"], "properties": {"step": {"type": "integer"}}});
        let m = crate::testing::ScriptedModel::new("fixture")
            .then("{\"step\": \"three\"}")
            .then("{\"step\": 3}");
        let out = complete_json(
            &m,
            ChatRequest::new(vec![Message::user("q")]).stage("judge"),
            &schema,
        )
        .await
        .unwrap();
        assert_eq!(out.value, Some(json!({"step": 3})));
        assert_eq!(out.calls, 2);
        let calls = m.calls.lock().unwrap();
        let repair = &calls[1];
        assert_eq!(repair.stage, "judge/repair");
        assert!(repair
            .messages
            .last()
            .unwrap()
            .content
            .contains("$.step: expected \"integer\""));
        assert_eq!(calls[0].json_schema.as_ref(), Some(&schema));
    }
}
