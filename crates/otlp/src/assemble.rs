//! Spans -> one maslens [`Trace`] per run, for the two conventions agent frameworks emit:
//! the OpenTelemetry GenAI semantic conventions (`gen_ai.*`, including the older flattened
//! `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` attributes and per-message events) and
//! OpenInference (`openinference.span.kind`, `llm.*_messages.N.*`, `input.value` /
//! `output.value`).
//!
//! - **Run**: the spans of one OpenTelemetry trace, merged with other traces that carry the
//!   same `gen_ai.conversation.id` or `session.id` ([`group`]); the trace id is that id, else
//!   the OpenTelemetry trace id.
//! - **Steps**: every model call (GenAI `chat` / `text_completion` / `generate_content`,
//!   OpenInference `LLM`) and every tool execution (`execute_tool`, `TOOL`), ordered by start time
//!   (then end time, then span id), each keeping its span ([`maslens_trace::SpanRef`]). A model
//!   call's step is its output (text, tool calls); a tool's step is its result.
//! - **Agent**: the span's own agent name (`gen_ai.agent.name`, `agent.name`), else that of its
//!   nearest ancestor that has one (an `invoke_agent` / `AGENT` span, or a LangGraph node via
//!   `graph.node.id`), else the service name; tools are agents of kind `tool` named after the tool.
//! - **Task**: the first user message of the earliest model call, else the root span's input.
//! - **Outcome**: `failure` when the root span's status is ERROR, else `unknown`.
//!
//! Repeated spans (same span id) count once; parent cycles end the ancestor walk.

use crate::span::SpanRecord;
use maslens_trace::{AgentKind, Outcome, SpanRef, Step, ToolCall, Trace};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a span is to the trace model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// A model call: one step (the model's output).
    Llm,
    /// A tool execution: one step (the tool's result).
    Tool,
    /// An agent invocation: names the agent of the spans below it.
    Agent,
    /// Anything else (chains, retrievers, HTTP): context only.
    Other,
}

fn str_attr<'a>(a: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    a.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// Classify a span by `gen_ai.operation.name`, else `openinference.span.kind`.
pub fn kind(span: &SpanRecord) -> SpanKind {
    let a = &span.attributes;
    if let Some(op) = str_attr(a, "gen_ai.operation.name") {
        return match op {
            "chat" | "text_completion" | "generate_content" => SpanKind::Llm,
            "execute_tool" => SpanKind::Tool,
            "invoke_agent" | "create_agent" => SpanKind::Agent,
            _ => SpanKind::Other,
        };
    }
    match str_attr(a, "openinference.span.kind").map(str::to_ascii_uppercase) {
        Some(k) if k == "LLM" => SpanKind::Llm,
        Some(k) if k == "TOOL" => SpanKind::Tool,
        Some(k) if k == "AGENT" => SpanKind::Agent,
        Some(_) => SpanKind::Other,
        // Older instrumentations: flattened completions mean a model call.
        None if a.keys().any(|k| k.starts_with("gen_ai.completion.")) => SpanKind::Llm,
        None => SpanKind::Other,
    }
}

/// The LangGraph node a span ran in: OpenInference's LangChain instrumentor puts
/// `{"langgraph_node": ...}` in the `metadata` attribute (a JSON string) of every span of a node,
/// model calls included; a supervisor node is a CHAIN span without any other agent name.
fn langgraph_node(span: &SpanRecord) -> Option<String> {
    let meta = span.attributes.get("metadata")?;
    let parsed;
    let meta = match meta {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).ok()?;
            &parsed
        }
        other => other,
    };
    meta.get("langgraph_node")?
        .as_str()
        .filter(|n| !n.is_empty() && !n.starts_with("__"))
        .map(String::from)
}

