//! Agent naming: the agent a span names itself (attributes, LangGraph nodes, LlamaIndex
//! workflow steps, an AGENT span's name), whether two spans may be one agent's call, and which
//! agent spans only run other agents (containers).

use super::messages::{decoded, llamaindex_event};
use super::{kind, str_attr, SpanKind};
use crate::span::SpanRecord;
use crate::tree::Tree;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The LangGraph node a span ran in: OpenInference's LangChain instrumentor puts
/// `{"langgraph_node": ...}` in the `metadata` attribute (a JSON string) of every span of a node,
/// model calls included; a supervisor node is a CHAIN span without any other agent name. In a
/// subgraph, the outermost graph's node.
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
    // A node of a subgraph (a prebuilt ReAct agent run as a worker node: its own nodes are
    // "agent" and "tools") is the outer graph's node: the first of the checkpoint namespace's
    // `node:task|node:task` segments.
    let outer = meta
        .get("langgraph_checkpoint_ns")
        .and_then(Value::as_str)
        .filter(|ns| ns.contains('|'))
        .and_then(|ns| ns.split('|').next())
        .and_then(|first| first.split(':').next());
    outer
        .or_else(|| meta.get("langgraph_node")?.as_str())
        .filter(|n| !n.is_empty() && !n.starts_with("__"))
        .map(String::from)
}

