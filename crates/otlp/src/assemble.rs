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
//!   suffix such as `.run` when the instrumentor names no agent; nameless roots, group managers,
//!   workflow containers and agent spans that only run other agents (Google ADK's
//!   SequentialAgent: no model step of its own) are never agents), else the span's own service
//!   name; tools are agents of kind `tool` named after the tool. System prompts:
//!   `gen_ai.system_instructions`, else the first `system`-role input message.
//! - **Task**: the first user message of the earliest model call, else the root span's input.
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
mod messages;
mod steps;

use crate::span::SpanRecord;
use crate::tree::Tree;
use agents::{attr_agent, own_agent};
use maslens_trace::{AgentKind, Outcome, SpanRef, Step, Trace};
use messages::{input_messages, json_or_string, output_messages, span_error, system_prompt};
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
    let agent_at = tree.nearest(&own);
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
            None if kinds[i] == SpanKind::Agent && !containers[i] => {
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
        trace.task = root_task(&tree);
    }
    let warnings = crate::warnings::run_warnings(&trace, tree.len(), from_service, service);
    if !warnings.is_empty() {
        trace
            .metadata
            .insert("otel_warnings".into(), Value::Array(warnings));
    }
    trace
}

/// Agent spans that only run other agents: a named agent span that encloses another agent's
/// span and to whose name no model step is credited (Google ADK's `invoke_agent pipeline` of a
/// SequentialAgent, ParallelAgent or LoopAgent; any orchestrator that calls no model itself).
/// They are containers, not agents. An agent that makes a model call of its own (a coordinator
/// that delegates) stays an agent.
fn agent_containers(
    tree: &Tree,
    kinds: &[SpanKind],
    own: &[Option<String>],
    agent_at: &[Option<String>],
    roles: &[Option<SpanKind>],
) -> Vec<bool> {
    let n = tree.len();
    let named: Vec<Option<usize>> = (0..n)
        .map(|i| (kinds[i] == SpanKind::Agent && own[i].is_some()).then_some(i))
        .collect();
    let enclosing = tree.nearest_above(&named);
    let mut holds_other = vec![false; n];
    for j in (0..n).filter(|&j| named[j].is_some()) {
        if let Some(p) = enclosing[j].filter(|&p| p != j && own[p] != own[j]) {
            holds_other[p] = true;
        }
    }
    let acting: HashSet<&str> = (0..n)
        .filter(|&i| roles[i] == Some(SpanKind::Llm))
        .filter_map(|i| agent_at[i].as_deref())
        .collect();
    (0..n)
        .map(|i| holds_other[i] && own[i].as_deref().is_some_and(|name| !acting.contains(name)))
        .collect()
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

    #[test]
    fn an_agent_span_that_only_runs_other_agents_is_a_container() {
        // Google ADK: invoke_workflow > invoke_agent pipeline (a SequentialAgent, named like any
        // agent) > invoke_agent researcher / writer > their model calls. A coordinator that
        // calls the model itself before delegating stays an agent.
        let chat = |id: &str, parent: &str, start: u64, agent: &str| {
            span(
                id,
                Some(parent),
                start,
                json!({"gen_ai.operation.name": "generate_content", "gen_ai.agent.name": agent,
                "gen_ai.output.messages": format!("[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{agent} says\"}}]}}]")}),
            )
        };
        let agent = |id: &str, parent: &str, start: u64, name: &str| {
            span(
                id,
                Some(parent),
                start,
                json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}),
            )
        };
        let mut spans = vec![
            span(
                "1",
                None,
                10,
                json!({"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "pipeline"}),
            ),
            agent("2", "1", 11, "pipeline"),
            agent("3", "2", 12, "researcher"),
            chat("4", "3", 13, "researcher"),
            agent("5", "2", 20, "writer"),
            chat("6", "5", 21, "writer"),
        ];
        let t = &traces(&spans)[0];
        let declared: Vec<&str> = t.agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(declared, ["researcher", "writer"]);
        assert_eq!(t.acting_agents(), ["researcher", "writer"]);
        // The same tree where `pipeline` first calls the model itself: a coordinator, an agent.
        spans.push(chat("7", "2", 11, "pipeline"));
        let t = &traces(&spans)[0];
        let declared: Vec<&str> = t.agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(declared, ["pipeline", "researcher", "writer"]);
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
