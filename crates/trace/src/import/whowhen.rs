//! Who&When (ag2ai/Agents_Failure_Attribution) records: one JSON object per file.
//!
//! Normalization (see docs/trace-format.md):
//! - id `<folder name>/<file stem>`, e.g. `Hand-Crafted/12`;
//! - the speaker is `name` when present (Algorithm-Generated), else `role` (Hand-Crafted); it
//!   is kept raw in `Step::speaker`, and the acting agent drops a trailing parenthetical
//!   (`Orchestrator (thought)` -> `Orchestrator`);
//! - `mistake_step` (a string holding a 0-based index into `history`) and `mistake_agent`
//!   become `labels.decisive`, kept exactly as given, even where the speaker at that step is
//!   someone else (validation reports that as a warning);
//! - outcome: Who&When holds failure logs only. `is_correct` (Algorithm-Generated) says whether
//!   the final answer was right: false -> failure, true -> success. `is_corrected` (Hand-Crafted)
//!   says whether the run recovered from the annotated mistake: false -> failure, true ->
//!   unknown (a warning says so). Both flags are also kept in `metadata`;
//! - `system_prompt` (per agent), `level`, `mistake_type`, `labels`, `question_ID` and any
//!   other top-level field go to agents / `metadata`.

use super::{ImportError, RecordCtx};
use crate::diag::Diagnostic;
use crate::model::{DecisiveLabel, Outcome, Step, Trace};
use crate::names::{infer_kind, normalize_speaker};
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    question: Option<Text>,
    #[serde(default)]
    ground_truth: Option<Text>,
    history: Vec<Message>,
    #[serde(default)]
    mistake_agent: Option<String>,
    #[serde(default)]
    mistake_step: Option<Text>,
    #[serde(default)]
    mistake_reason: Option<String>,
    #[serde(default)]
    is_correct: Option<Text>,
    #[serde(default)]
    is_corrected: Option<Text>,
    #[serde(default)]
    system_prompt: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<super::content::Content>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// A string, or a number given where a string was expected.
#[derive(Deserialize)]
#[serde(untagged, expecting = "expected a string, a number or a boolean")]
pub(crate) enum Text {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Text {
    pub(crate) fn into_string(self) -> String {
        match self {
            Text::Str(s) => s,
            Text::Int(i) => i.to_string(),
            Text::Float(f) => f.to_string(),
            Text::Bool(b) => b.to_string(),
        }
    }
}

const KNOWN: &[&str] = &[
    "question",
    "ground_truth",
    "history",
    "mistake_agent",
    "mistake_step",
    "mistake_reason",
    "is_correct",
    "is_corrected",
    "system_prompt",
];

/// Import one Who&When record.
pub fn import_value(
    value: Value,
    ctx: &RecordCtx<'_>,
) -> Result<(Trace, Vec<Diagnostic>), ImportError> {
    let Value::Object(obj) = value else {
        return Err(ctx.error(None, "expected a JSON object (a Who&When record)"));
    };
    let mut metadata = Map::new();
    for (k, v) in &obj {
        if !KNOWN.contains(&k.as_str()) {
            metadata.insert(k.clone(), v.clone());
        }
    }
    let raw: Raw = super::typed(Value::Object(obj), ctx, "Who&When")?;
    let mut diags = Vec::new();
    let mut trace = Trace::new(ctx.default_id(true));
    trace.source = ctx.source("whowhen");
    trace.task = raw.question.map(Text::into_string).unwrap_or_default();
    trace.ground_truth = raw.ground_truth.map(Text::into_string);

    for (i, m) in raw.history.into_iter().enumerate() {
        let speaker = match (&m.name, &m.role) {
            (Some(n), _) if !n.trim().is_empty() => n.clone(),
            (_, Some(r)) => r.clone(),
            _ => String::new(),
        };
        let agent = normalize_speaker(&speaker).to_string();
        if agent.is_empty() {
            diags.push(
                Diagnostic::warning("message has neither `name` nor `role`; agent left empty")
                    .at(format!("history[{i}]")),
            );
        } else {
            trace.ensure_agent(&agent, infer_kind(&agent, m.role.as_deref()));
        }
        trace.steps.push(Step {
            index: i,
            agent,
            speaker,
            content: super::content::text_of(m.content),
            ..Step::default()
        });
    }

    if let Some(prompts) = raw.system_prompt {
        for (name, prompt) in prompts {
            let agent_name = normalize_speaker(&name).to_string();
            let text = match prompt {
                Value::String(s) => s,
                Value::Null => continue,
                other => other.to_string(),
            };
            let pos = trace.ensure_agent(&agent_name, infer_kind(&agent_name, None));
            if let Some(a) = trace.agents.get_mut(pos) {
                a.system_prompt = Some(text);
            }
        }
    }

    match (raw.mistake_agent, raw.mistake_step) {
        (Some(agent), Some(step)) => {
            let step_text = step.into_string();
            match step_text.trim().parse::<usize>() {
                Ok(step) => {
                    trace.labels.decisive = Some(DecisiveLabel {
                        agent: normalize_speaker(&agent).to_string(),
                        step,
                        reason: raw.mistake_reason.filter(|r| !r.is_empty()),
                    });
                }
                Err(_) => diags.push(
                    Diagnostic::error(format!(
                        "`mistake_step` is {step_text:?}: expected a non-negative integer; \
                         the decisive label is dropped"
                    ))
                    .at("mistake_step"),
                ),
            }
        }
        (Some(_), None) => diags.push(
            Diagnostic::warning("`mistake_agent` without `mistake_step`; no decisive label")
                .at("mistake_step"),
        ),
        (None, Some(_)) => diags.push(
            Diagnostic::warning("`mistake_step` without `mistake_agent`; no decisive label")
                .at("mistake_agent"),
        ),
        (None, None) => {}
    }

    let is_correct = flag(raw.is_correct, "is_correct", &mut diags);
    let is_corrected = flag(raw.is_corrected, "is_corrected", &mut diags);
    trace.outcome = match (is_correct, is_corrected) {
        (Some(true), _) => Outcome::Success,
        (Some(false), _) => Outcome::Failure,
        (None, Some(false)) => Outcome::Failure,
        (None, Some(true)) => {
            diags.push(
                Diagnostic::warning(
                    "`is_corrected` is true: the run recovered from the mistake; outcome unknown",
                )
                .at("is_corrected"),
            );
            Outcome::Unknown
        }
        (None, None) => Outcome::Unknown,
    };
    if let Some(v) = is_correct {
        metadata.insert("is_correct".into(), Value::Bool(v));
    }
    if let Some(v) = is_corrected {
        metadata.insert("is_corrected".into(), Value::Bool(v));
    }
    trace.metadata = metadata;
    Ok((trace, diags))
}

/// A true/false flag, also when given as `"true"`/`"false"`, `"yes"`/`"no"` or 1/0; anything
/// else is an error on `field` and the flag is left unset.
fn flag(value: Option<Text>, field: &str, diags: &mut Vec<Diagnostic>) -> Option<bool> {
    let text = match value? {
        Text::Bool(b) => return Some(b),
        other => other.into_string(),
    };
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => {
            diags.push(
                Diagnostic::error(format!(
                    "`{field}` is {text:?}: expected true or false; the flag is ignored"
                ))
                .at(field),
            );
            None
        }
    }
}
