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
//!   call's step is its output (text, tool calls); a tool's step is its result. LlamaIndex's own
//!   exporter (no kind attribute): the span with an `LLMChat*Event` is a model call (messages in
//!   the events), the `call_tool` workflow step a tool; what a span does not record (a streamed
//!   call's answer, a tool's result) is read from the next call's input (module `continued`).
//! - **Agent**: the span's own agent name (`gen_ai.agent.name`, `agent.name`, a LangGraph node,
//!   LlamaIndex's `current_agent_name`, carried onto the calls that follow when a summary cut
//!   it off), else that of its nearest ancestor that has one (an
//!   `invoke_agent` / `AGENT` span, named by its span name without `invoke_agent ` or a method
//!   suffix such as `.run` when the instrumentor names no agent; nameless roots, group managers,
//!   workflow containers and agent spans that only run other agents (Google ADK's
//!   SequentialAgent: no model step of its own) are never agents), else, for a call directly
//!   under a root span `<Team>.<method>` in a run that names its agents, the team (an
//!   orchestrator: AutoGen's SelectorGroupChat choosing the next speaker), else the span's own
//!   service name; tools are agents of kind `tool` named after the tool. System prompts:
//!   `gen_ai.system_instructions`, else the first `system`- (or OpenAI's `developer`-) role input
//!   message.
//! - **Task**: the first user message of the earliest model call that is not a team's own,
//!   else the root span's input.
//! - **Outcome**: `failure` when the root span or an agent span has status ERROR, else
//!   `unknown`. The error of any other span that is not a step (ERROR status or `exception`
//!   events: a CHAIN, an agent) is appended to the last step under it.
//! - **Warnings**: the run-level warnings (module `warnings`) in `metadata.otel_warnings`.
//!
//! Lookups up the parent chain are memoized per run (module `tree`): assembly is linear in
//! the spans however deep the chain.
//! Repeated spans (same span id) count once; parent cycles end the ancestor walk.
//!
//! Here: span kinds, runs, and the trace of a run; messages read from attributes and events
//! in `messages`, agent names in `agents`, step roles, order and inherited errors in `steps`.

mod agents;
mod continued;
mod messages;
mod steps;

use crate::span::SpanRecord;
use crate::tree::Tree;
use agents::{agent_containers, attr_agent, carry_llamaindex_agent, own_agent, team_agent};
use maslens_trace::{AgentKind, Outcome, SpanRef, Step, Trace};
use messages::{
    decoded, input_messages, json_or_string, output_messages, span_error, system_prompt,
};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use steps::{inherited_errors, step_order, step_roles};

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

/// The attribute namespaces (a key's text before its first `.`, or the whole key) that
/// assembly reads: GenAI, OpenInference, LangGraph, LlamaIndex, pydantic-ai and the nested
/// message fields of flattened messages. A stored span's other attributes (HTTP, code, process,
/// an application's own) never change the trace, so the store reads a run back with only these
/// ([`reads_attribute`]); a test checks every key this module names and every recorded run.
pub const ATTRIBUTE_NAMESPACES: &[&str] = &[
    "additional_kwargs",
    "agent",
    "contents",
    "exception",
    "function",
    "gen_ai",
    "graph",
    "input",
    "llamaindex",
    "llm",
    "message",
    "message_content",
    "metadata",
    "openinference",
    "output",
    "pydantic_ai",
    "response",
    "session",
    "tool",
    "tool_call",
    "tool_calls",
];

/// Whether assembly may read the span attribute `key` (its namespace is one of
/// [`ATTRIBUTE_NAMESPACES`]).
pub fn reads_attribute(key: &str) -> bool {
    let namespace = key.split('.').next().unwrap_or(key);
    ATTRIBUTE_NAMESPACES.contains(&namespace)
}

/// Drop the attributes assembly never reads ([`reads_attribute`]; events are kept whole): what
/// the store does to each span it reads back for assembly, so that a run's spans take memory in
/// proportion to what the trace uses.
pub fn keep_read_attributes(span: &mut SpanRecord) {
    span.attributes.retain(|key, _| reads_attribute(key));
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
        None => llamaindex_kind(span),
    }
}

