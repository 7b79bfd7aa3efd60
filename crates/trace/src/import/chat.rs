//! Chat transcripts: a JSON array of OpenAI-style messages (`role`, `name`, `content`,
//! `tool_calls`, `tool_call_id`), or an object holding one under `messages` or `history`
//! (AG2/AutoGen group chats, OpenAI SDK transcripts, most loggers).
//!
//! - the acting agent is `name` when present, else `role`;
//! - `content` may be a string, null, or a list of parts (`{"type":"text","text":...}`); text
//!   parts are joined with newlines, other parts are noted as `[<type>]`;
//! - `tool_calls[].function.{name,arguments}` and `tool_call_id` are kept;
//! - an object may also give `id`, `task`/`question`, `ground_truth`, `outcome` and
//!   `metadata`; otherwise the id is the file stem and the task the first user message.

use super::whowhen::Text;
use super::{ImportError, RecordCtx};
use crate::diag::Diagnostic;
use crate::model::{Outcome, Step, ToolCall, Trace};
use crate::names::{infer_kind, normalize_speaker};
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    content: Option<super::content::Content>,
    #[serde(default)]
    tool_calls: Option<Vec<RawToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    timestamp: Option<Text>,
}

#[derive(Deserialize)]
struct RawToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<Function>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct Function {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

fn args_string(v: Option<Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    }
}

const KNOWN: &[&str] = &[
    "messages",
    "history",
    "id",
    "task",
    "question",
    "ground_truth",
    "outcome",
    "metadata",
];

/// What [`import_value`] says when the record holds no transcript.
const NOT_A_TRANSCRIPT: &str =
    "expected an array of messages or an object with `messages` or `history`";

/// A record taken apart: the messages (still JSON), the key they were under (`messages` or
/// `history`; empty for a bare array) and the object's other fields (the header).
struct Transcript {
    messages: Value,
    key: &'static str,
    header: Map<String, Value>,
}

/// Import one chat transcript.
pub fn import_value(
    value: Value,
    ctx: &RecordCtx<'_>,
) -> Result<(Trace, Vec<Diagnostic>), ImportError> {
    let Transcript {
        messages,
        key,
        header,
    } = split_transcript(value, ctx)?;
    let messages = typed_messages(messages, key, ctx)?;
    let mut diags = Vec::new();
    let id = header_text(&header, "id")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ctx.default_id(false));
    let mut trace = Trace::new(id);
    trace.source = ctx.source("chat");
    trace.ground_truth = header_text(&header, "ground_truth");
    trace.outcome = header_outcome(header.get("outcome"), &mut diags);
    let first_user = push_messages(&mut trace, messages, key, &mut diags);
    trace.task = header_text(&header, "task")
        .or_else(|| header_text(&header, "question"))
        .or(first_user)
        .unwrap_or_default();
    trace.metadata = header_metadata(header);
    Ok((trace, diags))
}

/// The messages of a bare array, or of an object's `messages` (else `history`) with the rest
/// of the object as its header.
fn split_transcript(value: Value, ctx: &RecordCtx<'_>) -> Result<Transcript, ImportError> {
    match value {
        Value::Array(items) => Ok(Transcript {
            messages: Value::Array(items),
            key: "",
            header: Map::new(),
        }),
        Value::Object(mut header) => {
            let (key, messages) = if let Some(m) = header.remove("messages") {
                ("messages", m)
            } else if let Some(h) = header.remove("history") {
                ("history", h)
            } else {
                return Err(ctx.error(None, NOT_A_TRANSCRIPT));
            };
            Ok(Transcript {
                messages,
                key,
                header,
            })
        }
        _ => Err(ctx.error(None, NOT_A_TRANSCRIPT)),
    }
}

