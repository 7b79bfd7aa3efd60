//! Typed structured answers: a model answer is extracted, validated against its JSON schema
//! (as [`crate::structured`] does), then deserialized into the answer's struct.
//!
//! A value that validates but does not deserialize is the same kind of failure as one that does
//! not validate: the next candidate in the text is tried, and if none fits, the one repair call
//! quotes the problem. Answer structs are written so that every schema-valid value deserializes
//! (integers through [`lenient`], since JSON Schema also counts `3.0` as an integer), so a typed
//! call accepts exactly the answers an untyped one does.

use crate::structured::{compile, json_candidates, validate_with, StructuredOutput};
use crate::{ChatModel, ChatRequest, LlmError, Message};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Deserialize an already extracted `value` into `T` after validating it against `schema`.
/// The error is `path: problem` as [`validate`] writes it, or `$: ...` for a value that does
/// not deserialize.
pub fn from_value<T: DeserializeOwned>(value: &Value, schema: &Value) -> Result<T, String> {
    from_value_with(value, &compile(schema)?)
}

/// [`from_value`] with the schema compiled once.
fn from_value_with<T: DeserializeOwned>(
    value: &Value,
    validator: &jsonschema::Validator,
) -> Result<T, String> {
    validate_with(validator, value)?;
    T::deserialize(value).map_err(|e| format!("$: {e}"))
}

/// Extract the answer from model `text` and read it as `T`: the first JSON candidate (fenced
/// blocks first, then balanced values in reading order) that validates against `schema` and
/// deserializes into `T`. When none does, the error describes the first candidate.
pub fn parse_as<T: DeserializeOwned>(text: &str, schema: &Value) -> Result<T, String> {
    parse_answer(text, "stop", schema)
}

/// [`parse_as`] for an answer that ended with `finish_reason` (`length` adds a note that the
/// answer was cut off at `max_tokens` to the error).
pub fn parse_answer<T: DeserializeOwned>(
    text: &str,
    finish_reason: &str,
    schema: &Value,
) -> Result<T, String> {
    let candidates = json_candidates(text);
    let cut = if finish_reason == "length" {
        " (the answer was cut off at max_tokens)"
    } else {
        ""
    };
    let Some(first) = candidates.first() else {
        return Err(format!("no JSON object found in the answer{cut}"));
    };
    let validator = compile(schema)?;
    if let Some(ok) = candidates
        .iter()
        .find_map(|c| from_value_with(c, &validator).ok())
    {
        return Ok(ok);
    }
    from_value_with(first, &validator).map_err(|problem| format!("{problem}{cut}"))
}

/// The repair request's instructions (`prompts/llm/repair.v1.j2`).
pub const REPAIR: crate::prompt::Template = crate::prompt_template!("llm/repair.v1");

