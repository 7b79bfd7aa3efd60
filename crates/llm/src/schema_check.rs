//! Checks on a request's JSON schema and GBNF grammar before they reach a backend: a schema must
//! be a valid JSON Schema (by its meta-schema), its local `$ref`s must resolve, and it must admit
//! at least one value (no `minimum` above `maximum`, no empty `enum`, no `minLength` above
//! `maxLength`, ...); a grammar must not contain an inverted character range or an inverted
//! repetition. A failure is the client's mistake ([`crate::LlmError::InvalidRequest`]): the
//! OpenAI-compatible server answers 400, and the embedded model never sees it. (llama.cpp turns
//! `{"type": "integer", "minimum": 5, "maximum": 1}` into the grammar `root ::= ([5-1])`, which
//! admits nothing.)

use serde_json::Value;

/// Why a schema cannot be used, or `Ok`.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if let Err(e) = jsonschema::meta::validate(schema) {
        return Err(format!(
            "the JSON schema is not valid at {}: {e}",
            pointer_or_root(&e.instance_path().to_string())
        ));
    }
    satisfiable(schema, schema, "", 0)
}

fn pointer_or_root(p: &str) -> String {
    if p.is_empty() {
        "the root".into()
    } else {
        p.to_string()
    }
}

/// Deepest nesting (and `$ref` chain) followed; deeper schemas are not checked further.
const MAX_DEPTH: usize = 64;

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

/// Whether `schema` admits some value; the error names the place (`at`, a JSON pointer).
fn satisfiable(root: &Value, schema: &Value, at: &str, depth: usize) -> Result<(), String> {
    let here = || pointer_or_root(at);
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let obj = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => {
            return Err(format!("the schema at {} admits no value (false)", here()))
        }
        Value::Object(o) => o,
        // The meta-schema check rejects anything else.
        _ => return Ok(()),
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        let target = r
            .strip_prefix('#')
            .filter(|p| p.is_empty() || p.starts_with('/'))
            .ok_or_else(|| {
                format!(
                    "$ref {r:?} at {}: only local references (#/...) are supported",
                    here()
                )
            })?;
        let resolved = root
            .pointer(target)
            .ok_or_else(|| format!("$ref {r:?} at {} points to nothing", here()))?;
        satisfiable(root, resolved, &format!("{at}/$ref"), depth + 1)?;
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        if e.is_empty() {
            return Err(format!("enum at {} is empty: no value is allowed", here()));
        }
    }
    let bounds = |lo: &str, hi: &str| -> Result<(), String> {
        match (num(schema, lo), num(schema, hi)) {
            (Some(a), Some(b)) if a > b => Err(format!(
                "{lo} {a} is greater than {hi} {b} at {}: no value is allowed",
                here()
            )),
            _ => Ok(()),
        }
    };
    bounds("minimum", "maximum")?;
    bounds("minLength", "maxLength")?;
    bounds("minItems", "maxItems")?;
    bounds("minProperties", "maxProperties")?;
    let lo = match (num(schema, "minimum"), num(schema, "exclusiveMinimum")) {
        (Some(a), Some(b)) => Some((a.max(b), b >= a)),
        (Some(a), None) => Some((a, false)),
        (None, Some(b)) => Some((b, true)),
        _ => None,
    };
    let hi = match (num(schema, "maximum"), num(schema, "exclusiveMaximum")) {
        (Some(a), Some(b)) => Some((a.min(b), b <= a)),
        (Some(a), None) => Some((a, false)),
        (None, Some(b)) => Some((b, true)),
        _ => None,
    };
    if let (Some((l, lx)), Some((h, hx))) = (lo, hi) {
        let empty = l > h || (l == h && (lx || hx));
        let integer = obj.get("type").and_then(Value::as_str) == Some("integer");
        let no_integer = integer && {
            let first = if lx { l.floor() + 1.0 } else { l.ceil() };
            let last = if hx { h.ceil() - 1.0 } else { h.floor() };
            first > last
        };
        if empty || no_integer {
            return Err(format!("the bounds at {} admit no value", here()));
        }
    }
    // Every required property must be possible.
    let props = obj.get("properties").and_then(Value::as_object);
    let closed = obj.get("additionalProperties") == Some(&Value::Bool(false));
    for key in obj
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        match props.and_then(|p| p.get(key)) {
            Some(sub) => satisfiable(root, sub, &format!("{at}/properties/{key}"), depth + 1)?,
            None if closed => {
                return Err(format!(
                    "{key:?} is required at {} but additionalProperties is false and it is not a property",
                    here()
                ))
            }
            None => {}
        }
    }
    if let Some(items) = obj.get("items").filter(|i| i.is_object() || i.is_boolean()) {
        // Items must be possible only when at least one is required.
        if num(schema, "minItems").is_some_and(|n| n >= 1.0) {
            satisfiable(root, items, &format!("{at}/items"), depth + 1)?;
        }
    }
    for (kw, all) in [("allOf", true), ("anyOf", false), ("oneOf", false)] {
        let Some(branches) = obj.get(kw).and_then(Value::as_array) else {
            continue;
        };
        let results: Vec<Result<(), String>> = branches
            .iter()
            .enumerate()
            .map(|(i, b)| satisfiable(root, b, &format!("{at}/{kw}/{i}"), depth + 1))
            .collect();
        if all {
            if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
                return Err(e);
            }
        } else if !results.is_empty() && results.iter().all(Result::is_err) {
            return Err(format!("no branch of {kw} at {} admits a value", here()));
        }
    }
    Ok(())
}