/// The agent a span names itself.
fn own_agent(span: &SpanRecord) -> Option<String> {
    let a = &span.attributes;
    if let Some(n) = str_attr(a, "gen_ai.agent.name").or_else(|| str_attr(a, "agent.name")) {
        return Some(n.to_string());
    }
    if let Some(node) = langgraph_node(span) {
        return Some(node);
    }
    if kind(span) == SpanKind::Agent {
        return str_attr(a, "graph.node.name")
            .or_else(|| str_attr(a, "graph.node.id"))
            .map(String::from)
            .or_else(|| {
                // `invoke_agent Planner` / `Planner`: the span name without the operation.
                let name = span
                    .name
                    .strip_prefix("invoke_agent ")
                    .unwrap_or(&span.name);
                (!name.is_empty()).then(|| name.to_string())
            });
    }
    // A LangGraph node (OpenInference CHAIN span with graph.node.id) is the agent of its calls.
    str_attr(a, "graph.node.id")
        .filter(|id| !id.starts_with("__"))
        .map(String::from)
}

/// The group (run) key of one OpenTelemetry trace's spans: the first conversation or session
/// id in start order, else the trace id.
fn run_key(spans: &[&SpanRecord]) -> String {
    let mut sorted: Vec<&&SpanRecord> = spans.iter().collect();
    sorted.sort_by_key(|s| (s.start_ns, &s.span_id));
    sorted
        .iter()
        .find_map(|s| {
            str_attr(&s.attributes, "gen_ai.conversation.id")
                .or_else(|| str_attr(&s.attributes, "session.id"))
        })
        .map(String::from)
        .unwrap_or_else(|| {
            spans
                .first()
                .map(|s| s.trace_id.clone())
                .unwrap_or_default()
        })
}

/// Group spans into runs (see the module docs), one copy per span id; key -> spans.
pub fn group(spans: &[SpanRecord]) -> BTreeMap<String, Vec<&SpanRecord>> {
    let mut seen = HashSet::new();
    let mut by_trace: BTreeMap<&str, Vec<&SpanRecord>> = BTreeMap::new();
    for s in spans {
        if seen.insert((&s.trace_id, &s.span_id)) {
            by_trace.entry(&s.trace_id).or_default().push(s);
        }
    }
    let mut runs: BTreeMap<String, Vec<&SpanRecord>> = BTreeMap::new();
    for (_, spans) in by_trace {
        runs.entry(run_key(&spans)).or_default().extend(spans);
    }
    runs
}

/// A message read from either convention: role, text, tool calls.
#[derive(Debug, Default, Clone, PartialEq)]
struct Message {
    role: String,
    text: String,
    tool_calls: Vec<ToolCall>,
}

fn json_or_string(v: &Value) -> String {
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
            }
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
            let tool_calls = body["tool_calls"]
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
                .collect();
            Message {
                role: body["role"].as_str().unwrap_or(role).to_string(),
                text: match &body {
                    Value::String(s) => s.clone(),
                    b => json_or_string(&b["content"]),
                },
                tool_calls,
            }
        })
        .collect()
}

fn output_messages(span: &SpanRecord) -> Vec<Message> {
    let a = &span.attributes;
    if let Some(v) = a.get("gen_ai.output.messages") {
        return genai_messages(v);
    }
    for prefix in ["llm.output_messages", "gen_ai.completion"] {
        let m = flat_messages(a, prefix);
        if !m.is_empty() {
            return m;
        }
    }
    let m = event_messages(span, true);
    if !m.is_empty() {
        return m;
    }
    str_attr(a, "output.value")
        .or_else(|| str_attr(a, "gen_ai.completion"))
        .map(|t| {
            vec![Message {
                role: "assistant".into(),
                text: t.to_string(),
                ..Message::default()
            }]
        })
        .unwrap_or_default()
}

fn input_messages(span: &SpanRecord) -> Vec<Message> {
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
    event_messages(span, false)
}

fn system_prompt(span: &SpanRecord) -> Option<String> {
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

fn rfc3339(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_nanos(t).to_string()
}

fn u64_attr(a: &Map<String, Value>, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| {
        a.get(*k).and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
    })
}

