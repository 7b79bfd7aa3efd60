//! What a span did not record, read from the conversation that follows it. LlamaIndex's own
//! exporter (`llama-index-observability-otel`) drops the end event of a streamed model call (it
//! comes after the call's span has closed) and records a tool's result only as a 200-character
//! summary; the next model call's input holds both in full: the earlier call's answer as the
//! `assistant` message after the earlier input, the tool's result as a `tool` message with the
//! call's id.

use super::messages::{input_messages, output_messages, span_error, Message};
use super::SpanKind;
use crate::tree::Tree;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Outputs recovered for model steps that record none, and tool results by tool call id.
#[derive(Default)]
pub(super) struct Continued {
    /// Step span index -> its output, the `assistant` message that follows its input in the
    /// next call that continues the same conversation.
    pub(super) outputs: HashMap<usize, Message>,
    /// Tool call id -> the `tool` message answering it (first seen).
    pub(super) tool_results: HashMap<String, String>,
}

fn message_hash(prev: u64, m: &Message) -> u64 {
    let mut h = DefaultHasher::new();
    prev.hash(&mut h);
    m.role.hash(&mut h);
    m.text.hash(&mut h);
    for c in &m.tool_calls {
        c.name.hash(&mut h);
        c.arguments.hash(&mut h);
    }
    h.finish()
}

fn same(a: &Message, b: &Message) -> bool {
    a.role == b.role
        && a.text == b.text
        && a.tool_calls.len() == b.tool_calls.len()
        && a.tool_calls
            .iter()
            .zip(&b.tool_calls)
            .all(|(x, y)| x.name == y.name && x.arguments == y.arguments)
}

/// For model steps (in step `order`) that record no output and no error: the `assistant`
/// message right after their own input (system messages aside: each agent has its own) in the
/// input of a later model step. Linear in the messages (prefix hashes), and nothing is read
/// when every model step records its output.
/// Tool results are collected when `tool_results_missing` (some tool step records none).
pub(super) fn continued(
    tree: &Tree,
    roles: &[Option<SpanKind>],
    order: &[usize],
    tool_results_missing: bool,
) -> Continued {
    let mut out = Continued::default();
    let model: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| roles[i] == Some(SpanKind::Llm))
        .collect();
    let silent: Vec<bool> = model
        .iter()
        .map(|&i| {
            let s = tree.spans[i];
            output_messages(s).is_empty() && span_error(s).is_none()
        })
        .collect();
    if !silent.contains(&true) && !tool_results_missing {
        return out;
    }
    let inputs: Vec<Vec<Message>> = model
        .iter()
        .map(|&i| {
            let mut m = input_messages(tree.spans[i]);
            m.retain(|m| !m.is_instructions());
            m
        })
        .collect();
    for m in inputs.iter().flatten().filter(|m| m.role == "tool") {
        if let Some(id) = &m.tool_call_id {
            out.tool_results
                .entry(id.clone())
                .or_insert_with(|| m.text.clone());
        }
    }
    if !silent.contains(&true) {
        return out;
    }
    // (prefix length, prefix hash) -> positions in `model` whose input continues that prefix
    // with an assistant message, ascending.
    let mut prefixes: Vec<Vec<u64>> = Vec::with_capacity(model.len());
    let mut continuing: HashMap<(usize, u64), Vec<usize>> = HashMap::new();
    for (pos, msgs) in inputs.iter().enumerate() {
        let mut h = vec![0u64];
        for m in msgs {
            let last = *h.last().unwrap_or(&0);
            h.push(message_hash(last, m));
        }
        for (k, m) in msgs.iter().enumerate().skip(1) {
            if m.role == "assistant" {
                continuing.entry((k, h[k])).or_default().push(pos);
            }
        }
        prefixes.push(h);
    }
    for (pos, &i) in model.iter().enumerate() {
        let own = &inputs[pos];
        if !silent[pos] || own.is_empty() {
            continue;
        }
        let key = (own.len(), prefixes[pos][own.len()]);
        let next = continuing.get(&key).into_iter().flatten().find(|&&j| {
            j > pos
                && inputs[j].len() > own.len()
                && own.iter().zip(&inputs[j]).all(|(a, b)| same(a, b))
        });
        if let Some(&j) = next {
            out.outputs.insert(i, inputs[j][own.len()].clone());
        }
    }
    out
}
