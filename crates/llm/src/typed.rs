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

/// Tokens a repair call leaves free beyond its prompt and answer (chat-template tokens that the
/// count of the messages' text does not see).
const REPAIR_MARGIN: usize = 64;

/// Fewest answer tokens a repair call is sent with; with less room in the window it is not sent.
const MIN_REPAIR_ANSWER: u32 = 96;

/// The repair request's instructions (`prompts/llm/repair.v1.j2`).
pub const REPAIR: crate::prompt::Template = crate::prompt_template!("llm/repair.v1");

/// Run `request` (its `json_schema` set to `schema`) and read the answer as `T`; one repair call
/// quoting the problem, else an abstention (`value: None`) carrying the reason. Backend errors
/// (network, budget, replay miss) are returned as `Err`; answers that do not fit are never one.
pub async fn complete_as<T: DeserializeOwned>(
    model: &dyn ChatModel,
    request: ChatRequest,
    schema: &Value,
) -> Result<StructuredOutput<T>, LlmError> {
    complete_as_checked(model, request, schema, &|_: &T| None).await
}

/// [`complete_as`] with a check of the answer's meaning after its form: `check` returns the
/// problem of an answer that fits the schema but says nothing usable (a reason that only
/// restates the verdict, a step outside the trace), and that problem is sent in the one repair
/// call as a schema problem would be. The repair's answer is kept when it fits the schema, even
/// if the check still fails (the caller can run `check` again to learn so); when it does not
/// fit, the first answer (which fit the schema) is kept. Only an answer that never fit the
/// schema is an abstention.
pub async fn complete_as_checked<T: DeserializeOwned>(
    model: &dyn ChatModel,
    mut request: ChatRequest,
    schema: &Value,
    check: &(dyn Fn(&T) -> Option<String> + Send + Sync),
) -> Result<StructuredOutput<T>, LlmError> {
    request.json_schema = Some(schema.clone());
    let first = model.complete(&request).await?;
    let mut usage = first.usage;
    let (problem, kept) = match parse_answer::<T>(&first.text, &first.finish_reason, schema) {
        Ok(value) => match check(&value) {
            None => {
                return Ok(StructuredOutput {
                    value: Some(value),
                    raw: first.text,
                    abstain_reason: None,
                    repaired: false,
                    usage,
                    calls: 1,
                })
            }
            Some(problem) => (problem, Some(value)),
        },
        Err(problem) => (problem, None),
    };
    let text = REPAIR
        .render(serde_json::json!({"problem": problem, "schema": schema.to_string()}))
        .map_err(|e| LlmError::Other(e.to_string()))?;
    let build = |with_answer: bool| {
        let mut repair = request.clone();
        repair.stage = format!("{}/repair", request.stage);
        repair.template = REPAIR.name.to_string();
        if with_answer {
            repair.messages.push(Message::assistant(first.text.clone()));
        }
        repair.messages.push(Message::user(text.clone()));
        repair
    };
    let mut repair = build(true);
    if let Some(ctx) = model.context_size() {
        // The repair must fit the window with room for its answer: without the first answer
        // (the problem says what was wrong with it) when that is what it takes, with fewer
        // answer tokens when even that is short, and not at all when too little room is left.
        let room = |r: &ChatRequest| {
            let prompt: usize = r
                .messages
                .iter()
                .map(|m| model.count_tokens(&m.content))
                .sum();
            ctx.saturating_sub(prompt + REPAIR_MARGIN)
        };
        if room(&repair) < repair.max_tokens as usize {
            let mut lean = build(false);
            let left = room(&lean);
            if left < MIN_REPAIR_ANSWER as usize {
                let abstain_reason = kept.is_none().then(|| {
                    format!(
                        "invalid, and no room in the context window for a repair call: {problem}"
                    )
                });
                let raw = first.text;
                return Ok(StructuredOutput {
                    value: kept,
                    raw,
                    abstain_reason,
                    repaired: false,
                    usage,
                    calls: 1,
                });
            }
            lean.max_tokens = lean.max_tokens.min(left as u32);
            repair = lean;
        }
    }
    let second = model.complete(&repair).await?;
    usage += second.usage;
    let (value, raw, abstain_reason) =
        match parse_answer(&second.text, &second.finish_reason, schema) {
            Ok(value) => (Some(value), second.text, None),
            Err(_) if kept.is_some() => (kept, first.text, None),
            Err(problem2) => (
                None,
                second.text,
                Some(format!(
                    "invalid after one repair: {problem2} (first answer: {problem})"
                )),
            ),
        };
    Ok(StructuredOutput {
        value,
        raw,
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

    #[tokio::test]
    async fn a_check_that_fails_gets_the_repair_call_and_keeps_a_valid_answer() {
        let schema = json!({"type": "object", "required": ["step"]});
        let tautology =
            |s: &Step| (s.reason.trim().is_empty()).then(|| "the reason says nothing".to_string());
        // first answer fails the check, the repair passes it
        let m = ScriptedModel::new("fixture")
            .then("{\"step\": 2}")
            .then("{\"step\": 3, \"reason\": \"the total is wrong\"}");
        let out = complete_as_checked::<Step>(
            &m,
            ChatRequest::new(vec![Message::user("q")]),
            &schema,
            &tautology,
        )
        .await
        .unwrap();
        assert_eq!(out.value.as_ref().and_then(|s| s.step), Some(3));
        assert!(out.repaired);
        let repair = m.calls.lock().unwrap()[1]
            .messages
            .last()
            .unwrap()
            .content
            .clone();
        assert!(repair.contains("the reason says nothing"), "{repair}");
        // the repair fails the check again: kept (the caller sees it by checking again)
        let m = ScriptedModel::new("fixture")
            .then("{\"step\": 2}")
            .then("{\"step\": 4}");
        let out = complete_as_checked::<Step>(
            &m,
            ChatRequest::new(vec![Message::user("q")]),
            &schema,
            &tautology,
        )
        .await
        .unwrap();
        assert_eq!(out.value.as_ref().and_then(|s| s.step), Some(4));
        assert!(out.abstain_reason.is_none());
        // the repair does not fit the schema: the first answer (which did) is kept
        let m = ScriptedModel::new("fixture")
            .then("{\"step\": 2}")
            .then("nope");
        let out = complete_as_checked::<Step>(
            &m,
            ChatRequest::new(vec![Message::user("q")]),
            &schema,
            &tautology,
        )
        .await
        .unwrap();
        assert_eq!(out.value.as_ref().and_then(|s| s.step), Some(2));
        assert_eq!((out.calls, out.repaired), (2, true));
        // a passing answer needs one call
        let m = ScriptedModel::new("fixture").then("{\"step\": 1, \"reason\": \"x y\"}");
        let out = complete_as_checked::<Step>(
            &m,
            ChatRequest::new(vec![Message::user("q")]),
            &schema,
            &tautology,
        )
        .await
        .unwrap();
        assert_eq!((out.calls, out.repaired), (1, false));
    }

    /// A scripted model with a context window.
    struct Window(ScriptedModel, usize);
    impl crate::wrap::ModelWrapper for Window {
        fn inner(&self) -> &dyn ChatModel {
            &self.0
        }
        fn context_size(&self) -> Option<usize> {
            Some(self.1)
        }
    }

    #[tokio::test]
    async fn a_repair_call_fits_the_context_window_or_is_not_sent() {
        let schema = json!({"type": "object", "required": ["step"]});
        let mut req = ChatRequest::new(vec![Message::user("q".repeat(1600))]);
        req.max_tokens = 100;
        let script = |ctx| {
            Window(
                ScriptedModel::new("fixture")
                    .then("x".repeat(800))
                    .then("{\"step\": 1}"),
                ctx,
            )
        };
        // room enough: the repair shows the model its answer
        let m = script(5000);
        let out = complete_as::<Step>(&m, req.clone(), &schema).await.unwrap();
        assert_eq!(out.value.and_then(|s| s.step), Some(1));
        let calls = m.0.calls.lock().unwrap().clone();
        assert_eq!(calls[1].messages.len(), 3, "prompt, first answer, repair");
        // the first answer does not fit beside the repair: left out
        let m = script(800);
        let out = complete_as::<Step>(&m, req.clone(), &schema).await.unwrap();
        assert_eq!(out.value.and_then(|s| s.step), Some(1));
        let calls = m.0.calls.lock().unwrap().clone();
        assert_eq!(calls[1].messages.len(), 2, "prompt and repair");
        assert_eq!(calls[1].messages[1].role, crate::Role::User);
        assert!(calls[1].max_tokens <= 100);
        // not even that leaves room for an answer: no repair call
        let m = script(600);
        let out = complete_as::<Step>(&m, req, &schema).await.unwrap();
        assert!(out.value.is_none());
        assert!(out
            .abstain_reason
            .unwrap()
            .contains("no room in the context window"));
        assert_eq!((m.0.n_calls(), out.calls), (1, 1));
    }
}
