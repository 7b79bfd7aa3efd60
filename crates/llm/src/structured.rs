//! Structured output shared by all methods: extract the JSON value from model text (code
//! fences, prose around it), validate it against a schema, one repair call quoting the
//! validation error, then an explicit abstention carrying the raw text and the reason.

use crate::{ChatModel, ChatRequest, LlmError, Message, Usage};
use serde_json::Value;

/// Result of a structured call: a validated value, or an abstention with the reason.
#[derive(Debug, Clone)]
pub struct StructuredOutput {
    /// The validated JSON value; `None` means the model abstained / could not be parsed.
    pub value: Option<Value>,
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

/// Find the first JSON object or array in `text`: inside a ```json fence if any, else the first
/// balanced `{...}` / `[...]` that parses.
pub fn extract_json(text: &str) -> Option<Value> {
    // Fenced blocks first.
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(0);
        let body = &after[body_start..];
        if let Some(end) = body.find("```") {
            if let Ok(v) = serde_json::from_str::<Value>(body[..end].trim()) {
                if v.is_object() || v.is_array() {
                    return Some(v);
                }
            }
            rest = &body[end + 3..];
        } else {
            break;
        }
    }
    // Then the first balanced object/array that parses.
    let bytes = text.as_bytes();
    for (start, &b) in bytes.iter().enumerate() {
        if b != b'{' && b != b'[' {
            continue;
        }
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        if let Some(Ok(v)) = stream.next() {
            if v.is_object() || v.is_array() {
                return Some(v);
            }
        }
    }
    None
}

/// Validate `value` against the subset of JSON Schema maslens uses: `type`, `properties`,
/// `required`, `enum`, `items`, `minimum`, `maximum`, `additionalProperties: false`.
/// Returns the first problem as `path: message`.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    validate_at(value, schema, "$")
}

fn type_matches(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn validate_at(value: &Value, schema: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(ty) = schema.get("type") {
        let ok = match ty {
            Value::String(t) => type_matches(value, t),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_matches(value, t)),
            _ => true,
        };
        if !ok {
            return Err(format!("{path}: expected {ty}, got {value}"));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.contains(value) {
            return Err(format!("{path}: {value} is not one of {}", Value::Array(options.clone())));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            if n < min {
                return Err(format!("{path}: {n} is below the minimum {min}"));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            if n > max {
                return Err(format!("{path}: {n} is above the maximum {max}"));
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
                Some(sub) => validate_at(v, sub, &format!("{path}.{key}"))?,
                None => {
                    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
                        return Err(format!("{path}: unexpected field \"{key}\""));
                    }
                }
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            validate_at(v, items, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

fn check(text: &str, schema: &Value) -> Result<Value, String> {
    let value = extract_json(text).ok_or_else(|| "no JSON object found in the answer".to_string())?;
    validate(&value, schema)?;
    Ok(value)
}

/// Run `request` (its `json_schema` set to `schema`), validate, repair once, else abstain.
/// Backend errors (network, budget, replay miss) are returned as `Err`; model answers that do
/// not fit the schema are an abstention, never an error.
pub async fn complete_json(
    model: &dyn ChatModel,
    mut request: ChatRequest,
    schema: &Value,
) -> Result<StructuredOutput, LlmError> {
    request.json_schema = Some(schema.clone());
    let first = model.complete(&request).await?;
    let mut usage = first.usage;
    let problem = match check(&first.text, schema) {
        Ok(value) => {
            return Ok(StructuredOutput {
                value: Some(value),
                raw: first.text,
                abstain_reason: None,
                repaired: false,
                usage,
                calls: 1,
            })
        }
        Err(problem) => problem,
    };
    let mut repair = request.clone();
    repair.stage = format!("{}/repair", request.stage);
    repair.messages.push(Message::assistant(first.text.clone()));
    repair.messages.push(Message::user(format!(
        "Your answer was not valid: {problem}. Answer again with only one JSON object that \
         satisfies this JSON schema, and nothing else:\n{schema}"
    )));
    let second = model.complete(&repair).await?;
    usage += second.usage;
    match check(&second.text, schema) {
        Ok(value) => Ok(StructuredOutput {
            value: Some(value),
            raw: second.text,
            abstain_reason: None,
            repaired: true,
            usage,
            calls: 2,
        }),
        Err(problem2) => Ok(StructuredOutput {
            value: None,
            raw: second.text,
            abstain_reason: Some(format!("invalid after one repair: {problem2} (first answer: {problem})")),
            repaired: true,
            usage,
            calls: 2,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extracts_from_fence_and_prose() {
        assert_eq!(extract_json("```json\n{\"a\":1}\n```"), Some(json!({"a":1})));
        assert_eq!(extract_json("Sure! {\"a\": [1,2]} hope it helps"), Some(json!({"a":[1,2]})));
        assert_eq!(extract_json("no json {here"), None);
    }

    #[test]
    fn validates_subset() {
        let schema = json!({"type":"object","required":["step"],"properties":{
            "step":{"type":"integer","minimum":0},"conf":{"type":"number","maximum":1}}});
        assert!(validate(&json!({"step":3,"conf":0.5}), &schema).is_ok());
        assert!(validate(&json!({"conf":0.5}), &schema).unwrap_err().contains("step"));
        assert!(validate(&json!({"step":-1}), &schema).is_err());
        assert!(validate(&json!({"step":1,"conf":2.0}), &schema).is_err());
    }

    #[tokio::test]
    async fn repairs_once_then_abstains() {
        let schema = json!({"type":"object","required":["x"]});
        let m = crate::testing::ScriptedModel::new("fixture").then("nope").then("{\"x\":1}");
        let out = complete_json(&m, ChatRequest::new(vec![Message::user("q")]), &schema).await.unwrap();
        assert_eq!(out.value, Some(json!({"x":1})));
        assert!(out.repaired);
        let m = crate::testing::ScriptedModel::new("fixture").then("nope").then("still no");
        let out = complete_json(&m, ChatRequest::new(vec![Message::user("q")]), &schema).await.unwrap();
        assert!(out.value.is_none());
        assert!(out.abstain_reason.is_some());
    }
}
