//! Which spans are steps (model calls, tool executions), in which order, and which errors of
//! other spans each step shows.

use super::agents::same_agent;
use super::messages::{has_messages, output_messages, span_error};
use super::SpanKind;
use crate::tree::Tree;
use std::collections::HashMap;

/// Nearest-above span indexes without a span's own (which a parent cycle can give).
fn not_self(above: Vec<Option<usize>>) -> Vec<Option<usize>> {
    above
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.filter(|&a| a != i))
        .collect()
}
/// Which spans are steps, and as what: a model call (`Llm`) or a tool execution (`Tool`).
///
/// One step per model call: an LLM span directly wrapping another LLM span that records messages
/// (or wrapping any while recording none itself) is not a step (LlamaIndex's outer `astream_chat`);
/// an LLM span without messages beside or under one with them is not a step (LlamaIndex's
/// `_prepare_chat_with_tools`). An agent span with no model call or tool execution below it (an
/// instrumentation that traces agents only) is a model step when its output has text or a tool
/// call (an empty reply, AG2's `UserProxyAgent` closing a chat with "", is no step); with a tool below
/// (AG2's tool executor `invoke_agent user` > `execute_tool`), the tool's result is the one step.
pub(super) fn step_roles(tree: &Tree, kinds: &[SpanKind]) -> Vec<Option<SpanKind>> {
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
            SpanKind::Agent if !covered[i] && says_something(tree.spans[i]) => Some(SpanKind::Llm),
            _ => None,
        })
        .collect()
}

/// Step spans in step order: start time, except that a tool span containing other steps
/// (an agent run as a tool: pydantic-ai's `execute_tool ask_researcher`) is placed at its end,
/// after the work it returns.
pub(super) fn step_order(tree: &Tree, roles: &[Option<SpanKind>]) -> Vec<usize> {
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
pub(super) fn inherited_errors(
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

/// Whether an agent span's output says anything: a message with text or a tool call.
fn says_something(span: &crate::span::SpanRecord) -> bool {
    output_messages(span)
        .iter()
        .any(|m| !m.text.trim().is_empty() || !m.tool_calls.is_empty())
}
