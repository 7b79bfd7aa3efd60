//! Aegis-Bench JSONL records (kfq20/AEGIS `aegis.jsonl`), one per line.
//!
//! Normalization (see docs/trace-format.md):
//! - id: the record's `id`; task: `input.query`; ground truth: `ground_truth.correct_answer`;
//! - steps: `input.conversation_history` in source order. Source `step` numbers are 1-based;
//!   `Step::index` is the 0-based position (so `index = step - 1` when the source numbers turns
//!   1..n). The source numbers are kept in `metadata.source_steps`, and a warning is given when
//!   they are not exactly 1..n;
//! - `phase` -> `Step::phase`, `agent_role` -> `Agent::role` (first seen);
//! - labels: `output.faulty_agents` -> `labels.faulty_agents` (`error_type` -> `error_mode`,
//!   `injection_strategy` -> `strategy`, the matching `ground_truth.injected_agents` entry's
//!   non-empty `malicious_action_description` -> `description`). Label names are compared with
//!   the conversation's agents case-insensitively and written in the conversation's spelling
//!   (`assistant1` -> `Assistant1`); a label naming no speaker is kept as given, with a warning;
//! - outcome: unknown. `is_injection_successful` says the injected fault took effect, not that
//!   the final answer was wrong, and the records carry no correctness flag; it is kept in
//!   `metadata` with `metadata` (framework, benchmark, ...) and `final_output` (left out when it
//!   is empty or the builders' placeholder `No final output available`);
//! - no step-level gold: the labels name agents, never steps, so [`Trace::gold`] has no step.

use super::whowhen::Text;
use super::{ImportError, RecordCtx};
use crate::diag::Diagnostic;
use crate::model::{FaultyAgent, Outcome, Step, Trace};
use crate::names::infer_kind;
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    id: Option<Text>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    input: Input,
    #[serde(default)]
    output: Option<Output>,
    #[serde(default)]
    ground_truth: Option<GroundTruth>,
}

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    query: Option<Text>,
    conversation_history: Vec<Turn>,
    #[serde(default)]
    final_output: Option<Value>,
}

#[derive(Deserialize)]
struct Turn {
    #[serde(default)]
    step: Option<i64>,
    agent_name: String,
    #[serde(default)]
    content: Option<super::content::Content>,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    agent_role: Option<String>,
}

#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    faulty_agents: Vec<Label>,
}

#[derive(Clone, Deserialize)]
struct Label {
    agent_name: String,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    injection_strategy: Option<String>,
    #[serde(default)]
    malicious_action_description: Option<String>,
}

#[derive(Deserialize)]
struct GroundTruth {
    #[serde(default)]
    correct_answer: Option<Text>,
    #[serde(default)]
    injected_agents: Vec<Label>,
    #[serde(default)]
    is_injection_successful: Option<bool>,
}

/// Import one Aegis record. A record without `input` may hold the conversation at the top level.
pub fn import_value(
    value: Value,
    ctx: &RecordCtx<'_>,
) -> Result<(Trace, Vec<Diagnostic>), ImportError> {
    let Value::Object(obj) = value else {
        return Err(ctx.error(None, "expected a JSON object (an Aegis record)"));
    };
    let raw: Raw = super::typed(Value::Object(with_input(obj)), ctx, "Aegis")?;
    let mut diags = Vec::new();
    let id = raw
        .id
        .map(Text::into_string)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ctx.default_id(false));
    let mut trace = Trace::new(id);
    trace.source = ctx.source("aegis");
    trace.task = raw.input.query.map(Text::into_string).unwrap_or_default();
    let source_steps = push_turns(&mut trace, raw.input.conversation_history, &mut diags);

    let (correct_answer, injected, injection_ok) = match raw.ground_truth {
        Some(gt) => (
            gt.correct_answer,
            gt.injected_agents,
            gt.is_injection_successful,
        ),
        None => (None, Vec::new(), None),
    };
    trace.ground_truth = correct_answer.map(Text::into_string);
    let faulty = raw.output.map(|o| o.faulty_agents).unwrap_or_default();
    push_labels(&mut trace, faulty, &injected, &mut diags);

    trace.outcome = Outcome::Unknown;
    let mut metadata = raw.metadata.unwrap_or_default();
    if let Some(fo) = raw.input.final_output.filter(|v| !is_placeholder(v)) {
        metadata.insert("final_output".into(), fo);
    }
    if let Some(ok) = injection_ok {
        metadata.insert("is_injection_successful".into(), Value::Bool(ok));
    }
    metadata.insert("source_steps".into(), Value::Array(source_steps));
    trace.metadata = metadata;
    Ok((trace, diags))
}

