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
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<RawToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    timestamp: Option<Text>,
}

#[derive(Deserialize)]
#[serde(untagged, expecting = "expected a string or an array of text parts")]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
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

/// Import one chat transcript.
pub fn import_value(
    value: Value,
    ctx: &RecordCtx<'_>,
) -> Result<(Trace, Vec<Diagnostic>), ImportError> {
    let mut diags = Vec::new();
    let mut metadata = Map::new();
    let (messages_value, prefix, header) = match value {
        Value::Array(items) => (Value::Array(items), "", Map::new()),
        Value::Object(mut obj) => {
            let (key, msgs) = if let Some(m) = obj.remove("messages") {
                ("messages", m)
            } else if let Some(h) = obj.remove("history") {
                ("history", h)
            } else {
                return Err(ctx.error(
                    None,
                    "expected an array of messages or an object with `messages` or `history`",
                ));
            };
            for (k, v) in &obj {
                if !KNOWN.contains(&k.as_str()) {
                    metadata.insert(k.clone(), v.clone());
                }
            }
            (msgs, key, obj)
        }
        _ => {
            return Err(ctx.error(
                None,
                "expected an array of messages or an object with `messages` or `history`",
            ))
        }
    };
    let messages: Vec<Message> = serde_path_to_error::deserialize(messages_value).map_err(|e| {
        let inner = super::path_string(e.path());
        let path = match (prefix.is_empty(), inner) {
            (true, p) => p,
            (false, Some(p)) if p.starts_with('[') => Some(format!("{prefix}{p}")),
            (false, Some(p)) => Some(format!("{prefix}.{p}")),
            (false, None) => Some(prefix.to_string()),
        };
        ctx.error(
            path,
            format!(
                "not a valid chat transcript: {}",
                super::plain_message(&e.inner().to_string())
            ),
        )
    })?;

    let get_str = |k: &str| -> Option<String> {
        match header.get(k) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
    };
    let id = get_str("id")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ctx.default_id(false));
    let mut trace = Trace::new(id);
    trace.source = ctx.source("chat");
    trace.ground_truth = get_str("ground_truth");
    let explicit_task = get_str("task").or_else(|| get_str("question"));
    trace.outcome = match header.get("outcome") {
        None | Some(Value::Null) => Outcome::Unknown,
        Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "success" | "succeeded" | "pass" | "passed" | "correct" => Outcome::Success,
            "failure" | "failed" | "fail" | "incorrect" => Outcome::Failure,
            "unknown" | "" => Outcome::Unknown,
            other => {
                diags.push(
                    Diagnostic::warning(format!(
                        "unknown outcome {other:?}: expected success, failure or unknown"
                    ))
                    .at("outcome"),
                );
                Outcome::Unknown
            }
        },
        Some(Value::Bool(b)) => {
            if *b {
                Outcome::Success
            } else {
                Outcome::Failure
            }
        }
        Some(_) => {
            diags.push(
                Diagnostic::warning("`outcome` is not a string or boolean; outcome unknown")
                    .at("outcome"),
            );
            Outcome::Unknown
        }
    };
    match header.get("metadata") {
        Some(Value::Object(m)) => metadata.extend(m.clone()),
        Some(Value::Null) | None => {}
        Some(other) => {
            metadata.insert("metadata".into(), other.clone());
        }
    }

    let mut first_user: Option<String> = None;
    let loc = |i: usize| {
        if prefix.is_empty() {
            format!("[{i}]")
        } else {
            format!("{prefix}[{i}]")
        }
    };
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
                    .at(loc(i)),
            );
        } else {
            trace.ensure_agent(&agent, infer_kind(&agent, m.role.as_deref()));
        }
        let content = match m.content {
            None => String::new(),
            Some(Content::Text(s)) => s,
            Some(Content::Parts(parts)) => parts
                .into_iter()
                .map(|p| match (p.text, p.kind) {
                    (Some(t), _) => t,
                    (None, Some(k)) => format!("[{k}]"),
                    (None, None) => String::from("[part]"),
                })
                .collect::<Vec<_>>()
                .join("\n"),
        };
        if first_user.is_none() && role.eq_ignore_ascii_case("user") {
            first_user = Some(content.clone());
        }
        let tool_calls = m
            .tool_calls
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
            .collect();
        trace.steps.push(Step {
            index: i,
            agent,
            speaker,
            content,
            tool_calls,
            tool_call_id: m.tool_call_id,
            timestamp: m.timestamp.map(Text::into_string),
            ..Step::default()
        });
    }
    trace.task = explicit_task.or(first_user).unwrap_or_default();
    trace.metadata = metadata;
    Ok((trace, diags))
}