/// Build the trace of one run (`key` from [`group`]).
pub fn assemble(key: &str, spans: &[&SpanRecord]) -> Trace {
    // Spans by (trace id, span id): span ids are unique only within their OpenTelemetry trace,
    // and a run may merge several traces. A parent is looked up in the span's own trace.
    let by_id: HashMap<(&str, &str), &SpanRecord> = spans
        .iter()
        .map(|s| ((s.trace_id.as_str(), s.span_id.as_str()), *s))
        .collect();
    let parent = |s: &SpanRecord| -> Option<&SpanRecord> {
        let p = s.parent_span_id.as_deref()?;
        by_id.get(&(s.trace_id.as_str(), p)).copied()
    };
    let mut order: Vec<&SpanRecord> = by_id.values().copied().collect();
    order.sort_by(|a, b| {
        (a.start_ns, a.end_ns, &a.span_id, &a.trace_id).cmp(&(
            b.start_ns,
            b.end_ns,
            &b.span_id,
            &b.trace_id,
        ))
    });
    // The nearest agent name at or above a span; a parent cycle ends the walk.
    let agent_of = |s: &SpanRecord| -> Option<String> {
        let mut seen = HashSet::new();
        let mut cur = Some(s);
        while let Some(c) = cur {
            if !seen.insert(c.span_id.as_str()) {
                break;
            }
            if let Some(a) = own_agent(c) {
                return Some(a);
            }
            cur = parent(c);
        }
        None
    };
    let fallback = order
        .iter()
        .find_map(|s| s.service.clone())
        .unwrap_or_else(|| "agent".to_string());
    let mut trace = Trace::new(key);
    trace.source.format = "otlp".into();
    let mut trace_ids: Vec<&str> = order.iter().map(|s| s.trace_id.as_str()).collect();
    trace_ids.sort_unstable();
    trace_ids.dedup();
    trace
        .metadata
        .insert("otel_trace_ids".into(), Value::from(trace_ids));
    if let Some(service) = order.iter().find_map(|s| s.service.as_deref()) {
        trace
            .metadata
            .insert("service".into(), Value::from(service));
        trace.metadata.insert("group".into(), Value::from(service));
    }
    let roots: Vec<&SpanRecord> = order
        .iter()
        .copied()
        .filter(|s| parent(s).is_none())
        .collect();
    if roots.iter().any(|r| r.error.is_some()) {
        trace.outcome = Outcome::Failure;
    }
    // Agent spans above a model call: the call is their step. An agent span with none below it
    // (an instrumentation that traces agents only) is a step itself when it has output.
    let mut covered: HashSet<(&str, &str)> = HashSet::new();
    for s in order.iter().filter(|s| kind(s) == SpanKind::Llm) {
        let mut cur = parent(s);
        while let Some(p) = cur {
            if !covered.insert((p.trace_id.as_str(), p.span_id.as_str())) {
                break;
            }
            cur = parent(p);
        }
    }
    for s in &order {
        let role = match kind(s) {
            SpanKind::Agent
                if !covered.contains(&(s.trace_id.as_str(), s.span_id.as_str()))
                    && !output_messages(s).is_empty() =>
            {
                SpanKind::Llm
            }
            k => k,
        };
        match role {
            SpanKind::Llm => {
                let agent = agent_of(s).unwrap_or_else(|| fallback.clone());
                trace.ensure_agent(&agent, AgentKind::Worker);
                if trace.task.is_empty() {
                    if let Some(m) = input_messages(s).into_iter().find(|m| m.role == "user") {
                        trace.task = m.text;
                    }
                }
                note_system_prompt(&mut trace, &agent, s);
                let out = output_messages(s);
                let mut text: Vec<String> = out.iter().map(|m| m.text.clone()).collect();
                text.retain(|t| !t.is_empty());
                if let Some(e) = &s.error {
                    text.push(format!("[error: {e}]"));
                }
                trace.steps.push(Step {
                    index: trace.steps.len(),
                    agent: agent.clone(),
                    speaker: agent,
                    content: text.join("\n"),
                    tool_calls: out.into_iter().flat_map(|m| m.tool_calls).collect(),
                    timestamp: Some(rfc3339(s.start_ns)),
                    tokens: u64_attr(
                        &s.attributes,
                        &["gen_ai.usage.output_tokens", "llm.token_count.completion"],
                    ),
                    span: Some(span_ref(s)),
                    ..Step::default()
                });
            }
            SpanKind::Tool => {
                let a = &s.attributes;
                let tool = str_attr(a, "gen_ai.tool.name")
                    .or_else(|| str_attr(a, "tool.name"))
                    .map(String::from)
                    .unwrap_or_else(|| {
                        s.name
                            .strip_prefix("execute_tool ")
                            .unwrap_or(&s.name)
                            .to_string()
                    });
                trace.ensure_agent(&tool, AgentKind::Tool);
                let mut content = a
                    .get("gen_ai.tool.call.result")
                    .or_else(|| a.get("output.value"))
                    .map(json_or_string)
                    .unwrap_or_default();
                if let Some(e) = &s.error {
                    content.push_str(&format!("\n[error: {e}]"));
                }
                trace.steps.push(Step {
                    index: trace.steps.len(),
                    agent: tool.clone(),
                    speaker: format!("tool:{tool}"),
                    content: content.trim_start().to_string(),
                    tool_call_id: str_attr(a, "gen_ai.tool.call.id")
                        .or_else(|| str_attr(a, "tool.id"))
                        .or_else(|| str_attr(a, "tool_call.id"))
                        .map(String::from),
                    timestamp: Some(rfc3339(s.start_ns)),
                    span: Some(span_ref(s)),
                    ..Step::default()
                });
            }
            SpanKind::Agent => {
                if let Some(name) = own_agent(s) {
                    trace.ensure_agent(&name, AgentKind::Worker);
                    note_system_prompt(&mut trace, &name, s);
                }
            }
            SpanKind::Other => {}
        }
    }
    if trace.task.is_empty() {
        if let Some(r) = roots.first() {
            trace.task = str_attr(&r.attributes, "input.value")
                .map(String::from)
                .or_else(|| {
                    input_messages(r)
                        .into_iter()
                        .find(|m| m.role == "user")
                        .map(|m| m.text)
                })
                .unwrap_or_default();
        }
    }
    trace
}