/// Run `request` (its `json_schema` set to `schema`) and read the answer as `T`; one repair call
/// quoting the problem, else an abstention (`value: None`) carrying the reason. Backend errors
/// (network, budget, replay miss) are returned as `Err`; answers that do not fit are never one.
pub async fn complete_as<T: DeserializeOwned>(
    model: &dyn ChatModel,
    mut request: ChatRequest,
    schema: &Value,
) -> Result<StructuredOutput<T>, LlmError> {
    request.json_schema = Some(schema.clone());
    let first = model.complete(&request).await?;
    let mut usage = first.usage;
    let problem = match parse_answer(&first.text, &first.finish_reason, schema) {
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
    repair.template = REPAIR.name.to_string();
    repair.messages.push(Message::assistant(first.text.clone()));
    let text = REPAIR
        .render(serde_json::json!({"problem": problem, "schema": schema.to_string()}))
        .map_err(|e| LlmError::Other(e.to_string()))?;
    repair.messages.push(Message::user(text));
    let second = model.complete(&repair).await?;
    usage += second.usage;
    let (value, abstain_reason) = match parse_answer(&second.text, &second.finish_reason, schema) {
        Ok(value) => (Some(value), None),
        Err(problem2) => (
            None,
            Some(format!(
                "invalid after one repair: {problem2} (first answer: {problem})"
            )),
        ),
    };
    Ok(StructuredOutput {
        value,
        raw: second.text,
        abstain_reason,
        repaired: true,
        usage,
        calls: 2,
    })
}

impl<T> StructuredOutput<T> {
    /// The calls of this structured call as an aggregate: tokens, calls (1 or 2), whether the
    /// repair call was needed, whether it ended in an abstention.
    pub fn totals(&self) -> crate::Totals {
        let mut t = crate::Totals {
            calls: u64::from(self.calls),
            repairs: u64::from(self.repaired),
            abstentions: u64::from(self.value.is_none()),
            ..Default::default()
        };
        t += self.usage;
        t
    }
}

/// Serde helpers that read a field the way the untyped code read it from a `serde_json::Value`:
/// they accept any JSON value and never fail, so a schema-valid answer always deserializes.
/// Use with `#[serde(default, deserialize_with = "lenient::...")]`.
pub mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;
    use std::collections::BTreeMap;

    /// An integer (`Value::as_i64`): `None` for `3.0`, `"3"`, null or anything else.
    pub fn int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        Ok(Value::deserialize(d)?.as_i64())
    }

    /// A non-negative integer (`Value::as_u64`): `None` for `3.0`, `-1`, `"3"`, null, ...
    pub fn uint<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(Value::deserialize(d)?.as_u64())
    }

    /// A non-negative integer, also when given as a string (`"3"`, `" 3 "`), keeping the value
    /// as written (to quote it when it is not one). Absent: `written` is null.
    #[derive(Debug, Clone, Default, PartialEq)]
    pub struct UintOrString {
        pub value: Option<u64>,
        pub written: Value,
    }

    impl<'de> Deserialize<'de> for UintOrString {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let written = Value::deserialize(d)?;
            let value = written
                .as_u64()
                .or_else(|| written.as_str().and_then(|t| t.trim().parse().ok()));
            Ok(UintOrString { value, written })
        }
    }

    /// A string (`Value::as_str`): `None` for any other value.
    pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(Value::deserialize(d)?.as_str().map(String::from))
    }

    /// A JSON value kept as written, `null` when absent (for error messages that quote it).
    pub fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    /// An object of non-negative integers (`Value::as_u64` per entry); not an object: empty.
    pub fn uint_map<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Option<u64>>, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Object(m) => m.into_iter().map(|(k, v)| (k, v.as_u64())).collect(),
            _ => BTreeMap::new(),
        })
    }

    /// An array of strings (`Value::as_str` per entry, others dropped); not an array: `None`.
    pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Array(a) => Some(
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect(),
            ),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedModel;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Step {
        #[serde(default, deserialize_with = "lenient::int")]
        step: Option<i64>,
        #[serde(default)]
        reason: String,
    }

    fn step_schema() -> Value {
        json!({"type": "object", "required": ["step"], "properties": {"step": {"type": "integer"}}})
    }

    #[test]
    fn picks_the_candidate_that_fits_the_schema() {
        let schema = json!({"type": "object", "required": ["step"]});
        let text = "The steps [1, 2] matter. Answer: {\"step\": 2}";
        assert_eq!(parse_as::<Value>(text, &schema), Ok(json!({"step": 2})));
        let err = parse_answer::<Value>("{\"a\": 1", "length", &schema).unwrap_err();
        assert!(err.contains("cut off"), "{err}");
        assert_eq!(
            parse_as::<Step>(text, &schema),
            Ok(Step {
                step: Some(2),
                reason: String::new()
            })
        );
    }

    #[test]
    fn lenient_integers_read_as_the_untyped_code_did() {
        // 3.0 is an integer to JSON Schema, but not to `as_i64`: accepted, step unknown.
        let s: Step = parse_as("{\"step\": 3.0}", &step_schema()).unwrap();
        assert_eq!(s.step, None);
        let s: Step = parse_as("{\"step\": -2, \"reason\": \"r\"}", &step_schema()).unwrap();
        assert_eq!((s.step, s.reason.as_str()), (Some(-2), "r"));

        #[derive(Deserialize)]
        struct Loose {
            #[serde(default)]
            n: lenient::UintOrString,
            #[serde(default, deserialize_with = "lenient::uint")]
            u: Option<u64>,
            #[serde(default, deserialize_with = "lenient::string")]
            s: Option<String>,
            #[serde(default, deserialize_with = "lenient::uint_map")]
            m: BTreeMap<String, Option<u64>>,
            #[serde(default, deserialize_with = "lenient::strings")]
            l: Option<Vec<String>>,
            #[serde(default, deserialize_with = "lenient::raw")]
            r: Value,
        }
        let any = json!({});
        let l: Loose = from_value(
            &json!({"n": " 7 ", "u": 4.0, "s": 3, "m": {"a": 2, "b": "x"}, "l": ["a", 1, "b"]}),
            &any,
        )
        .unwrap();
        assert_eq!((l.n.value, l.u, l.s), (Some(7), None, None));
        assert_eq!(l.n.written, json!(" 7 "));
        assert_eq!(l.m["a"], Some(2));
        assert_eq!(l.m["b"], None);
        assert_eq!(l.l, Some(vec!["a".to_string(), "b".to_string()]));
        assert!(l.r.is_null());
        let l: Loose = from_value(&json!({"n": 5, "m": [1], "l": "x", "r": [1]}), &any).unwrap();
        assert_eq!(
            (l.n.value, l.m.len(), l.l, l.r),
            (Some(5), 0, None, json!([1]))
        );
        let l: Loose = from_value(&json!({"n": "five"}), &any).unwrap();
        assert_eq!((l.n.value, l.n.written), (None, json!("five")));
        let l: Loose = from_value(&json!({}), &any).unwrap();
        assert_eq!((l.n.value, l.n.written), (None, Value::Null));
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Strict {
        flag: bool,
    }

    #[tokio::test]
    async fn a_value_that_does_not_deserialize_gets_the_repair_call() {
        // The schema does not constrain `flag`, the struct does: same repair path as a
        // validation failure, quoting the deserialization problem.
        let schema = json!({"type": "object"});
        let m = ScriptedModel::new("fixture")
            .then("{\"flag\": \"yes\"}")
            .then("{\"flag\": true}");
        let out = complete_as::<Strict>(
            &m,
            ChatRequest::new(vec![Message::user("q")]).stage("s"),
            &schema,
        )
        .await
        .unwrap();
        assert!(out.value.unwrap().flag);
        assert!(out.repaired);
        assert_eq!(out.calls, 2);
        {
            let calls = m.calls.lock().unwrap();
            assert_eq!(calls[1].stage, "s/repair");
            assert_eq!(calls[1].template, "llm/repair.v1");
            let repair = &calls[1].messages.last().unwrap().content;
            assert!(repair.contains("$: invalid type"), "{repair}");
            // The template renders the text the code wrote before it was a file, byte for byte
            // (cached answers to repair calls stay valid).
            let problem = repair
                .strip_prefix("Your answer was not valid: ")
                .and_then(|r| r.split_once(". Answer again"))
                .map(|(p, _)| p)
                .unwrap();
            assert_eq!(
                repair,
                &format!(
                    "Your answer was not valid: {problem}. Answer again with only one JSON object that \
                     satisfies this JSON schema, and nothing else:\n{schema}"
                )
            );
        }

        let m = ScriptedModel::new("fixture").then("{}").then("nope");
        let out = complete_as::<Strict>(&m, ChatRequest::new(vec![Message::user("q")]), &schema)
            .await
            .unwrap();
        assert!(out.value.is_none());
        let why = out.abstain_reason.unwrap();
        assert!(why.contains("missing field `flag`"), "{why}");
        assert!(why.contains("no JSON object found"), "{why}");
    }
}
