//! The OpenAI chat-completions request ([`ChatBody`], in `request.rs`) and answer on the wire,
//! one set of types for both ends. The answer: the client
//! ([`crate::openai`], and OpenAI Batch output in [`crate::batch`]) reads a [`Completion`], and
//! `maslens serve-model` writes a [`Completion`] or a stream of [`Chunk`]s and its errors as an
//! [`ErrorBody`]. A change to a field is then a change to both ends, and a round-trip test holds
//! them together.
//!
//! Reading is lenient where servers differ: missing ids, a `usage` that is absent or `null`,
//! token counts that are missing, `null` or not integers all read as absent or 0.

mod request;

pub use request::{
    ChatBody, Content, ContentPart, JsonSchemaFormat, RequestMessage, ResponseFormat, Stop,
};

use crate::{ChatResponse, Usage};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// `object` of a whole answer.
pub const COMPLETION_OBJECT: &str = "chat.completion";
/// `object` of one streamed chunk.
pub const CHUNK_OBJECT: &str = "chat.completion.chunk";

/// A `chat.completion` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub object: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<WireUsage>,
}

/// One choice of a [`Completion`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub index: u64,
    pub message: AssistantMessage,
    /// `stop`, `length`, `tool_calls`, ...; `null` on the wire when unknown.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// The assistant's message: its text (`null` when it answered with tool calls or refused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    #[serde(default = "assistant")]
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
}

impl Default for AssistantMessage {
    fn default() -> Self {
        AssistantMessage {
            role: assistant(),
            content: None,
            refusal: None,
            tool_calls: None,
        }
    }
}

fn assistant() -> String {
    "assistant".into()
}

/// Token counts as OpenAI reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WireUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub prompt_tokens: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub completion_tokens: u64,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`: how much of the prompt came from the server's prefix cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default, deserialize_with = "lenient_u64")]
    pub cached_tokens: u64,
}

impl From<&Usage> for WireUsage {
    fn from(u: &Usage) -> Self {
        WireUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: u.cached_tokens,
            }),
        }
    }
}

impl From<&WireUsage> for Usage {
    fn from(u: &WireUsage) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u
                .prompt_tokens_details
                .as_ref()
                .map_or(0, |d| d.cached_tokens),
        }
    }
}

impl Completion {
    /// The whole answer of model `model` as `serve-model` sends it: the text, or the tool calls
    /// it made (content `null`, finish reason `tool_calls`).
    pub fn answer(
        model: &str,
        id: &str,
        created: u64,
        r: &ChatResponse,
        calls: Option<Vec<Value>>,
    ) -> Completion {
        let (message, finish_reason) = match calls {
            Some(calls) => (
                AssistantMessage {
                    tool_calls: Some(calls),
                    ..AssistantMessage::default()
                },
                "tool_calls".to_string(),
            ),
            None => (
                AssistantMessage {
                    content: Some(r.text.clone()),
                    ..AssistantMessage::default()
                },
                r.finish_reason.clone(),
            ),
        };
        Completion {
            id: id.to_string(),
            object: COMPLETION_OBJECT.into(),
            created,
            model: model.to_string(),
            choices: vec![Choice {
                index: 0,
                message,
                finish_reason: Some(finish_reason),
            }],
            usage: Some(WireUsage::from(&r.usage)),
        }
    }

    /// The first choice as a [`ChatResponse`] (what the client reads); an error says what is
    /// missing, or that the model refused.
    pub fn into_response(self) -> Result<ChatResponse, String> {
        let usage = self.usage.as_ref().map(Usage::from).unwrap_or_default();
        let Some(choice) = self.choices.into_iter().next() else {
            return Err("no `choices[0]` in the response".into());
        };
        let text = match (choice.message.content, choice.message.refusal) {
            (Some(text), _) => text,
            (None, Some(refusal)) => return Err(format!("the model refused: {refusal}")),
            (None, None) => String::new(),
        };
        Ok(ChatResponse {
            text,
            finish_reason: choice.finish_reason.unwrap_or_default(),
            usage,
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        })
    }
}

/// One `chat.completion.chunk` of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<WireUsage>,
}

/// The one choice of a [`Chunk`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    pub index: u64,
    pub delta: Delta,
    /// `null` on every chunk but the last.
    pub finish_reason: Option<String>,
}

/// What a chunk adds to the message; absent fields add nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
}