/// The messages as typed values; an error names the JSON path under `key`.
fn typed_messages(
    messages: Value,
    key: &str,
    ctx: &RecordCtx<'_>,
) -> Result<Vec<Message>, ImportError> {
    serde_path_to_error::deserialize(messages).map_err(|e| {
        let inner = super::path_string(e.path());
        let path = match (key.is_empty(), inner) {
            (true, p) => p,
            (false, Some(p)) if p.starts_with('[') => Some(format!("{key}{p}")),
            (false, Some(p)) => Some(format!("{key}.{p}")),
            (false, None) => Some(key.to_string()),
        };
        ctx.error(
            path,
            format!(
                "not a valid chat transcript: {}",
                super::plain_message(&e.inner().to_string())
            ),
        )
    })
}

/// A header field given as a string or a number, as text.
fn header_text(header: &Map<String, Value>, key: &str) -> Option<String> {
    match header.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

/// The header's `outcome`: a word or a boolean; anything else is unknown, with a warning.
fn header_outcome(outcome: Option<&Value>, diags: &mut Vec<Diagnostic>) -> Outcome {
    let mut warn = |message: String| {
        diags.push(Diagnostic::warning(message).at("outcome"));
        Outcome::Unknown
    };
    match outcome {
        None | Some(Value::Null) => Outcome::Unknown,
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "success" | "succeeded" | "pass" | "passed" | "correct" => Outcome::Success,
            "failure" | "failed" | "fail" | "incorrect" => Outcome::Failure,
            "unknown" | "" => Outcome::Unknown,
            other => warn(format!(
                "unknown outcome {other:?}: expected success, failure or unknown"
            )),
        },
        Some(Value::Bool(true)) => Outcome::Success,
        Some(Value::Bool(false)) => Outcome::Failure,
        Some(_) => warn("`outcome` is not a string or boolean; outcome unknown".to_string()),
    }
}

/// The header's fields maslens does not read, then the entries of its `metadata` object (a
/// `metadata` that is not an object is kept under `metadata`).
fn header_metadata(header: Map<String, Value>) -> Map<String, Value> {
    let mut metadata: Map<String, Value> = header
        .iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    match header.get("metadata") {
        Some(Value::Object(m)) => metadata.extend(m.clone()),
        Some(Value::Null) | None => {}
        Some(other) => {
            metadata.insert("metadata".into(), other.clone());
        }
    }
    metadata
}

/// One step per message, in order (registering each speaker as an agent); returns the text of
/// the first `user` message.
fn push_messages(
    trace: &mut Trace,
    messages: Vec<Message>,
    key: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<String> {
    let mut first_user: Option<String> = None;
    for (i, m) in messages.into_iter().enumerate() {
        let role = m.role.clone().unwrap_or_default();
        let speaker = match &m.name {
            Some(n) if !n.trim().is_empty() => n.clone(),
            _ => role.clone(),
        };
        let agent = normalize_speaker(&speaker).to_string();
        if agent.is_empty() {
            diags.push(
                Diagnostic::warning("message has neither `name` nor `role`; agent left empty")
                    .at(format!("{key}[{i}]")),
            );
        } else {
            trace.ensure_agent(&agent, infer_kind(&agent, m.role.as_deref()));
        }
        let content = super::content::text_of(m.content);
        if first_user.is_none() && role.eq_ignore_ascii_case("user") {
            first_user = Some(content.clone());
        }
        trace.steps.push(Step {
            index: i,
            agent,
            speaker,
            content,
            tool_calls: tool_calls(m.tool_calls),
            tool_call_id: m.tool_call_id,
            timestamp: m.timestamp.map(Text::into_string),
            ..Step::default()
        });
    }
    first_user
}

/// A message's tool calls, from `function.{name,arguments}` or the call's own fields.
fn tool_calls(calls: Option<Vec<RawToolCall>>) -> Vec<ToolCall> {
    calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            let (name, arguments) = match c.function {
                Some(f) => (f.name.or(c.name), f.arguments.or(c.arguments)),
                None => (c.name, c.arguments),
            };
            ToolCall {
                id: c.id,
                name: name.unwrap_or_default(),
                arguments: args_string(arguments),
            }
        })
        .collect()
}
