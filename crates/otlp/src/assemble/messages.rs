//! Messages and errors read from a span's attributes and events, in either convention
//! (GenAI structured or flattened messages, per-message events; OpenInference flattened
//! messages, `input.value` / `output.value`) or as LlamaIndex's own exporter records them
//! (`llama-index-observability-otel`: its instrumentation events as span events).

use super::str_attr;
use crate::span::SpanRecord;
use maslens_trace::ToolCall;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// A message read from either convention: role, text, tool calls.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Message {
    pub(super) role: String,
    pub(super) text: String,
    pub(super) tool_calls: Vec<ToolCall>,
    /// The call a `tool`-role message answers, when the message says.
    pub(super) tool_call_id: Option<String>,
}

impl Message {
    /// Whether the message instructs the model: the `system` role, or `developer`, which OpenAI's
    /// newer API uses in its place (AutoGen AgentChat 0.7 sends its agents' system messages so).
    pub(super) fn is_instructions(&self) -> bool {
        self.role == "system" || self.role == "developer"
    }
}

pub(super) fn json_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// GenAI `gen_ai.input.messages` / `gen_ai.output.messages`: a JSON string or a structured
/// array of `{role, parts: [{type, content | id, name, arguments | response | result}]}`.
fn genai_messages(v: &Value) -> Vec<Message> {
    let parsed;
    let v = match v {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(x) => {
                parsed = x;
                &parsed
            }
            Err(_) => {
                return vec![Message {
                    text: s.clone(),
                    ..Message::default()
                }]
            }
        },
        v => v,
    };
    let Some(items) = v.as_array() else {
        return Vec::new();
    };
    items
        .iter()
        .map(|m| {
            let mut msg = Message {
                role: m["role"].as_str().unwrap_or_default().to_string(),
                ..Message::default()
            };
            let mut texts = Vec::new();
            if let Some(c) = m.get("content").filter(|c| !c.is_null()) {
                texts.push(json_or_string(c));
            }
            for p in m["parts"].as_array().into_iter().flatten() {
                match p["type"].as_str().unwrap_or_default() {
                    "tool_call" => msg.tool_calls.push(ToolCall {
                        id: p["id"].as_str().map(String::from),
                        name: p["name"].as_str().unwrap_or_default().to_string(),
                        arguments: json_or_string(&p["arguments"]),
                    }),
                    "tool_call_response" => {
                        let r = p.get("response").or_else(|| p.get("result"));
                        texts.push(r.map(json_or_string).unwrap_or_default());
                    }
                    _ => {
                        if let Some(c) = p.get("content").filter(|c| !c.is_null()) {
                            texts.push(json_or_string(c));
                        }
                    }
                }
            }
            msg.text = texts.join("\n");
            msg
        })
        .collect()
}