impl Chunk {
    /// A chunk of model `model`'s answer `id`, adding `delta`; the last one carries the finish
    /// reason and the usage.
    pub fn new(
        model: &str,
        id: &str,
        created: u64,
        delta: Delta,
        last: Option<(&str, &Usage)>,
    ) -> Chunk {
        Chunk {
            id: id.to_string(),
            object: CHUNK_OBJECT.into(),
            created,
            model: model.to_string(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: last.map(|(finish, _)| finish.to_string()),
            }],
            usage: last.map(|(_, usage)| WireUsage::from(usage)),
        }
    }

    /// The chunk as one server-sent event (`data: {...}` and a blank line).
    pub fn sse(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("data: {json}\n\n")
    }
}

/// The body of an error answer: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong, as OpenAI's API says it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    /// `invalid_request_error`, `rate_limit_error`, `server_error`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub param: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
}

impl ErrorBody {
    pub fn new(kind: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: message.into(),
                kind: kind.to_string(),
                param: None,
                code: None,
            },
        }
    }
}

/// A count that may be missing, `null`, negative or not an integer on the wire: then 0.
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Value::deserialize(d)?.as_u64().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn response(text: &str) -> ChatResponse {
        ChatResponse {
            text: text.into(),
            finish_reason: "stop".into(),
            usage: Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                cached_tokens: 8,
            },
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        }
    }

    /// What `serve-model` writes, the client reads back as the same answer.
    #[test]
    fn an_answer_round_trips_between_the_two_ends() {
        let r = response("ok");
        let wire =
            serde_json::to_value(Completion::answer("m", "chatcmpl-1", 7, &r, None)).unwrap();
        assert_eq!(
            wire,
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
                             "prompt_tokens_details": {"cached_tokens": 8}}})
        );
        let back: Completion = serde_json::from_value(wire).unwrap();
        assert_eq!(back.into_response().unwrap(), r);
    }

    #[test]
    fn tool_calls_have_null_content_and_their_finish_reason() {
        let calls = vec![json!({"id": "c1", "type": "function",
                                "function": {"name": "f", "arguments": "{}"}})];
        let wire = serde_json::to_value(Completion::answer(
            "m",
            "x",
            0,
            &response(""),
            Some(calls.clone()),
        ))
        .unwrap();
        assert_eq!(
            wire["choices"][0]["message"],
            json!({"role": "assistant", "content": null, "tool_calls": calls})
        );
        assert_eq!(wire["choices"][0]["finish_reason"], "tool_calls");
    }

    /// Other servers' answers: what they leave out or set to null reads as absent.
    #[test]
    fn reading_is_lenient_where_servers_differ() {
        let c: Completion = serde_json::from_value(json!({
            "choices": [{"message": {"content": "hi"}, "finish_reason": null}],
            "usage": {"prompt_tokens": null, "completion_tokens": 3.5}
        }))
        .unwrap();
        let r = c.into_response().unwrap();
        assert_eq!((r.text.as_str(), r.finish_reason.as_str()), ("hi", ""));
        assert_eq!(r.usage, Usage::default());
        let c: Completion =
            serde_json::from_value(json!({"choices": [{"message": {}}], "usage": null})).unwrap();
        assert_eq!(c.into_response().unwrap().text, "");
    }

    #[test]
    fn no_choice_and_a_refusal_are_errors_that_say_so() {
        let none: Completion = serde_json::from_value(json!({"choices": []})).unwrap();
        assert_eq!(
            none.into_response().unwrap_err(),
            "no `choices[0]` in the response"
        );
        let refused: Completion = serde_json::from_value(
            json!({"choices": [{"message": {"content": null, "refusal": "no"}}]}),
        )
        .unwrap();
        assert_eq!(
            refused.into_response().unwrap_err(),
            "the model refused: no"
        );
    }

    #[test]
    fn chunks_carry_the_finish_reason_and_usage_only_at_the_end() {
        let first = Chunk::new(
            "m",
            "x",
            1,
            Delta {
                role: Some("assistant".into()),
                content: Some(String::new()),
                ..Delta::default()
            },
            None,
        );
        assert_eq!(
            serde_json::to_value(&first).unwrap(),
            json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "finish_reason": null}]})
        );
        let usage = response("").usage;
        let last = Chunk::new("m", "x", 1, Delta::default(), Some(("stop", &usage)));
        let sse = last.sse();
        assert!(
            sse.starts_with("data: {") && sse.ends_with("}\n\n"),
            "{sse}"
        );
        let back: Chunk = serde_json::from_str(sse.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(back.choices[0].finish_reason.as_deref(), Some("stop"));
        assert_eq!(back.usage.as_ref().map(Usage::from), Some(usage));
    }

    #[test]
    fn an_error_body_is_openais_shape() {
        assert_eq!(
            serde_json::to_value(ErrorBody::new("invalid_request_error", "bad")).unwrap(),
            json!({"error": {"message": "bad", "type": "invalid_request_error",
                             "param": null, "code": null}})
        );
    }
}
