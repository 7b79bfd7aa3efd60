//! Spans -> one maslens [`Trace`] per run, for the two conventions agent frameworks emit:
//! the OpenTelemetry GenAI semantic conventions (`gen_ai.*`, including the older flattened
//! `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` attributes and per-message events) and
//! OpenInference (`openinference.span.kind`, `llm.*_messages.N.*`, `input.value` /
//! `output.value`).
//!
//! - **Run**: the spans of one OpenTelemetry trace, merged with other traces that carry the
//!   same `gen_ai.conversation.id` or `session.id` ([`group`]); the trace id is the root
//!   conversation id a span declares (`pydantic_ai.root_conversation_id`), else a root span's
//!   conversation / session id, else the first one, else the OpenTelemetry trace id.
//! - **Steps**: one per model call (GenAI `chat` / `text_completion` / `generate_content`,
//!   OpenInference `LLM`; an LLM span wrapping or beside the one that records the call's
//!   messages is not a step) and one per tool execution (`execute_tool`, `TOOL`), ordered by
//!   start time (then end time, then span id; a tool span that contains other steps, an agent
//!   run as a tool, at its end), each keeping its span ([`maslens_trace::SpanRef`]). A model
//!   call's step is its output (text, tool calls); a tool's step is its result.
//! - **Agent**: the span's own agent name (`gen_ai.agent.name`, `agent.name`, a LangGraph node,
//!   LlamaIndex's `current_agent_name`), else that of its nearest ancestor that has one (an
//!   `invoke_agent` / `AGENT` span, named by its span name without `invoke_agent ` or a method
//!   suffix such as `.run` when the instrumentor names no agent; nameless roots, group managers
//!   and workflow containers are never agents), else the span's own service name; tools are
//!   agents of kind `tool` named after the tool. System prompts: `gen_ai.system_instructions`,
//!   else the first `system`-role input message.
//! - **Task**: the first user message of the earliest model call, else the root span's input.
//! - **Outcome**: `failure` when the root span or an agent span has status ERROR, else
//!   `unknown`. The error of any other span that is not a step (ERROR status or `exception`
//!   events: a CHAIN, an agent) is appended to the last step under it.
//! - **Warnings**: the run-level warnings (module `warnings`) in `metadata.otel_warnings`.
//!
//! Lookups up the parent chain are memoized per run (module `tree`): assembly is linear in
//! the spans however deep the chain.
//! Repeated spans (same span id) count once; parent cycles end the ancestor walk.

use crate::span::SpanRecord;
use crate::tree::Tree;
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

/// The agent a span names by attribute (never by its span name): `gen_ai.agent.name` /
/// `agent.name`, a LangGraph node, LlamaIndex's current agent, or `graph.node.*`.
fn attr_agent(span: &SpanRecord) -> Option<String> {
    let a = &span.attributes;
    if let Some(n) = str_attr(a, "gen_ai.agent.name").or_else(|| str_attr(a, "agent.name")) {
        return Some(n.to_string());
    }
    if let Some(node) = langgraph_node(span).or_else(|| llamaindex_agent(span)) {
        return Some(node);
    }
    if kind(span) == SpanKind::Agent {
        return str_attr(a, "graph.node.name")
            .or_else(|| str_attr(a, "graph.node.id"))
            .map(String::from);
    }
    // A LangGraph node (OpenInference CHAIN span with graph.node.id) is the agent of its calls.
    str_attr(a, "graph.node.id")
        .filter(|id| !id.starts_with("__"))
        .map(String::from)
}