/// Flattened messages under `prefix` (`llm.output_messages`, `gen_ai.completion`, ...): the
/// numbered entries `prefix.N.<field>` in order, reading role / content / tool calls from either
/// OpenInference (`message.role`, `message.content`, `message.contents.K.message_content.text`,
/// `message.tool_calls.J.tool_call.{id,function.name,function.arguments}`) or OpenLLMetry
/// (`role`, `content`, `tool_calls.J.{id,name,arguments}`) names.
fn flat_messages(a: &Map<String, Value>, prefix: &str) -> Vec<Message> {
    let mut by_index: BTreeMap<usize, Map<String, Value>> = BTreeMap::new();
    let head = format!("{prefix}.");
    for (k, v) in a {
        let Some(rest) = k.strip_prefix(&head) else {
            continue;
        };
        let Some((n, field)) = rest.split_once('.') else {
            continue;
        };
        if let Ok(n) = n.parse::<usize>() {
            let field = field.strip_prefix("message.").unwrap_or(field);
            by_index
                .entry(n)
                .or_default()
                .insert(field.to_string(), v.clone());
        }
    }
    by_index
        .into_values()
        .map(|f| {
            let s = |k: &str| f.get(k).map(json_or_string).unwrap_or_default();
            let mut texts = vec![s("content")];
            let mut contents: BTreeMap<usize, String> = BTreeMap::new();
            let mut calls: BTreeMap<usize, ToolCall> = BTreeMap::new();
            for (k, v) in &f {
                if let Some(rest) = k.strip_prefix("contents.") {
                    if let Some((n, "message_content.text")) = rest.split_once('.') {
                        if let Ok(n) = n.parse() {
                            contents.insert(n, json_or_string(v));
                        }
                    }
                } else if let Some(rest) = k.strip_prefix("tool_calls.") {
                    let Some((n, field)) = rest.split_once('.') else {
                        continue;
                    };
                    let Ok(n) = n.parse() else { continue };
                    let call = calls.entry(n).or_insert_with(|| ToolCall {
                        id: None,
                        name: String::new(),
                        arguments: String::new(),
                    });
                    let field = field.strip_prefix("tool_call.").unwrap_or(field);
                    match field {
                        "id" => call.id = Some(json_or_string(v)),
                        "function.name" | "name" => call.name = json_or_string(v),
                        "function.arguments" | "arguments" => call.arguments = json_or_string(v),
                        _ => {}
                    }
                }
            }
            texts.extend(contents.into_values());
            texts.retain(|t| !t.is_empty());
            Message {
                role: s("role"),
                text: texts.join("\n"),
                tool_calls: calls.into_values().collect(),
                ..Message::default()
            }
        })
        .collect()
}

/// An answer recorded as plain text: one assistant message.
fn assistant_text(text: &str) -> Vec<Message> {
    vec![Message {
        role: "assistant".into(),
        text: text.to_string(),
        ..Message::default()
    }]
}

/// Tool calls in OpenAI's shape: `[{id, function: {name, arguments}}]` (none when not a list).
fn openai_tool_calls(calls: &Value) -> Vec<ToolCall> {
    calls
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ToolCall {
            id: c["id"].as_str().map(String::from),
            name: c["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            arguments: json_or_string(&c["function"]["arguments"]),
        })
        .collect()
}

/// Messages from the older per-message span events (`gen_ai.choice`, `gen_ai.user.message`, ...).
fn event_messages(span: &SpanRecord, output: bool) -> Vec<Message> {
    span.events
        .iter()
        .filter(|e| {
            let is_choice = e.name == "gen_ai.choice";
            e.name.starts_with("gen_ai.") && is_choice == output
        })
        .map(|e| {
            let a = &e.attributes;
            let body = a
                .get("message")
                .cloned()
                .unwrap_or(Value::Object(a.clone()));
            let body = match body {
                Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                v => v,
            };
            let role = e
                .name
                .strip_prefix("gen_ai.")
                .and_then(|r| r.strip_suffix(".message"))
                .unwrap_or("assistant");
            let tool_calls = openai_tool_calls(&body["tool_calls"]);
            Message {
                role: body["role"].as_str().unwrap_or(role).to_string(),
                text: match &body {
                    Value::String(s) => s.clone(),
                    b => json_or_string(&b["content"]),
                },
                tool_calls,
                ..Message::default()
            }
        })
        .collect()
}

/// The output messages a span records as messages (GenAI, flattened or events), not as a
/// plain `output.value`.
fn structured_output(span: &SpanRecord) -> Vec<Message> {
    let a = &span.attributes;
    if let Some(v) = a.get("gen_ai.output.messages") {
        return genai_messages(v);
    }
    for prefix in ["llm.output_messages", "gen_ai.completion"] {
        let mut m = flat_messages(a, prefix);
        if !m.is_empty() {
            fill_tool_arguments(span, &mut m);
            return m;
        }
    }
    let m = event_messages(span, true);
    if !m.is_empty() {
        return m;
    }
    llamaindex_output(span)
}

pub(super) fn output_messages(span: &SpanRecord) -> Vec<Message> {
    let m = structured_output(span);
    if !m.is_empty() {
        return m;
    }
    let a = &span.attributes;
    str_attr(a, "output.value")
        .or_else(|| str_attr(a, "gen_ai.completion"))
        .map(assistant_text)
        .unwrap_or_default()
}

