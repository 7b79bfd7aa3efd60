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

/// Validate `value` against `schema` (JSON Schema, draft 2020-12 unless the schema says
/// otherwise; local `$ref`s such as schemars' `#/$defs/..` resolve, remote ones do not).
/// Returns the first problem as `path: message`, the path written `$.field[2].sub`.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    validate_with(&compile(schema)?, value)
}

/// [`validate`] with a schema compiled once by [`compile`] (several candidates, one schema).
pub fn validate_with(validator: &jsonschema::Validator, value: &Value) -> Result<(), String> {
    match first_problem(validator, value) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// Compile `schema` once; a schema that does not compile (bad keyword value, unresolvable
/// `$ref`) is reported as a problem of the schema, not of the answer.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| match e.kind() {
        jsonschema::error::ValidationErrorKind::Referencing(r) => {
            format!("$: unresolvable $ref in the schema: {r}")
        }
        _ => format!("$: invalid schema: {e}"),
    })
}

/// The first problem of `value` under `validator`, written `path: message`.
fn first_problem(validator: &jsonschema::Validator, value: &Value) -> Option<String> {
    let error = validator.iter_errors(value).next()?;
    Some(describe(&error, value))
}

/// `$.a.b[0]` for the JSON pointer `/a/b/0` into `root` (a segment is an index only where the
/// value there is an array, so an object key `"0"` stays `.0`).
fn json_path(pointer: &str, root: &Value) -> String {
    let mut out = String::from("$");
    let mut at = Some(root);
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        match at {
            Some(Value::Array(items)) => {
                out.push_str(&format!("[{seg}]"));
                at = seg.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            Some(Value::Object(map)) => {
                out.push('.');
                out.push_str(&seg);
                at = map.get(&seg);
            }
            _ => {
                out.push('.');
                out.push_str(&seg);
                at = None;
            }
        }
    }
    out
}

fn short(value: &Value) -> String {
    short_str(value.to_string())
}

fn short_str(mut s: String) -> String {
    if let Some((i, _)) = s.char_indices().nth(80) {
        s.truncate(i);
        s.push_str("...");
    }
    s
}