/// LlamaIndex AgentWorkflow: the agent of a workflow step is only in the step's input
/// (`AgentWorkflow.run_agent_step` / `setup_agent` / `parse_agent_output`, whose input repr
/// holds `current_agent_name='triage'`); the model calls of that agent run under it.
fn llamaindex_agent(span: &SpanRecord) -> Option<String> {
    let method = span.name.rsplit('.').next()?;
    if !["run_agent_step", "setup_agent", "parse_agent_output"].contains(&method) {
        return None;
    }
    let input = str_attr(&span.attributes, "input.value")?;
    let name = input
        .split("current_agent_name='")
        .nth(1)?
        .split('\'')
        .next()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// Method names an instrumentor appends to an agent's name in its AGENT span's name
/// (smolagents `researcher.run`).
const METHOD_SUFFIXES: &[&str] = &[
    "run",
    "arun",
    "run_stream",
    "invoke",
    "ainvoke",
    "stream",
    "astream",
    "__call__",
    "call",
    "acall",
    "execute",
    "kickoff",
];

/// Span names of workflow containers and group managers: never agents.
const CONTAINER_NAMES: &[&str] = &[
    "agent workflow",
    "chat_manager",
    "invoke_agent",
    "invoke_workflow",
    "workflow",
];

/// An AGENT span's name as an agent name: without `invoke_agent ` and a method suffix; `None`
/// for a container name.
fn span_name_agent(span: &SpanRecord) -> Option<String> {
    let name = span
        .name
        .strip_prefix("invoke_agent ")
        .unwrap_or(&span.name);
    let name = match name.rsplit_once('.') {
        Some((head, m)) if !head.is_empty() && METHOD_SUFFIXES.contains(&m) => head,
        _ => name,
    }
    .trim();
    let container = CONTAINER_NAMES.contains(&name.to_ascii_lowercase().as_str());
    (!name.is_empty() && !container).then(|| name.to_string())
}

/// The agent a span names itself. An AGENT span without a name attribute is named by its
/// span name only when no AGENT span of the run has a name attribute (`named_run` false):
/// where the instrumentor names agents, a nameless AGENT span (OpenAI Agents SDK's root
/// "Agent workflow") is a container.
fn own_agent(span: &SpanRecord, named_run: bool) -> Option<String> {
    let is_agent = kind(span) == SpanKind::Agent;
    match attr_agent(span) {
        // A group manager's agent span (AG2's `invoke_agent chat_manager`) is a container.
        Some(name) if is_agent && CONTAINER_NAMES.contains(&name.to_ascii_lowercase().as_str()) => {
            None
        }
        Some(name) => Some(name),
        None => (is_agent && !named_run)
            .then(|| span_name_agent(span))
            .flatten(),
    }
}

/// The group (run) key of one OpenTelemetry trace's spans: the root conversation id a span
/// declares (`pydantic_ai.root_conversation_id`, so that a nested agent's spans join their
/// run whichever arrive first), else the conversation or session id of a root span, else the
/// first one in start order, else the trace id.
fn run_key(spans: &[&SpanRecord]) -> String {
    let mut sorted: Vec<&&SpanRecord> = spans.iter().collect();
    sorted.sort_by_key(|s| (s.parent_span_id.is_some(), s.start_ns, &s.span_id));
    let declared = sorted
        .iter()
        .filter_map(|s| str_attr(&s.attributes, "pydantic_ai.root_conversation_id"))
        .next();
    declared
        .or_else(|| {
            sorted.iter().find_map(|s| {
                str_attr(&s.attributes, "gen_ai.conversation.id")
                    .or_else(|| str_attr(&s.attributes, "session.id"))
            })
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
    event_messages(span, true)
}

fn output_messages(span: &SpanRecord) -> Vec<Message> {
    let m = structured_output(span);
    if !m.is_empty() {
        return m;
    }
    let a = &span.attributes;
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
fn has_messages(span: &SpanRecord) -> bool {
    !structured_output(span).is_empty() || !input_messages(span).is_empty()
}

/// A span's error: its ERROR status message, else its `exception` events
/// (`exception.type: exception.message`).
fn span_error(span: &SpanRecord) -> Option<String> {
    if span.error.is_some() {
        return span.error.clone();
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
    (!events.is_empty()).then(|| events.join("; "))
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

/// Nearest-above span indexes without a span's own (which a parent cycle can give).
fn not_self(above: Vec<Option<usize>>) -> Vec<Option<usize>> {
    above
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.filter(|&a| a != i))
        .collect()
}

/// Whether two spans may belong to one agent's call: not when both name an agent and the
/// names differ.
fn same_agent(a: &SpanRecord, b: &SpanRecord) -> bool {
    match (attr_agent(a), attr_agent(b)) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// Which spans are steps, and as what: a model call (`Llm`) or a tool execution (`Tool`).
///
/// One step per model call: an LLM span directly wrapping another LLM span that records messages
/// (or wrapping any while recording none itself) is not a step (LlamaIndex's outer `astream_chat`);
/// an LLM span without messages beside or under one with them is not a step (LlamaIndex's
/// `_prepare_chat_with_tools`). An agent span with no model call or tool execution below it (an
/// instrumentation that traces agents only) is a model step when it has output; with a tool below
/// (AG2's tool executor `invoke_agent user` > `execute_tool`), the tool's result is the one step.
fn step_roles(tree: &Tree, kinds: &[SpanKind]) -> Vec<Option<SpanKind>> {
    let n = tree.len();
    // The LLM span directly above, when it is the same call (a wrapper is the call's parent
    // span, as LlamaIndex's outer `astream_chat` or AutoGen's client span above the openai
    // SDK's). Spans naming two different agents are two calls, never a wrapper and its call.
    let llm_above: Vec<Option<usize>> = not_self(
        (0..n)
            .map(|i| {
                tree.parent[i].filter(|&p| {
                    kinds[p] == SpanKind::Llm && same_agent(tree.spans[p], tree.spans[i])
                })
            })
            .collect(),
    );
    let has_msgs: Vec<bool> = (0..n)
        .map(|i| kinds[i] == SpanKind::Llm && has_messages(tree.spans[i]))
        .collect();
    let (mut llm_below, mut msgs_below, mut msg_group, mut covered) = (
        vec![false; n],
        vec![false; n],
        vec![false; n],
        vec![false; n],
    );
    for i in (0..n).filter(|&i| matches!(kinds[i], SpanKind::Llm | SpanKind::Tool)) {
        if let Some(a) = llm_above[i].filter(|_| kinds[i] == SpanKind::Llm) {
            llm_below[a] = true;
        }
        // Each span is marked once: linear however deep.
        let mut up = if has_msgs[i] { llm_above[i] } else { None };
        while let Some(a) = up.filter(|&a| !msgs_below[a]) {
            msgs_below[a] = true;
            up = llm_above[a];
        }
        let mut up = tree.parent[i];
        while let Some(p) = up.filter(|&p| !covered[p]) {
            covered[p] = true;
            up = tree.parent[p];
        }
    }
    for i in (0..n).filter(|&i| has_msgs[i] || msgs_below[i]) {
        if let Some(p) = tree.parent[i] {
            msg_group[p] = true;
        }
    }
    (0..n)
        .map(|i| match kinds[i] {
            SpanKind::Llm => {
                let wrapper = llm_below[i] && (msgs_below[i] || !has_msgs[i]);
                let beside = tree.parent[i].is_some_and(|p| msg_group[p])
                    || llm_above[i].is_some_and(|a| has_msgs[a]);
                let bare = !has_msgs[i] && beside;
                (!wrapper && !bare).then_some(SpanKind::Llm)
            }
            SpanKind::Tool => Some(SpanKind::Tool),
            SpanKind::Agent if !covered[i] && !output_messages(tree.spans[i]).is_empty() => {
                Some(SpanKind::Llm)
            }
            _ => None,
        })
        .collect()
}

/// Step spans in step order: start time, except that a tool span containing other steps
/// (an agent run as a tool: pydantic-ai's `execute_tool ask_researcher`) is placed at its end,
/// after the work it returns.
fn step_order(tree: &Tree, roles: &[Option<SpanKind>]) -> Vec<usize> {
    let n = tree.len();
    let tools: Vec<Option<usize>> = (0..n)
        .map(|i| (roles[i] == Some(SpanKind::Tool)).then_some(i))
        .collect();
    let tool_above = not_self(tree.nearest_above(&tools));
    let mut holds_work = vec![false; n];
    for i in (0..n).filter(|&i| roles[i].is_some()) {
        if let Some(t) = tool_above[i] {
            holds_work[t] = true;
        }
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| roles[i].is_some()).collect();
    order.sort_by_key(|&i| {
        let s = tree.spans[i];
        (if holds_work[i] { s.end_ns } else { s.start_ns }, i)
    });
    order
}

/// Errors of spans that are not steps (an AGENT, CHAIN or workflow span: ERROR status or
/// `exception` events), each on the last step under it; a root's error is the run's outcome.
/// Step span -> the errors it shows, outermost first.
fn inherited_errors(
    tree: &Tree,
    roles: &[Option<SpanKind>],
    order: &[usize],
) -> HashMap<usize, Vec<String>> {
    let n = tree.len();
    let errors: Vec<Option<String>> = tree.spans.iter().map(|s| span_error(s)).collect();
    let own: Vec<Option<usize>> = (0..n)
        .map(|i| {
            let counted = roles[i].is_none() && tree.parent[i].is_some() && errors[i].is_some();
            counted.then_some(i)
        })
        .collect();
    let above = tree.nearest_above(&own);
    let mut last: HashMap<usize, usize> = HashMap::new();
    for &step in order {
        let mut up = above[step];
        let mut hops = 0;
        while let Some(e) = up.filter(|_| hops < n) {
            last.insert(e, step);
            up = above[e];
            hops += 1;
        }
    }
    let mut by_span: Vec<(usize, usize)> = last.into_iter().collect();
    by_span.sort_unstable();
    let mut out: HashMap<usize, Vec<String>> = HashMap::new();
    for (e, step) in by_span {
        if let Some(msg) = &errors[e] {
            out.entry(step).or_default().push(msg.clone());
        }
    }
    out
}

/// Build the trace of one run (`key` from [`group`]).
pub fn assemble(key: &str, spans: &[&SpanRecord]) -> Trace {
    // Spans by (trace id, span id): span ids are unique only within their OpenTelemetry trace,
    // and a run may merge several traces. A parent is looked up in the span's own trace.
    let tree = Tree::new(spans);
    let kinds: Vec<SpanKind> = tree.spans.iter().map(|s| kind(s)).collect();
    let named_run = tree
        .spans
        .iter()
        .zip(&kinds)
        .any(|(s, k)| *k == SpanKind::Agent && attr_agent(s).is_some());
    let own: Vec<Option<String>> = tree.spans.iter().map(|s| own_agent(s, named_run)).collect();
    let agent_at = tree.nearest(&own);
    let roles = step_roles(&tree, &kinds);
    let order = step_order(&tree, &roles);
    let errors = inherited_errors(&tree, &roles, &order);

    let mut trace = Trace::new(key);
    trace.source.format = "otlp".into();
    let mut trace_ids: Vec<&str> = tree.spans.iter().map(|s| s.trace_id.as_str()).collect();
    trace_ids.sort_unstable();
    trace_ids.dedup();
    trace
        .metadata
        .insert("otel_trace_ids".into(), Value::from(trace_ids));
    let service = tree.spans.iter().find_map(|s| s.service.as_deref());
    if let Some(service) = service {
        trace
            .metadata
            .insert("service".into(), Value::from(service));
        trace.metadata.insert("group".into(), Value::from(service));
    }
    let failed = (0..tree.len()).any(|i| {
        let s = tree.spans[i];
        (tree.parent[i].is_none() && s.error.is_some())
            || (kinds[i] == SpanKind::Agent && s.error.is_some())
    });
    if failed {
        trace.outcome = Outcome::Failure;
    }
    // Agents and the task in start order (as the spans began), steps in step order.
    let mut from_service = 0;
    let mut agent_of: HashMap<usize, String> = HashMap::new();
    for i in 0..tree.len() {
        let s = tree.spans[i];
        match roles[i] {
            Some(SpanKind::Llm) => {
                let agent = agent_at[i].clone().unwrap_or_else(|| {
                    from_service += 1;
                    s.service
                        .as_deref()
                        .or(service)
                        .unwrap_or("agent")
                        .to_string()
                });
                trace.ensure_agent(&agent, AgentKind::Worker);
                if trace.task.is_empty() {
                    if let Some(m) = input_messages(s).into_iter().find(|m| m.role == "user") {
                        trace.task = m.text;
                    }
                }
                note_system_prompt(&mut trace, &agent, s);
                agent_of.insert(i, agent);
            }
            Some(_) => {
                let tool = tool_name(s);
                trace.ensure_agent(&tool, AgentKind::Tool);
                agent_of.insert(i, tool);
            }
            None if kinds[i] == SpanKind::Agent => {
                if let Some(name) = &own[i] {
                    trace.ensure_agent(name, AgentKind::Worker);
                    note_system_prompt(&mut trace, name, s);
                }
            }
            None => {}
        }
    }
    for &i in &order {
        let s = tree.spans[i];
        let agent = agent_of.remove(&i).unwrap_or_default();
        let mut step = match roles[i] {
            Some(SpanKind::Llm) => model_step(s, agent),
            _ => tool_step(s, agent),
        };
        for e in errors.get(&i).into_iter().flatten() {
            if !step.content.is_empty() {
                step.content.push('\n');
            }
            step.content.push_str(&format!("[error: {e}]"));
        }
        step.index = trace.steps.len();
        trace.steps.push(step);
    }
    if trace.task.is_empty() {
        if let Some(r) = (0..tree.len()).find(|&i| tree.parent[i].is_none()) {
            let r = tree.spans[r];
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
    let warnings = crate::warnings::run_warnings(&trace, tree.len(), from_service, service);
    if !warnings.is_empty() {
        trace
            .metadata
            .insert("otel_warnings".into(), Value::Array(warnings));
    }
    trace
}

/// A model call's step: its output (text and tool calls), its error.
fn model_step(s: &SpanRecord, agent: String) -> Step {
    let out = output_messages(s);
    let mut text: Vec<String> = out.iter().map(|m| m.text.clone()).collect();
    text.retain(|t| !t.is_empty());
    if let Some(e) = span_error(s) {
        text.push(format!("[error: {e}]"));
    }
    Step {
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
    }
}

fn tool_name(s: &SpanRecord) -> String {
    let a = &s.attributes;
    str_attr(a, "gen_ai.tool.name")
        .or_else(|| str_attr(a, "tool.name"))
        .map(String::from)
        .unwrap_or_else(|| {
            s.name
                .strip_prefix("execute_tool ")
                .unwrap_or(&s.name)
                .to_string()
        })
}

/// A tool execution's step: its result, its error.
fn tool_step(s: &SpanRecord, tool: String) -> Step {
    let a = &s.attributes;
    let mut content = a
        .get("gen_ai.tool.call.result")
        .or_else(|| a.get("output.value"))
        .map(json_or_string)
        .unwrap_or_default();
    if let Some(e) = span_error(s) {
        content.push_str(&format!("\n[error: {e}]"));
    }
    Step {
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
    }
}

/// The span's system instructions (else its first `system`-role input message) become the
/// agent's system prompt (the first one seen).
fn note_system_prompt(trace: &mut Trace, agent: &str, s: &SpanRecord) {
    let from_messages = || {
        input_messages(s)
            .into_iter()
            .find(|m| m.role == "system" && !m.text.is_empty())
            .map(|m| m.text)
    };
    if let Some(p) = system_prompt(s).or_else(from_messages) {
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

    fn warning_codes(t: &Trace) -> Vec<&str> {
        t.metadata
            .get("otel_warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w["code"].as_str())
            .collect()
    }

    #[test]
    fn each_span_is_credited_to_its_own_service_and_a_nameless_run_says_so() {
        let out = |text: &str| {
            Value::String(
                json!([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
                    .to_string(),
            )
        };
        let mut a = span(
            "1",
            None,
            10,
            json!({"gen_ai.operation.name": "chat",
            "gen_ai.output.messages": out("from a")}),
        );
        let mut b = span(
            "2",
            None,
            20,
            json!({"gen_ai.operation.name": "chat",
            "gen_ai.output.messages": out("from b")}),
        );
        a.service = Some("planner-svc".into());
        b.service = Some("coder-svc".into());
        let t = &traces(&[a, b])[0];
        let agents: Vec<&str> = t.steps.iter().map(|s| s.agent.as_str()).collect();
        assert_eq!(agents, ["planner-svc", "coder-svc"]);
        assert_eq!(warning_codes(t), ["agents_from_service"]);
        let w = &t.metadata["otel_warnings"][0];
        assert!(w["fix"]
            .as_str()
            .is_some_and(|f| f.contains("gen_ai.agent.name")));
    }

    #[test]
    fn a_run_without_model_or_tool_spans_says_so() {
        let spans = vec![span(
            "1",
            None,
            10,
            json!({"openinference.span.kind": "CHAIN",
            "input.value": "hello"}),
        )];
        let t = &traces(&spans)[0];
        assert!(t.steps.is_empty());
        assert_eq!(warning_codes(t), ["no_steps"]);
        assert_eq!(warning_codes(&traces(&genai_run())[0]), Vec::<&str>::new());
    }

    #[test]
    fn an_exception_event_on_a_chain_shows_on_the_step_under_it() {
        // smolagents: AgentParsingError as an exception event on the CHAIN span "Step 2".
        let mut chain = span(
            "2",
            Some("1"),
            20,
            json!({"openinference.span.kind": "CHAIN"}),
        );
        chain.events.push(SpanEvent {
            name: "exception".into(),
            time_ns: 30,
            attributes: json!({"exception.type": "AgentParsingError",
                "exception.message": "no tool call"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        });
        let spans = vec![
            span(
                "1",
                None,
                10,
                json!({"openinference.span.kind": "AGENT", "input.value": "Q"}),
            ),
            chain,
            span(
                "3",
                Some("2"),
                25,
                json!({"openinference.span.kind": "LLM",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "garbled"}),
            ),
        ];
        let t = &traces(&spans)[0];
        assert_eq!(t.steps.len(), 1);
        assert_eq!(
            t.steps[0].content,
            "garbled\n[error: AgentParsingError: no tool call]"
        );
        assert_eq!(
            t.outcome,
            Outcome::Unknown,
            "the agent went on: a CHAIN error is no failure"
        );
    }

    /// A parent chain `depth` spans deep, alternating a nameless CHAIN span and a chat span with
    /// no agent name (every chat is a step; its agent is looked up the whole chain).
    pub(crate) fn deep_chain(depth: usize) -> Vec<SpanRecord> {
        (0..depth)
            .map(|i| {
                let attrs = if i % 2 == 1 {
                    json!({"gen_ai.operation.name": "chat", "gen_ai.output.messages":
                        format!("[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{i}\"}}]}}]")})
                } else {
                    json!({"openinference.span.kind": "CHAIN"})
                };
                let parent = (i > 0).then(|| format!("{:x}", i));
                span(&format!("{:x}", i + 1), parent.as_deref(), i as u64, attrs)
            })
            .collect()
    }

    #[test]
    fn a_10000_deep_chain_assembles_in_linear_time() {
        // Quadratic before (each step walked the chain to the root): 5,000 steps x 10,000 spans.
        let spans = deep_chain(10_000);
        let started = std::time::Instant::now();
        let t = &traces(&spans)[0];
        let took = started.elapsed();
        assert_eq!(t.steps.len(), 5_000);
        assert_eq!(t.steps[4_999].content, "9999");
        assert!(took.as_secs_f64() < 2.0, "10,000-deep chain took {took:?}");
    }
}