/// LlamaIndex's own exporter (`llama-index-observability-otel`) sets no kind: one span per
/// instrumented method, named after it. A model call is the span that carries LlamaIndex's
/// `LLMChat*Event` / `LLMCompletion*Event` (the wrapper `astream_chat` and
/// `_prepare_chat_with_tools` around it carry none); a tool execution is the workflow step that
/// takes a `ToolCall` event (`AgentWorkflow.call_tool`, `llamaindex.step.input_event`; the
/// tool's own `FunctionTool.acall` below it inherits that tag but is not the step).
fn llamaindex_kind(span: &SpanRecord) -> SpanKind {
    if span
        .events
        .iter()
        .any(|e| messages::LLAMAINDEX_LLM_EVENTS.contains(&e.name.as_str()))
    {
        return SpanKind::Llm;
    }
    let tool_step = str_attr(&span.attributes, "llamaindex.step.input_event") == Some("ToolCall")
        && span.name.rsplit('.').next() == Some("call_tool");
    if tool_step {
        SpanKind::Tool
    } else {
        SpanKind::Other
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
    let tree = Tree::new(spans);
    let kinds: Vec<SpanKind> = tree.spans.iter().map(|s| kind(s)).collect();
    let named_run = tree
        .spans
        .iter()
        .zip(&kinds)
        .any(|(s, k)| *k == SpanKind::Agent && attr_agent(s).is_some());
    let own: Vec<Option<String>> = tree.spans.iter().map(|s| own_agent(s, named_run)).collect();
    let mut agent_at = tree.nearest(&own);
    carry_llamaindex_agent(&tree, &kinds, &mut agent_at);
    let roles = step_roles(&tree, &kinds);
    let order = step_order(&tree, &roles);
    let errors = inherited_errors(&tree, &roles, &order);
    let containers = agent_containers(&tree, &kinds, &own, &agent_at, &roles);

    let mut trace = Trace::new(key);
    let service = note_run(&mut trace, &tree, &kinds);
    // Agents and the task in start order (as the spans began), steps in step order.
    let mut from_service = 0;
    let mut agent_of: HashMap<usize, String> = HashMap::new();
    for i in 0..tree.len() {
        let s = tree.spans[i];
        match roles[i] {
            Some(SpanKind::Llm) => {
                let team = match agent_at[i] {
                    Some(_) => None,
                    None => team_agent(&tree, i, named_run),
                };
                let agent = agent_at[i]
                    .clone()
                    .or_else(|| team.clone())
                    .unwrap_or_else(|| {
                        from_service += 1;
                        s.service
                            .as_deref()
                            .or(service)
                            .unwrap_or("agent")
                            .to_string()
                    });
                let kind = match team {
                    Some(_) => AgentKind::Orchestrator,
                    None => AgentKind::Worker,
                };
                trace.ensure_agent(&agent, kind);
                // The task is what the agents were asked, not a team's prompt for its selector.
                if trace.task.is_empty() && team.is_none() {
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
            None if kinds[i] == SpanKind::Agent && !containers[i] => {
                if let Some(name) = &own[i] {
                    trace.ensure_agent(name, AgentKind::Worker);
                    note_system_prompt(&mut trace, name, s);
                }
            }
            None => {}
        }
    }
    let tool_results_missing = order
        .iter()
        .any(|&i| roles[i] == Some(SpanKind::Tool) && tool_result(tree.spans[i]).is_none());
    let mut continued = continued::continued(&tree, &roles, &order, tool_results_missing);
    for &i in &order {
        let s = tree.spans[i];
        let agent = agent_of.remove(&i).unwrap_or_default();
        let mut step = match roles[i] {
            Some(SpanKind::Llm) => model_step(s, agent, continued.outputs.remove(&i)),
            _ => tool_step(s, agent, &continued.tool_results),
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
        trace.task = root_task(&tree);
    }
    let warnings = crate::warnings::run_warnings(&trace, tree.len(), from_service, service);
    if !warnings.is_empty() {
        let warnings = warnings.iter().filter_map(|w| serde_json::to_value(w).ok());
        trace.metadata.insert(
            maslens_trace::WARNINGS_KEY.into(),
            Value::Array(warnings.collect()),
        );
    }
    trace
}

/// The run-level facts of a trace: its format, OpenTelemetry trace ids, service (also its
/// group) and outcome (`failure` when a root or agent span failed). Returns the service.
fn note_run<'a>(trace: &mut Trace, tree: &Tree<'a>, kinds: &[SpanKind]) -> Option<&'a str> {
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
    service
}

/// The task when no model call has a user message: the first root span's input.
fn root_task(tree: &Tree) -> String {
    let Some(r) = (0..tree.len()).find(|&i| tree.parent[i].is_none()) else {
        return String::new();
    };
    let r = tree.spans[r];
    str_attr(&r.attributes, "input.value")
        .map(String::from)
        .or_else(|| {
            input_messages(r)
                .into_iter()
                .find(|m| m.role == "user")
                .map(|m| m.text)
        })
        .unwrap_or_default()
}

/// A model call's step: its output (text and tool calls; else `recovered`, the output read from
/// the conversation that follows), its error.
fn model_step(s: &SpanRecord, agent: String, recovered: Option<messages::Message>) -> Step {
    let mut out = output_messages(s);
    if out.is_empty() {
        out.extend(recovered);
    }
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

/// A field of the repr LlamaIndex workflows keep as `llamaindex.step.input_summary` (at most 200
/// characters, so a late field may be cut off): `ToolCall(tool_name='lookup_fact', ...)`.
fn summary_field<'a>(s: &'a SpanRecord, field: &str) -> Option<&'a str> {
    let summary = str_attr(&s.attributes, "llamaindex.step.input_summary")?;
    let rest = summary.split(&format!("{field}='")).nth(1)?;
    let (value, _) = rest.split_once('\'')?;
    (!value.is_empty()).then_some(value)
}

fn tool_name(s: &SpanRecord) -> String {
    let a = &s.attributes;
    str_attr(a, "gen_ai.tool.name")
        .or_else(|| str_attr(a, "tool.name"))
        .or_else(|| summary_field(s, "tool_name"))
        .map(String::from)
        .unwrap_or_else(|| {
            s.name
                .strip_prefix("execute_tool ")
                .unwrap_or(&s.name)
                .to_string()
        })
}

/// A tool span's recorded result.
fn tool_result(s: &SpanRecord) -> Option<&Value> {
    let a = &s.attributes;
    a.get("gen_ai.tool.call.result")
        .or_else(|| a.get("output.value"))
}

/// A tool's result as text. LangChain tools (OpenInference's LangChain instrumentor, LangGraph's
/// `ToolNode`) record the whole serialized `ToolMessage` (`{"type": "tool", "data": {"content":
/// ...}}`, or `{"lc": 1, ..., "kwargs": {"content": ...}}`): its content is the result.
fn tool_output_text(v: &Value) -> String {
    let message = decoded(v);
    let body = match message.get("type").and_then(Value::as_str) {
        Some("tool") => message.get("data"),
        Some("constructor") => message.get("kwargs"),
        _ => None,
    };
    match body.and_then(|b| b.get("content")) {
        Some(content) => json_or_string(content),
        None => json_or_string(v),
    }
}

/// A tool execution's step: its result (else the `tool` message answering its call id in a
/// later model call's input, from `results`), its error.
fn tool_step(s: &SpanRecord, tool: String, results: &HashMap<String, String>) -> Step {
    let a = &s.attributes;
    let call_id = str_attr(a, "gen_ai.tool.call.id")
        .or_else(|| str_attr(a, "tool.id"))
        .or_else(|| str_attr(a, "tool_call.id"))
        .or_else(|| summary_field(s, "tool_id"))
        .map(String::from);
    let mut content = tool_result(s).map(tool_output_text).unwrap_or_else(|| {
        call_id
            .as_ref()
            .and_then(|id| results.get(id))
            .cloned()
            .unwrap_or_default()
    });
    if let Some(e) = span_error(s) {
        content.push_str(&format!("\n[error: {e}]"));
    }
    Step {
        agent: tool.clone(),
        speaker: format!("tool:{tool}"),
        content: content.trim_start().to_string(),
        tool_call_id: call_id,
        timestamp: Some(rfc3339(s.start_ns)),
        span: Some(span_ref(s)),
        ..Step::default()
    }
}

/// The span's system instructions (else its first `system`- or `developer`-role input message)
/// become the agent's system prompt (the first one seen).
fn note_system_prompt(trace: &mut Trace, agent: &str, s: &SpanRecord) {
    let from_messages = || {
        input_messages(s)
            .into_iter()
            .find(|m| m.is_instructions() && !m.text.is_empty())
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
mod tests;