/// A number as written in messages: `2` for integral values, else as JSON writes it.
fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// `path: message` for one validation error; `root` is the validated value.
fn describe(error: &jsonschema::ValidationError<'_>, root: &Value) -> String {
    use jsonschema::error::{TypeKind, ValidationErrorKind as K};
    let path = json_path(error.instance_path().as_str(), root);
    let value = error.instance();
    let value: &Value = value;
    let message = match error.kind() {
        K::Type {
            kind: TypeKind::Single(t),
        } => format!("expected \"{t}\", got {}", short(value)),
        K::Type {
            kind: TypeKind::Multiple(ts),
        } => {
            let names: Vec<Value> = ts.iter().map(|t| Value::from(t.to_string())).collect();
            format!("expected {}, got {}", Value::Array(names), short(value))
        }
        K::Enum { options } => format!("{} is not one of {}", short(value), short(options)),
        K::Constant { expected_value } => {
            format!("expected {}, got {}", short(expected_value), short(value))
        }
        K::AnyOf { context } | K::OneOfNotValid { context } => {
            let first = context
                .iter()
                .flatten()
                .next()
                .map(|e| describe(e, root))
                .unwrap_or_default();
            format!(
                "matches none of the {} alternatives (first: {first})",
                error.kind().keyword()
            )
        }
        K::OneOfMultipleValid { context } => format!(
            "matches {} of the oneOf alternatives, expected exactly one",
            context.len().max(2)
        ),
        K::Minimum { limit } => format!("{} is below the minimum {}", num(value), num(limit)),
        K::Maximum { limit } => format!("{} is above the maximum {}", num(value), num(limit)),
        K::ExclusiveMinimum { limit } => {
            format!("{} must be greater than {}", num(value), num(limit))
        }
        K::ExclusiveMaximum { limit } => {
            format!("{} must be less than {}", num(value), num(limit))
        }
        K::MinLength { limit } => format!("string shorter than {limit} characters"),
        K::MaxLength { limit } => format!("string longer than {limit} characters"),
        K::Required { property } => match property.as_str() {
            Some(key) => format!("missing required field \"{key}\""),
            None => format!("missing required field {property}"),
        },
        K::AdditionalProperties { unexpected } => match unexpected.as_slice() {
            [one] => format!("unexpected field \"{one}\""),
            many => format!(
                "unexpected fields {}",
                many.iter()
                    .map(|k| format!("\"{k}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        K::MinItems { limit } => format!(
            "{} items, at least {limit} expected",
            value.as_array().map_or(0, Vec::len)
        ),
        K::MaxItems { limit } => format!(
            "{} items, at most {limit} expected",
            value.as_array().map_or(0, Vec::len)
        ),
        // Every other keyword: the crate's own wording, shortened (it quotes the whole value).
        _ => short_str(error.to_string()),
    };
    format!("{path}: {message}")
}

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
        // A `$ref` cycle without constraints ends (the hand-written validator stopped it with a
        // "too deep" error; jsonschema resolves it and accepts, as the spec reads).
        let recursive = json!({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"});
        assert!(validate(&json!({}), &recursive).is_ok());
    }

    /// The problem with `value`, or a panic naming the value when it validates.
    fn problem(value: Value, schema: &Value) -> String {
        match validate(&value, schema) {
            Err(p) => p,
            Ok(()) => panic!("{value} should not validate"),
        }
    }

    #[test]
    fn violations_name_the_path_nested_enum_array_min_max() {
        let schema = json!({
            "type": "object",
            "required": ["verdict", "steps", "scores"],
            "properties": {
                "verdict": {"type": "object", "required": ["agent", "label"],
                    "properties": {"agent": {"type": "string", "minLength": 2, "maxLength": 5},
                                   "label": {"enum": ["explicit", "implicit", "none"]},
                                   "detail": {"type": "object", "properties": {"conf": {"type": "number", "minimum": 0, "maximum": 1}}}}},
                "steps": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "integer", "exclusiveMinimum": -1}},
                "scores": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMaximum": 10}},
                "note": {"type": ["string", "null"]}
            }
        });
        let ok = json!({"verdict": {"agent": "ab", "label": "none"}, "steps": [0, 2], "scores": {"x": 9.5}, "note": null});
        assert_eq!(validate(&ok, &schema), Ok(()));
        let base = |f: &dyn Fn(&mut Value)| {
            let mut v = ok.clone();
            f(&mut v);
            problem(v, &schema)
        };
        // Nested: the full path, in `$.a.b` / `[i]` form.
        assert_eq!(
            base(&|v| v["verdict"]["detail"] = json!({"conf": 1.5})),
            "$.verdict.detail.conf: 1.5 is above the maximum 1"
        );
        assert_eq!(
            base(&|v| v["verdict"]["detail"] = json!({"conf": -0.25})),
            "$.verdict.detail.conf: -0.25 is below the minimum 0"
        );
        assert_eq!(
            base(&|v| v["verdict"]
                .as_object_mut()
                .unwrap()
                .retain(|k, _| k != "agent")),
            "$.verdict: missing required field \"agent\""
        );
        // Enum.
        assert_eq!(
            base(&|v| v["verdict"]["label"] = json!("maybe")),
            "$.verdict.label: \"maybe\" is not one of [\"explicit\",\"implicit\",\"none\"]"
        );
        // Arrays: size limits and the failing item's index.
        assert_eq!(
            base(&|v| v["steps"] = json!([])),
            "$.steps: 0 items, at least 1 expected"
        );
        assert_eq!(
            base(&|v| v["steps"] = json!([1, 2, 3, 4])),
            "$.steps: 4 items, at most 3 expected"
        );
        assert_eq!(
            base(&|v| v["steps"] = json!([1, "two"])),
            "$.steps[1]: expected \"integer\", got \"two\""
        );
        assert_eq!(
            base(&|v| v["steps"] = json!([3, -1])),
            "$.steps[1]: -1 must be greater than -1"
        );
        // String lengths.
        assert_eq!(
            base(&|v| v["verdict"]["agent"] = json!("a")),
            "$.verdict.agent: string shorter than 2 characters"
        );
        assert_eq!(
            base(&|v| v["verdict"]["agent"] = json!("abcdef")),
            "$.verdict.agent: string longer than 5 characters"
        );
        // additionalProperties as a schema; an object key that looks like an index stays `.0`.
        assert_eq!(
            base(&|v| v["scores"] = json!({"0": 10})),
            "$.scores.0: 10 must be less than 10"
        );
        // Several allowed types.
        let e = base(&|v| v["note"] = json!(3));
        assert!(e.starts_with("$.note: expected ["), "{e}");
        assert!(e.contains("\"string\"") && e.contains("\"null\""), "{e}");
        // The root itself.
        assert_eq!(
            problem(json!([1]), &schema),
            "$: expected \"object\", got [1]"
        );
        // Long values are shortened in messages.
        let long = "x".repeat(500);
        let e = problem(json!(long), &json!({"type": "integer"}));
        assert!(e.len() < 120 && e.ends_with("..."), "{e}");
    }

    #[test]
    fn recursive_schemas_and_one_of() {
        let tree = json!({
            "$defs": {"Node": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}},
            "$ref": "#/$defs/Node"
        });
        let deep = json!({"name": "a", "children": [{"name": "b", "children": [{"name": "c"}, {"name": 4}]}]});
        assert_eq!(
            problem(deep, &tree),
            "$.children[0].children[1].name: expected \"string\", got 4"
        );
        let one_of = json!({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]});
        assert!(validate(&json!(-1.5), &one_of)
            .unwrap_err()
            .contains("none of the oneOf"));
        assert!(validate(&json!(2), &one_of)
            .unwrap_err()
            .contains("exactly one"));
        assert_eq!(validate(&json!(-2), &one_of), Ok(()));
        // A schema that does not compile is named as the schema's problem.
        let e = problem(json!(1), &json!({"type": 5}));
        assert!(e.contains("invalid schema"), "{e}");
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
