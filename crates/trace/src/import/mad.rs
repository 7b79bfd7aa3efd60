//! MAD records (the MAST dataset, Hugging Face `mcemri/MAST-Data`): one multi-agent run with
//! its MAST failure modes, annotated per trace.
//!
//! Published layout (dataset card and viewer): `mas_name`, `llm_name`, `benchmark_name`,
//! `trace_id`, `trace` (`key`, `index`, `trajectory`: the run's raw log as one string, in each
//! framework's own log format) and `mast_annotation` (`"1.1"` .. `"3.3"`, each `1`, `0` or `null`).
//! The files are JSON arrays (`MAD_full_dataset.json`); maslens reads one record per line, so
//! they are converted first with `jq -c '.[]'` (see docs/trace-format.md).
//!
//! Normalization:
//! - id: `<trace.key>/<trace.index>` (falling back on `<mas_name>/<benchmark_name>/<trace_id>`);
//!   task: empty (the records do not carry the task apart from the log);
//! - steps: one step holding `trace.trajectory`, spoken by an agent named after `mas_name`. The
//!   logs have no common turn structure, so there is no step or agent to localize: MAD gold is
//!   per trace only;
//! - labels: none of maslens' agent/step labels. The modes marked `1` go to
//!   `metadata.failure_modes` as `FM-x.y` codes (the Aegis spelling of the same taxonomy), the
//!   modes marked `null` to `metadata.unannotated_modes`; `mas_name`, `llm_name`,
//!   `benchmark_name` and `trace_id` are kept in `metadata`;
//! - outcome: failure when a mode is marked, else unknown (no mode marked does not say the run
//!   succeeded).

use super::whowhen::Text;
use super::{ImportError, RecordCtx};
use crate::diag::Diagnostic;
use crate::model::{Outcome, Step, Trace};
use crate::names::infer_kind;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    mas_name: Option<String>,
    #[serde(default)]
    llm_name: Option<String>,
    #[serde(default)]
    benchmark_name: Option<String>,
    #[serde(default)]
    trace_id: Option<Text>,
    trace: RawTrace,
    mast_annotation: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct RawTrace {
    #[serde(default)]
    key: Option<Text>,
    #[serde(default)]
    index: Option<Text>,
    trajectory: String,
}

/// The error for a MAD file given whole (a JSON array of records): maslens reads one record
/// per line.
pub(crate) const ARRAY_HELP: &str = "this is a MAD file given as one JSON array of records: \
convert it to one record per line first, e.g. `jq -c '.[]' MAD_full_dataset.json > mad.jsonl`";

/// Whether a value is a MAD record (an object with `mast_annotation` and `trace`).
pub(crate) fn looks_like(value: &Value) -> bool {
    value.get("mast_annotation").is_some() && value.get("trace").is_some()
}

/// Whether a value is a JSON array whose first element is a MAD record.
pub(crate) fn is_array_of_records(value: &Value) -> bool {
    value
        .as_array()
        .and_then(|items| items.first())
        .is_some_and(looks_like)
}

/// Import one MAD record.
pub fn import_value(
    value: Value,
    ctx: &RecordCtx<'_>,
) -> Result<(Trace, Vec<Diagnostic>), ImportError> {
    if is_array_of_records(&value) {
        return Err(ctx.error(None, ARRAY_HELP));
    }
    if !value.is_object() {
        return Err(ctx.error(None, "expected a JSON object (a MAD record)"));
    }
    let raw: Raw = super::typed(value, ctx, "MAD")?;
    let (marked, unannotated) = modes(&raw.mast_annotation, ctx)?;
    let mas = raw.mas_name.filter(|s| !s.trim().is_empty());
    let trace_id = raw.trace_id.map(Text::into_string);
    let id = match (raw.trace.key, raw.trace.index) {
        (Some(k), Some(i)) => format!("{}/{}", k.into_string(), i.into_string()),
        _ => [mas.clone(), raw.benchmark_name.clone(), trace_id.clone()]
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join("/"))
            .unwrap_or_else(|| ctx.default_id(false)),
    };
    let mut trace = Trace::new(id);
    trace.source = ctx.source("mad");
    let agent = mas.clone().unwrap_or_else(|| "system".to_string());
    trace.ensure_agent(&agent, infer_kind(&agent, None));
    trace.steps.push(Step {
        index: 0,
        agent: agent.clone(),
        speaker: agent,
        content: raw.trace.trajectory,
        ..Step::default()
    });
    trace.outcome = if marked.is_empty() {
        Outcome::Unknown
    } else {
        Outcome::Failure
    };
    let mut metadata = Map::new();
    let fields = [
        ("mas_name", mas),
        ("llm_name", raw.llm_name),
        ("benchmark_name", raw.benchmark_name),
        ("trace_id", trace_id),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            metadata.insert(k.into(), Value::String(v));
        }
    }
    metadata.insert("failure_modes".into(), strings(marked));
    if !unannotated.is_empty() {
        metadata.insert("unannotated_modes".into(), strings(unannotated));
    }
    trace.metadata = metadata;
    Ok((trace, Vec::new()))
}

fn strings(v: Vec<String>) -> Value {
    Value::Array(v.into_iter().map(Value::String).collect())
}

/// The modes marked `1` and those marked `null`, as `FM-x.y` codes in the source order of the
/// taxonomy. A value other than 0, 1, true, false or null is an error naming the mode.
fn modes(
    annotation: &BTreeMap<String, Value>,
    ctx: &RecordCtx<'_>,
) -> Result<(Vec<String>, Vec<String>), ImportError> {
    let mut marked = Vec::new();
    let mut unannotated = Vec::new();
    for (code, v) in annotation {
        let name = format!("FM-{}", code.trim().trim_start_matches("FM-"));
        match v {
            Value::Null => unannotated.push(name),
            Value::Bool(true) => marked.push(name),
            Value::Bool(false) => {}
            Value::Number(n) if n.as_u64() == Some(1) => marked.push(name),
            Value::Number(n) if n.as_u64() == Some(0) => {}
            other => {
                return Err(ctx.error(
                    Some(format!("mast_annotation.{code}")),
                    format!(
                    "expected 1, 0 or null (whether the failure mode was observed), got {other}"
                ),
                ))
            }
        }
    }
    Ok((marked, unannotated))
}
