//! The chat-completions request on the wire, one set of types for both ends: maslens' client
//! ([`crate::openai::chat_body`], and OpenAI Batch lines) writes a [`ChatBody`], and `maslens
//! serve-model` reads one ([`ChatBody::read`], whose errors name the field, e.g.
//! `messages[1].content`) and then checks what a type cannot say (ranges, roles, tool calls).
//!
//! The body holds what maslens sends plus what other clients send to `serve-model`: text parts,
//! `tool` messages and assistant `tool_calls`, `tools` / `tool_choice`, `stream`, `n`,
//! `max_completion_tokens` and llama.cpp's `grammar`.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A `/v1/chat/completions` request body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatBody {
    #[serde(default)]
    pub model: String,
    pub messages: Vec<RequestMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "positive_integer"
    )]
    pub max_tokens: Option<u64>,
    /// OpenAI's newer name for `max_tokens`; preferred when both are given.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "positive_integer"
    )]
    pub max_completion_tokens: Option<u64>,
    /// Any integer; a negative one is read as its two's-complement `u64`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "any_integer"
    )]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// A GBNF grammar, as llama.cpp's server takes it (not OpenAI's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    /// `tools` and `tool_choice` as sent; `serve-model` reads them itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
}

impl ChatBody {
    /// Read a body; the error names the field that does not fit (`messages[0].content: ...`).
    pub fn read(body: &Value) -> Result<ChatBody, String> {
        serde_path_to_error::deserialize(body).map_err(|e| {
            let path = e.path().to_string();
            match path.as_str() {
                "." => e.inner().to_string(),
                _ => format!("`{path}`: {}", e.inner()),
            }
        })
    }
}

/// One message of a request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Absent or `null` for an assistant message that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant's tool calls, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A message's content: text, or an array of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "must be a string or an array of text parts")]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of a message's content (`{"type": "text", "text": ...}`; other kinds are read, and
/// refused by the server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `stop`: one sequence or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "must be a string or an array of strings")]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    /// The sequences.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// `response_format`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON that follows a schema.
    JsonSchema {
        json_schema: JsonSchemaFormat,
    },
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: String,
    pub schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// A non-negative integer (`max_tokens`, `max_completion_tokens`); `null` reads as absent.
fn positive_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => (v.as_u64().map(Some))
            .ok_or_else(|| D::Error::custom(format!("must be a positive integer, got {v}"))),
    }
}

/// Any integer (`seed`); a negative one as its two's-complement `u64`.
fn any_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => (v.as_u64().or_else(|| v.as_i64().map(|i| i as u64)))
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("must be an integer, got {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_clients_send_and_names_the_field_that_does_not_fit() {
        let body = ChatBody::read(&json!({
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null, "tool_calls": []},
            ],
            "stop": "END", "seed": -1, "max_tokens": null,
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
        }))
        .unwrap();
        assert_eq!(body.stop.map(Stop::into_vec), Some(vec!["END".to_string()]));
        assert_eq!((body.seed, body.max_tokens), (Some(u64::MAX), None));
        assert!(matches!(body.messages[0].content, Some(Content::Parts(_))));
        assert!(body.messages[1].content.is_none());
        for (bad, needle) in [
            (json!({}), "missing field `messages`"),
            (
                json!({"messages": [{"role": "user", "content": 3}]}),
                "`messages[0].content`: must be a string or an array of text parts",
            ),
            (
                json!({"messages": [], "max_tokens": 1.5}),
                "`max_tokens`: must be a positive integer, got 1.5",
            ),
            (
                json!({"messages": [], "stop": [1]}),
                "`stop`: must be a string or an array of strings",
            ),
            (
                json!({"messages": [], "response_format": {"type": "xml"}}),
                "`response_format.type`: unknown variant `xml`",
            ),
            (
                json!({"messages": [], "seed": "x"}),
                "`seed`: must be an integer",
            ),
        ] {
            let err = ChatBody::read(&bad).unwrap_err();
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