/// Why a GBNF grammar cannot be used, or `Ok`: an inverted character range (`[5-1]`) or
/// repetition (`{5,1}`) admits nothing. (The grammar parser in llama.cpp reports syntax errors
/// itself; those come back as errors, not aborts.)
pub fn check_grammar(grammar: &str) -> Result<(), String> {
    let chars: Vec<char> = grammar.chars().collect();
    let mut i = 0;
    let mut in_class = false;
    let mut in_string = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            i += 2;
            continue;
        }
        if in_string {
            if c == '"' {
                in_string = false;
            }
        } else if in_class {
            if c == ']' {
                in_class = false;
            } else if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&n| n != ']')
            {
                let lo = c;
                let (hi, next) = escaped_char(&chars, i + 2);
                if let Some(hi) = hi {
                    if lo > hi {
                        return Err(format!(
                            "the grammar's character range [{lo}-{hi}] is inverted: it admits nothing"
                        ));
                    }
                }
                i = next;
                continue;
            }
        } else if c == '"' {
            in_string = true;
        } else if c == '[' {
            in_class = true;
            if chars.get(i + 1) == Some(&'^') {
                i += 1;
            }
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '{' {
            let end = chars[i..].iter().position(|&x| x == '}').map(|p| i + p);
            if let Some(end) = end {
                let body: String = chars[i + 1..end].iter().collect();
                if let Some((a, b)) = body.split_once(',') {
                    if let (Ok(a), Ok(b)) = (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
                        if a > b {
                            return Err(format!(
                                "the grammar's repetition {{{a},{b}}} is inverted: it admits nothing"
                            ));
                        }
                    }
                }
            }
        }
        i += 1;
    }
    Ok(())
}

/// The character at `i` (a plain character; an escape gives `None`) and the index after it.
fn escaped_char(chars: &[char], i: usize) -> (Option<char>, usize) {
    match chars.get(i) {
        Some('\\') => (None, i + 2),
        Some(&c) => (Some(c), i + 1),
        None => (None, i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_that_admit_nothing_or_are_invalid_are_refused_with_the_place() {
        for (schema, says) in [
            (
                json!({"type": "integer", "minimum": 5, "maximum": 1}),
                "minimum 5 is greater than maximum 1",
            ),
            (
                json!({"type": "number", "exclusiveMinimum": 1, "maximum": 1}),
                "admit no value",
            ),
            (
                json!({"type": "integer", "minimum": 1.2, "maximum": 1.8}),
                "admit no value",
            ),
            (
                json!({"type": "string", "minLength": 5, "maxLength": 1}),
                "minLength 5",
            ),
            (
                json!({"type": "array", "minItems": 3, "maxItems": 1}),
                "minItems 3",
            ),
            (json!({"enum": []}), "enum at the root is empty"),
            (json!({"type": "nonsense"}), "not valid"),
            (json!({"$ref": "#/definitions/x"}), "points to nothing"),
            (
                json!({"$ref": "http://example.invalid/s.json"}),
                "only local references",
            ),
            (json!(false), "admits no value"),
            (
                json!({"type": "object", "required": ["a"], "properties": {"a": {"enum": []}}}),
                "/properties/a",
            ),
            (
                json!({"type": "object", "required": ["b"], "properties": {"a": {}}, "additionalProperties": false}),
                "\"b\" is required",
            ),
            (
                json!({"anyOf": [{"enum": []}, {"type": "integer", "minimum": 2, "maximum": 1}]}),
                "no branch of anyOf",
            ),
            (
                json!({"allOf": [{"type": "string"}, {"enum": []}]}),
                "/allOf/1",
            ),
        ] {
            let e = check_schema(&schema).expect_err(&schema.to_string());
            assert!(e.contains(says), "{schema}: {e}");
        }
    }

    #[test]
    fn satisfiable_schemas_pass() {
        for schema in [
            json!({"type": "integer", "minimum": 1, "maximum": 1}),
            json!({"type": "object", "required": ["reason", "agent", "step"],
                   "properties": {"reason": {"type": "string", "maxLength": 600}, "agent": {"type": "string"},
                                  "step": {"type": "integer", "minimum": 0}}}),
            json!({"anyOf": [{"enum": []}, {"type": "string"}]}),
            json!({"definitions": {"x": {"type": "string"}}, "$ref": "#/definitions/x"}),
            json!({"type": "array", "items": {"enum": []}, "maxItems": 0}),
            json!(true),
            json!({}),
        ] {
            check_schema(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
        }
    }

    #[test]
    fn inverted_grammar_ranges_and_repetitions_are_refused() {
        assert!(check_grammar("root ::= ([5-1])").is_err());
        assert!(check_grammar("root ::= \"a\"{5,1}").is_err());
        assert!(check_grammar(
            "root ::= [0-9]{1,3} \"x\" [a-zA-Z_] [^\"\\\\] # [9-0] in a comment"
        )
        .is_ok());
        assert!(
            check_grammar("root ::= \"[9-0]\" \"{5,1}\"").is_ok(),
            "inside strings"
        );
        assert!(check_grammar("root ::= [-a] [a-]").is_ok());
    }
}