/// The agent a span names by attribute (never by its span name): `gen_ai.agent.name` /
/// `agent.name`, a LangGraph node, LlamaIndex's current agent, or `graph.node.*`.
pub(super) fn attr_agent(span: &SpanRecord) -> Option<String> {
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
/// holds `current_agent_name='triage'`: OpenInference's `input.value`, or the 200-character
/// `llamaindex.step.input_summary` that LlamaIndex's own exporter records, where a long input
/// can cut the name off); the model calls of that agent run under it.
pub(super) fn llamaindex_agent(span: &SpanRecord) -> Option<String> {
    let method = span.name.rsplit('.').next()?;
    if !["run_agent_step", "setup_agent", "parse_agent_output"].contains(&method) {
        return None;
    }
    ["input.value", "llamaindex.step.input_summary"]
        .iter()
        .filter_map(|k| str_attr(&span.attributes, k))
        .find_map(|input| {
            // A name cut off by the summary's length has no closing quote.
            let (name, _) = input
                .split("current_agent_name='")
                .nth(1)?
                .split_once('\'')?;
            (!name.is_empty()).then(|| name.to_string())
        })
}

/// The agent a LlamaIndex `handoff` tool step hands over to: its `ToolCall` summary
/// (`ToolCall(tool_name='handoff', tool_kwargs={'to_agent': 'researcher', ...}, ...)`).
fn llamaindex_handoff(span: &SpanRecord) -> Option<String> {
    if span.name.rsplit('.').next() != Some("call_tool") {
        return None;
    }
    let summary = str_attr(&span.attributes, "llamaindex.step.input_summary")?;
    if !summary.starts_with("ToolCall(tool_name='handoff'") {
        return None;
    }
    let (name, _) = summary.split("'to_agent': '").nth(1)?.split_once('\'')?;
    (!name.is_empty()).then(|| name.to_string())
}

/// LlamaIndex's current agent carried onto the model calls that follow: a call that no span
/// at or above names an agent for (a `run_agent_step` summary cut off before
/// `current_agent_name`: the first turn, or few messages and no system prompt) takes the agent
/// of the latest LlamaIndex workflow step that named one before it started (its `setup_agent`,
/// or a `handoff` tool step's `to_agent`), within the same workflow run (`llamaindex.run_id`).
///
/// A call that still has none (the first agent, when the summaries of its `setup_agent` and
/// `run_agent_step` both cut the name off) is credited by elimination: its `handoff` tool offers
/// every agent the current one may hand off to (by default all the others), so when exactly one
/// agent of the workflow run is not offered, that one is making the call.
pub(super) fn carry_llamaindex_agent(
    tree: &Tree,
    kinds: &[SpanKind],
    agent_at: &mut [Option<String>],
) {
    let mut current: HashMap<&str, String> = HashMap::new();
    // Every agent name a workflow run shows: named steps, handoffs, and the handoff offers.
    let mut known: HashMap<&str, BTreeSet<String>> = HashMap::new();
    let offers: Vec<Option<Vec<String>>> = tree.spans.iter().map(|s| handoff_offers(s)).collect();
    // Spans are in start order.
    for i in 0..tree.len() {
        let s = tree.spans[i];
        let run = str_attr(&s.attributes, "llamaindex.run_id").unwrap_or_default();
        if let Some(offered) = &offers[i] {
            known
                .entry(run)
                .or_default()
                .extend(offered.iter().cloned());
        }
        if let Some(name) = llamaindex_agent(s).or_else(|| llamaindex_handoff(s)) {
            known.entry(run).or_default().insert(name.clone());
            current.insert(run, name);
        } else if kinds[i] == SpanKind::Llm && agent_at[i].is_none() {
            agent_at[i] = current.get(run).cloned();
        }
    }
    for i in 0..tree.len() {
        if kinds[i] != SpanKind::Llm || agent_at[i].is_some() {
            continue;
        }
        let run = str_attr(&tree.spans[i].attributes, "llamaindex.run_id").unwrap_or_default();
        let (Some(offered), Some(names)) = (&offers[i], known.get(run)) else {
            continue;
        };
        let mut rest = names.iter().filter(|n| !offered.contains(n));
        if let (Some(only), None) = (rest.next(), rest.next()) {
            agent_at[i] = Some(only.clone());
        }
    }
}

/// The agents a LlamaIndex model call's `handoff` tool offers, from the tools of its
/// `LLMChatStartEvent` (LlamaIndex's own exporter): the tool's description ends with
/// `Currently available agents:\n{'researcher': 'Looks facts up.'}`, a Python dict repr.
fn handoff_offers(span: &SpanRecord) -> Option<Vec<String>> {
    let tools = llamaindex_event(span, &["LLMChatStartEvent"])?.get("additional_kwargs.tools")?;
    let tools = decoded(tools);
    let handoff = tools
        .as_array()?
        .iter()
        .find(|t| t["function"]["name"] == "handoff")?;
    let description = handoff["function"]["description"].as_str()?;
    let (_, offers) = description.split_once("Currently available agents:")?;
    python_dict_keys(offers.trim())
}

/// The keys of a Python dict repr whose keys are strings (`{'a': 'x', "b's": None}`); `None`
/// when it is not one.
fn python_dict_keys(repr: &str) -> Option<Vec<String>> {
    let mut chars = repr.chars().peekable();
    if chars.next()? != '{' {
        return None;
    }
    let mut keys = Vec::new();
    loop {
        skip_whitespace(&mut chars);
        if chars.next_if_eq(&'}').is_some() {
            return Some(keys);
        }
        keys.push(python_str(&mut chars)?);
        skip_whitespace(&mut chars);
        if chars.next()? != ':' {
            return None;
        }
        skip_whitespace(&mut chars);
        // The value: a string, or a bare word (`None`).
        if matches!(chars.peek(), Some('\'' | '"')) {
            python_str(&mut chars)?;
        } else {
            while chars.next_if(|c| *c != ',' && *c != '}').is_some() {}
        }
        skip_whitespace(&mut chars);
        match chars.next()? {
            ',' => continue,
            '}' => return Some(keys),
            _ => return None,
        }
    }
}

fn skip_whitespace(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
}

/// A Python string literal in single or double quotes; an escaped character is kept as itself.
fn python_str(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
    let quote = chars.next().filter(|q| *q == '\'' || *q == '"')?;
    let mut out = String::new();
    loop {
        match chars.next()? {
            '\\' => out.push(chars.next()?),
            c if c == quote => return Some(out),
            c => out.push(c),
        }
    }
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

/// The team a model call belongs to when no agent makes it: a call directly under the run's root
/// span, in a run whose agents are named, where the root is a team object running
/// (`<Team>.<method>`: AutoGen AgentChat's `SelectorGroupChat.run_stream`, whose selector model
/// picks each next speaker). The team's name, without the method; `None` elsewhere.
pub(super) fn team_agent(tree: &Tree, i: usize, named_run: bool) -> Option<String> {
    let root = tree.parent[i]?;
    if !named_run || tree.parent[root].is_some() {
        return None;
    }
    let (team, method) = tree.spans[root].name.rsplit_once('.')?;
    let team = team.trim();
    (!team.is_empty() && METHOD_SUFFIXES.contains(&method)).then(|| team.to_string())
}

/// Span names of workflow containers, group managers and a framework's internal helpers: never
/// agents (AG2's `checking_agent` validates the speaker selection's answer; a name with a leading
/// underscore, AG2's `_Group_Tool_Executor`, is internal too: [`is_container_name`]).
const CONTAINER_NAMES: &[&str] = &[
    "agent workflow",
    "chat_manager",
    "checking_agent",
    "invoke_agent",
    "invoke_workflow",
    "workflow",
];

fn is_container_name(name: &str) -> bool {
    name.starts_with('_') || CONTAINER_NAMES.contains(&name.to_ascii_lowercase().as_str())
}

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
    (!name.is_empty() && !is_container_name(name)).then(|| name.to_string())
}

/// The agent a span names itself. An AGENT span without a name attribute is named by its
/// span name only when no AGENT span of the run has a name attribute (`named_run` false):
/// where the instrumentor names agents, a nameless AGENT span (OpenAI Agents SDK's root
/// "Agent workflow") is a container. A delegation tool names its coworker ([`delegated_to`]).
pub(super) fn own_agent(span: &SpanRecord, named_run: bool) -> Option<String> {
    let span_kind = kind(span);
    if span_kind == SpanKind::Tool {
        if let Some(coworker) = delegated_to(span) {
            return Some(coworker);
        }
    }
    let is_agent = span_kind == SpanKind::Agent;
    match attr_agent(span) {
        // A group manager's agent span (AG2's `invoke_agent chat_manager`) is a container.
        Some(name) if is_agent && is_container_name(&name) => None,
        Some(name) => Some(name),
        None => (is_agent && !named_run)
            .then(|| span_name_agent(span))
            .flatten(),
    }
}

/// The coworker a delegation tool (a TOOL span) hands its work to: CrewAI's hierarchical manager delegates
/// through the tools "Delegate work to coworker" / "Ask question to coworker", whose arguments
/// (OpenInference's `input.value`) name the `coworker`; the coworker's model and tool calls run
/// inside that TOOL span with no agent span of their own, so the tool names their agent.
fn delegated_to(span: &SpanRecord) -> Option<String> {
    let input: Value = serde_json::from_str(str_attr(&span.attributes, "input.value")?).ok()?;
    let coworker = input.get("coworker")?.as_str()?.trim();
    (!coworker.is_empty()).then(|| coworker.to_string())
}

/// Whether two spans may belong to one agent's call: not when both name an agent and the
/// names differ.
pub(super) fn same_agent(a: &SpanRecord, b: &SpanRecord) -> bool {
    match (attr_agent(a), attr_agent(b)) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// Agent spans that only run other agents: a named agent span that encloses another agent's
/// span and to whose name no model step is credited (Google ADK's `invoke_agent pipeline` of a
/// SequentialAgent, ParallelAgent or LoopAgent; any orchestrator that calls no model itself).
/// They are containers, not agents. An agent that makes a model call of its own (a coordinator
/// that delegates) stays an agent.
pub(super) fn agent_containers(
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

#[cfg(test)]
mod tests {
    use super::python_dict_keys;

    #[test]
    fn python_dict_reprs_give_their_keys() {
        let keys = |r: &str| python_dict_keys(r);
        assert_eq!(
            keys("{'researcher': 'Looks facts up.'}"),
            Some(vec!["researcher".to_string()])
        );
        assert_eq!(
            keys(r#"{'a': "it's, {odd}", "b's": None, 'c\'d': 'x'}"#),
            Some(vec!["a".into(), "b's".into(), "c'd".into()])
        );
        assert_eq!(keys("{}"), Some(vec![]));
        for bad in ["", "['a']", "{'a' 'b'}", "{'a': 'b'", "{a: 'b'}"] {
            assert_eq!(keys(bad), None, "{bad}");
        }
    }
}