/// The record with a top-level conversation (`query`, `conversation_history`, `final_output`
/// beside `id`, no `input`) moved under `input`, as the typed record expects it.
fn with_input(mut obj: Map<String, Value>) -> Map<String, Value> {
    if !obj.contains_key("input") && obj.contains_key("conversation_history") {
        let mut input = Map::new();
        for k in ["query", "conversation_history", "final_output"] {
            if let Some(v) = obj.remove(k) {
                input.insert(k.to_string(), v);
            }
        }
        obj.insert("input".into(), Value::Object(input));
    }
    obj
}

/// One step per turn, in source order (registering each speaker with its first role); returns
/// the source `step` numbers, with a warning when they are not 1..n (or 0..n-1).
fn push_turns(trace: &mut Trace, turns: Vec<Turn>, diags: &mut Vec<Diagnostic>) -> Vec<Value> {
    let mut source_steps = Vec::with_capacity(turns.len());
    // Source numbers 1..n (the Aegis builders) or 0..n-1 are both contiguous.
    let base = match turns.first().and_then(|t| t.step) {
        Some(0) => 0,
        _ => 1,
    };
    let mut contiguous = true;
    for (i, turn) in turns.into_iter().enumerate() {
        let name = turn.agent_name.trim().to_string();
        if name.is_empty() {
            diags.push(
                Diagnostic::warning("turn has an empty `agent_name`")
                    .at(format!("input.conversation_history[{i}].agent_name")),
            );
        } else {
            let pos = trace.ensure_agent(&name, infer_kind(&name, None));
            if let (Some(role), Some(agent)) = (turn.agent_role, trace.agents.get_mut(pos)) {
                if agent.role.is_none() && !role.is_empty() {
                    agent.role = Some(role);
                }
            }
        }
        contiguous &= turn.step == Some(i as i64 + base);
        source_steps.push(turn.step.map_or(Value::Null, Value::from));
        trace.steps.push(Step {
            index: i,
            agent: name,
            speaker: turn.agent_name,
            content: super::content::text_of(turn.content),
            phase: turn.phase.filter(|p| !p.is_empty()),
            ..Step::default()
        });
    }
    if !contiguous {
        diags.push(
            Diagnostic::warning(
                "source `step` numbers are not 1..n (or 0..n-1) in order; steps are indexed by position \
                 (source numbers in metadata.source_steps)",
            )
            .at("input.conversation_history"),
        );
    }
    source_steps
}

/// The faulty-agent labels: `output.faulty_agents`, else `ground_truth.injected_agents`; each
/// named as the conversation spells it (a warning when no speaker has the name), with the
/// matching injected entry's description.
fn push_labels(
    trace: &mut Trace,
    faulty: Vec<Label>,
    injected: &[Label],
    diags: &mut Vec<Diagnostic>,
) {
    let (labels, label_path) = if faulty.is_empty() && !injected.is_empty() {
        let without_description = injected
            .iter()
            .map(|l| Label {
                malicious_action_description: None,
                ..l.clone()
            })
            .collect();
        (without_description, "ground_truth.injected_agents")
    } else {
        (faulty, "output.faulty_agents")
    };
    for (i, l) in labels.into_iter().enumerate() {
        let given = l.agent_name.trim();
        let agent = match trace
            .agents
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(given))
        {
            Some(a) => a.name.clone(),
            None => {
                diags.push(
                    Diagnostic::warning(format!(
                        "faulty agent `{given}` never speaks in the conversation; kept as given"
                    ))
                    .at(format!("{label_path}[{i}].agent_name")),
                );
                given.to_string()
            }
        };
        let description = injected
            .iter()
            .find(|inj| {
                inj.agent_name.trim().eq_ignore_ascii_case(given) && inj.error_type == l.error_type
            })
            .and_then(|inj| inj.malicious_action_description.clone())
            .filter(|d| !d.trim().is_empty());
        trace.labels.faulty_agents.push(FaultyAgent {
            agent,
            error_mode: l.error_type.filter(|e| !e.is_empty()),
            strategy: l.injection_strategy.filter(|s| !s.is_empty()),
            description,
        });
    }
}

/// What the Aegis builders write when a run has no final output (`""` in the smolagents and
/// Magentic builders, `No final output available` in `build_unified_dataset.py`).
fn is_placeholder(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => {
            let s = s.trim();
            s.is_empty() || s.eq_ignore_ascii_case("No final output available")
        }
        _ => false,
    }
}