/// The span's system instructions become the agent's system prompt (the first one seen).
fn note_system_prompt(trace: &mut Trace, agent: &str, s: &SpanRecord) {
    if let Some(p) = system_prompt(s) {
        if let Some(a) = trace.agents.iter_mut().find(|a| a.name == agent) {
            a.system_prompt.get_or_insert(p);
        }
    }
}

fn span_ref(s: &SpanRecord) -> SpanRef {
    SpanRef {
        trace_id: s.trace_id.clone(),
        span_id: s.span_id.clone(),
        parent_span_id: s.parent_span_id.clone(),
    }
}

/// Every run of `spans` as a trace, in key order.
pub fn traces(spans: &[SpanRecord]) -> Vec<Trace> {
    group(spans)
        .into_iter()
        .map(|(key, spans)| assemble(&key, &spans))
        .collect()
}

#[cfg(test)]
mod tests {
    //! Hand-written span fixtures in the shapes the conventions define (not framework output;
    //! the framework runs are in the server's end-to-end tests).
    use super::*;
    use crate::span::SpanEvent;
    use serde_json::json;

    fn span(id: &str, parent: Option<&str>, start: u64, attrs: Value) -> SpanRecord {
        SpanRecord {
            trace_id: "ab".repeat(16),
            span_id: format!("{id:0>16}"),
            parent_span_id: parent.map(|p| format!("{p:0>16}")),
            name: String::new(),
            start_ns: start,
            end_ns: start + 10,
            error: None,
            attributes: attrs.as_object().cloned().unwrap_or_default(),
            events: Vec::new(),
            service: Some("travel-crew".into()),
        }
    }