/// Tool calls recorded without arguments (OpenInference's openai-agents instrumentor drops
/// `function.arguments` from `llm.output_messages`) take them from the same call in the span's
/// `output.value`, the provider's JSON (`[{"tool_calls": [{"id", "function": {"arguments"}}]}]`).
fn fill_tool_arguments(span: &SpanRecord, messages: &mut [Message]) {
    let missing = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .any(|c| c.arguments.is_empty() && c.id.is_some());
    if !missing {
        return;
    }
    let Some(Ok(out)) =
        str_attr(&span.attributes, "output.value").map(serde_json::from_str::<Value>)
    else {
        return;
    };
    let items: Vec<&Value> = match &out {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let args: HashMap<&str, String> = items
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .filter_map(|c| {
            Some((
                c["id"].as_str()?,
                json_or_string(&c["function"]["arguments"]),
            ))
        })
        .collect();
    for call in messages.iter_mut().flat_map(|m| &mut m.tool_calls) {
        if call.arguments.is_empty() {
            if let Some(a) = call.id.as_deref().and_then(|id| args.get(id)) {
                call.arguments.clone_from(a);
            }
        }
    }
}

/// Whether a span records its messages (input or output) as messages.
pub(super) fn has_messages(span: &SpanRecord) -> bool {
    !structured_output(span).is_empty() || !input_messages(span).is_empty()
}

/// A span's error: its ERROR status message, else its `exception` events
/// (`exception.type: exception.message`).
pub(super) fn span_error(span: &SpanRecord) -> Option<String> {
    // A status with no description is recorded as "error" (span.rs): the exception events, when
    // there are any, say more (pydantic-ai's `ToolRetryError: the archive is offline`).
    if let Some(status) = span.error.as_ref().filter(|m| m.as_str() != "error") {
        return Some(status.clone());
    }
    let events: Vec<String> = span
        .events
        .iter()
        .filter(|e| e.name == "exception")
        .map(|e| {
            let a = &e.attributes;
            match (
                str_attr(a, "exception.type"),
                str_attr(a, "exception.message"),
            ) {
                (Some(t), Some(m)) => format!("{t}: {m}"),
                (t, m) => t.or(m).unwrap_or("exception").to_string(),
            }
        })
        .collect();
    if events.is_empty() {
        return span.error.clone();
    }
    Some(events.join("; "))
}

pub(super) fn input_messages(span: &SpanRecord) -> Vec<Message> {
    let a = &span.attributes;
    if let Some(v) = a.get("gen_ai.input.messages") {
        return genai_messages(v);
    }
    for prefix in ["llm.input_messages", "gen_ai.prompt"] {
        let m = flat_messages(a, prefix);
        if !m.is_empty() {
            return m;
        }
    }
    let m = event_messages(span, false);
    if !m.is_empty() {
        return m;
    }
    llamaindex_event(span, &["LLMChatStartEvent", "LLMChatEndEvent"])
        .and_then(|a| a.get("messages"))
        .map(llamaindex_messages)
        .unwrap_or_default()
}

pub(super) fn system_prompt(span: &SpanRecord) -> Option<String> {
    let v = span.attributes.get("gen_ai.system_instructions")?;
    // A JSON string of `[{type, content}]` parts, the structured array itself, or plain text.
    let parsed = match v {
        Value::String(s) => serde_json::from_str::<Value>(s).unwrap_or_else(|_| v.clone()),
        v => v.clone(),
    };
    let text = match &parsed {
        Value::Array(parts) => parts
            .iter()
            .map(|p| json_or_string(&p["content"]))
            .collect::<Vec<_>>()
            .join("\n"),
        other => json_or_string(other),
    };
    (!text.is_empty()).then_some(text)
}

/// LlamaIndex's instrumentation events that mark a model call (its own exporter,
/// `llama-index-observability-otel`, attaches them to the span of the call as span events).
pub(super) const LLAMAINDEX_LLM_EVENTS: &[&str] = &[
    "LLMChatStartEvent",
    "LLMChatEndEvent",
    "LLMCompletionStartEvent",
    "LLMCompletionEndEvent",
];

/// The attributes of the first of `names` among a span's events.
pub(super) fn llamaindex_event<'a>(
    span: &'a SpanRecord,
    names: &[&str],
) -> Option<&'a Map<String, Value>> {
    names
        .iter()
        .find_map(|n| span.events.iter().find(|e| e.name == *n))
        .map(|e| &e.attributes)
}