    /// A GenAI-convention run: an orchestrator that calls a tool, then hands off to a coder.
    fn genai_run() -> Vec<SpanRecord> {
        let out = |parts: Value| {
            Value::String(json!([{"role": "assistant", "parts": parts}]).to_string())
        };
        let mut root = span(
            "1",
            None,
            100,
            json!({
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Orchestrator",
            "gen_ai.conversation.id": "conv-7",
            "gen_ai.system_instructions": "[{\"type\":\"text\",\"content\":\"You route work.\"}]"}),
        );
        root.error = Some("budget exceeded".into());
        vec![
            root,
            span(
                "2",
                Some("1"),
                110,
                json!({
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json!([{"role": "user", "parts": [{"type": "text", "content": "Book a flight to Oslo."}]}]).to_string(),
                "gen_ai.output.messages": out(json!([
                    {"type": "text", "content": "Searching flights."},
                    {"type": "tool_call", "id": "call_1", "name": "search_flights", "arguments": {"to": "OSL"}}])),
                "gen_ai.usage.output_tokens": 12}),
            ),
            span(
                "3",
                Some("1"),
                130,
                json!({
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_flights",
                "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.result": {"flights": 0}}),
            ),
            span(
                "4",
                Some("1"),
                150,
                json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Coder"}),
            ),
            span(
                "5",
                Some("4"),
                160,
                json!({
                "gen_ai.operation.name": "chat",
                "gen_ai.output.messages": out(json!([{"type": "text", "content": "No flights; I will invent one."}]))}),
            ),
        ]
    }

    #[test]
    fn genai_run_becomes_steps_agents_task_and_outcome() {
        let spans = genai_run();
        let ts = traces(&spans);
        assert_eq!(ts.len(), 1);
        let t = &ts[0];
        assert_eq!(t.id, "conv-7");
        assert_eq!(t.task, "Book a flight to Oslo.");
        assert_eq!(t.outcome, Outcome::Failure, "root span status ERROR");
        let steps: Vec<(&str, &str)> = t
            .steps
            .iter()
            .map(|s| (s.agent.as_str(), s.content.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                ("Orchestrator", "Searching flights."),
                ("search_flights", "{\"flights\":0}"),
                ("Coder", "No flights; I will invent one."),
            ]
        );
        let call = &t.steps[0].tool_calls[0];
        assert_eq!(
            (
                call.id.as_deref(),
                call.name.as_str(),
                call.arguments.as_str()
            ),
            (Some("call_1"), "search_flights", "{\"to\":\"OSL\"}")
        );
        assert_eq!(t.steps[0].tokens, Some(12));
        assert_eq!(t.steps[1].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(t.steps[1].speaker, "tool:search_flights");
        assert_eq!(t.agent_kind("search_flights"), AgentKind::Tool);
        assert_eq!(t.acting_agents(), ["Orchestrator", "Coder"]);
        assert_eq!(
            t.agent("Orchestrator")
                .and_then(|a| a.system_prompt.as_deref()),
            Some("You route work.")
        );
        let s = t.steps[2].span.as_ref().unwrap();
        assert_eq!(
            (s.span_id.as_str(), s.parent_span_id.as_deref()),
            ("0000000000000005", Some("0000000000000004"))
        );
        assert_eq!(t.group().as_deref(), Some("travel-crew"));
        assert!(t.steps[0]
            .timestamp
            .as_deref()
            .unwrap()
            .starts_with("1970-01-01T00:00:00.000000110"));
        assert_eq!(
            maslens_trace::validate(t)
                .iter()
                .filter(|d| d.severity == maslens_trace::Severity::Error)
                .count(),
            0
        );
    }

    #[test]
    fn arrival_order_and_repeats_do_not_change_the_trace() {
        let spans = genai_run();
        let once = traces(&spans);
        let mut shuffled: Vec<SpanRecord> = spans.iter().rev().cloned().collect();
        shuffled.extend(spans.iter().cloned());
        assert_eq!(traces(&shuffled), once);
        // A late span of the same conversation in another OpenTelemetry trace joins the run.
        let mut late = span(
            "9",
            None,
            500,
            json!({"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv-7",
            "gen_ai.agent.name": "Coder", "gen_ai.output.messages": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Done.\"}]}]"}),
        );
        late.trace_id = "cd".repeat(16);
        shuffled.push(late);
        let grown = traces(&shuffled);
        assert_eq!(grown.len(), 1);
        assert_eq!(grown[0].steps.len(), 4);
        assert_eq!(grown[0].steps[3].content, "Done.");
        assert_eq!(
            grown[0].metadata["otel_trace_ids"].as_array().map(Vec::len),
            Some(2)
        );
    }

    #[test]
    fn span_ids_are_scoped_by_their_trace() {
        // Two OpenTelemetry traces of one conversation that reuse a span id: both calls are steps,
        // and each finds its own parent.
        let chat = |trace: &str, agent_parent: &str, text: &str, start: u64| {
            let mut agent = span(
                agent_parent,
                None,
                start,
                json!({"gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": text, "gen_ai.conversation.id": "c"}),
            );
            let mut call = span(
                "7",
                Some(agent_parent),
                start + 1,
                json!({"gen_ai.operation.name": "chat",
                "gen_ai.output.messages": format!("[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{text}\"}}]}}]")}),
            );
            agent.trace_id = trace.repeat(16);
            call.trace_id = trace.repeat(16);
            [agent, call]
        };
        let mut spans = chat("aa", "1", "Planner", 10).to_vec();
        spans.extend(chat("bb", "2", "Coder", 20));
        let t = &traces(&spans)[0];
        let steps: Vec<(&str, &str)> = t
            .steps
            .iter()
            .map(|s| (s.agent.as_str(), s.content.as_str()))
            .collect();
        assert_eq!(steps, [("Planner", "Planner"), ("Coder", "Coder")]);
    }

    #[test]
    fn openinference_run_with_langgraph_nodes_and_a_parent_cycle() {
        let spans = vec![
            span(
                "a",
                None,
                10,
                json!({"openinference.span.kind": "CHAIN", "input.value": "Summarise the report.", "session.id": "s-1"}),
            ),
            span(
                "b",
                Some("a"),
                20,
                json!({"openinference.span.kind": "CHAIN", "graph.node.id": "researcher"}),
            ),
            span(
                "c",
                Some("b"),
                30,
                json!({
                "openinference.span.kind": "LLM",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "Calling the reader.",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "t1",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "read_pdf",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{\"path\":\"r.pdf\"}",
                "llm.token_count.completion": "7"}),
            ),
            span(
                "d",
                Some("b"),
                40,
                json!({"openinference.span.kind": "TOOL", "tool.name": "read_pdf", "output.value": "404"}),
            ),
            span(
                "e",
                Some("f"),
                50,
                json!({"openinference.span.kind": "AGENT", "agent.name": "writer"}),
            ),
            span(
                "f",
                Some("e"),
                55,
                json!({"openinference.span.kind": "LLM", "output.value": "The report says nothing."}),
            ),
        ];
        let t = &traces(&spans)[0];
        assert_eq!(t.id, "s-1");
        assert_eq!(t.task, "Summarise the report.");
        let steps: Vec<(&str, &str)> = t
            .steps
            .iter()
            .map(|s| (s.agent.as_str(), s.content.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                ("researcher", "Calling the reader."),
                ("read_pdf", "404"),
                ("writer", "The report says nothing."),
            ]
        );
        assert_eq!(t.steps[0].tool_calls[0].arguments, "{\"path\":\"r.pdf\"}");
        assert_eq!(t.steps[0].tokens, Some(7));
        assert_eq!(t.outcome, Outcome::Unknown);
    }

    #[test]
    fn older_flattened_attributes_events_and_agent_only_spans() {
        let mut ev = span("2", Some("1"), 20, json!({"gen_ai.system": "openai"}));
        ev.events.push(SpanEvent {
            name: "gen_ai.choice".into(),
            time_ns: 25,
            attributes:
                json!({"message": "{\"role\":\"assistant\",\"content\":\"From an event.\"}"})
                    .as_object()
                    .cloned()
                    .unwrap(),
        });
        ev.attributes
            .insert("gen_ai.operation.name".into(), json!("chat"));
        let spans = vec![
            span(
                "1",
                None,
                10,
                json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Solver"}),
            ),
            ev,
            span(
                "3",
                Some("1"),
                30,
                json!({
                "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "2+2?",
                "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "5"}),
            ),
            span(
                "4",
                None,
                40,
                json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Checker",
                "gen_ai.output.messages": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Wrong: 4.\"}]}]"}),
            ),
        ];
        let t = &traces(&spans)[0];
        let steps: Vec<(&str, &str)> = t
            .steps
            .iter()
            .map(|s| (s.agent.as_str(), s.content.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                ("Solver", "From an event."),
                ("Solver", "5"),
                ("Checker", "Wrong: 4.")
            ]
        );
        assert_eq!(t.task, "2+2?");
    }
}