/// A value that LlamaIndex's exporter JSON-encoded (lists of objects) or kept as is.
pub(super) fn decoded(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        v => v.clone(),
    }
}

/// One LlamaIndex `ChatMessage` as dumped by pydantic: `{role, content?, blocks: [{block_type:
/// "text", text} | {block_type: "tool_call", tool_call_id, tool_name, tool_kwargs}],
/// additional_kwargs: {tool_calls: [{id, function: {name, arguments}}], tool_call_id}}`.
fn llamaindex_message(role: &str, blocks: &Value, kwargs: &Value, content: &Value) -> Message {
    let mut texts = Vec::new();
    if let Some(c) = content.as_str().filter(|c| !c.is_empty()) {
        texts.push(c.to_string());
    }
    let mut tool_calls = openai_tool_calls(&decoded(&kwargs["tool_calls"]));
    let from_kwargs = !tool_calls.is_empty();
    for b in decoded(blocks).as_array().into_iter().flatten() {
        match b["block_type"].as_str().unwrap_or_default() {
            "text" => {
                if let Some(t) = b["text"].as_str().filter(|t| !t.is_empty()) {
                    texts.push(t.to_string());
                }
            }
            "tool_call" if !from_kwargs => tool_calls.push(ToolCall {
                id: b["tool_call_id"].as_str().map(String::from),
                name: b["tool_name"].as_str().unwrap_or_default().to_string(),
                arguments: json_or_string(&b["tool_kwargs"]),
            }),
            _ => {}
        }
    }
    Message {
        role: role.to_string(),
        text: texts.join("\n"),
        tool_calls,
        tool_call_id: kwargs["tool_call_id"].as_str().map(String::from),
    }
}

/// The `messages` of a LlamaIndex chat event: a JSON list of `ChatMessage`s.
fn llamaindex_messages(v: &Value) -> Vec<Message> {
    decoded(v)
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            llamaindex_message(
                m["role"].as_str().unwrap_or_default(),
                &m["blocks"],
                &m["additional_kwargs"],
                &m["content"],
            )
        })
        .collect()
}

/// A LlamaIndex model call's output: the `response.*` of its `LLMChatEndEvent` (flattened:
/// `response.message.role`, `response.message.blocks`,
/// `response.message.additional_kwargs.tool_calls`) or `LLMCompletionEndEvent`
/// (`response.text`). A streamed call has none: the exporter drops the end event, which comes
/// after the call's span has closed.
fn llamaindex_output(span: &SpanRecord) -> Vec<Message> {
    if let Some(a) = llamaindex_event(span, &["LLMChatEndEvent"]) {
        let get = |k: &str| a.get(k).cloned().unwrap_or(Value::Null);
        let kwargs = serde_json::json!({
            "tool_calls": get("response.message.additional_kwargs.tool_calls"),
        });
        let m = llamaindex_message(
            str_attr(a, "response.message.role").unwrap_or("assistant"),
            &get("response.message.blocks"),
            &kwargs,
            &get("response.message.content"),
        );
        return if m.text.is_empty() && m.tool_calls.is_empty() {
            Vec::new()
        } else {
            vec![m]
        };
    }
    llamaindex_event(span, &["LLMCompletionEndEvent"])
        .and_then(|a| str_attr(a, "response.text"))
        .map(assistant_text)
        .unwrap_or_default()
}
