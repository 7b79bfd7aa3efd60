//! A Judge protocol in one call over the whole trace whose answer reasons before it locates:
//! the answer's JSON puts the protocol's reasoning fields first and the location last, so under
//! constrained decoding the model writes its reasoning before its verdict. A2P ([`super::a2p`])
//! and the taxonomy judge ([`super::taxonomy`]) are such protocols; the reasoning is kept in the
//! result's trail. A trace too long for one call goes to all-at-once's windows (neither source
//! paper has a windowed form).

use super::{all_at_once, budget, call, last_index, JudgeResult, Protocol, Settings};
use crate::render::{self, MIN_STEP_CHARS};
use crate::{finding_from_answer, prompts, LocateError, LocationAnswer};
use maslens_llm::prompt::Rendered;
use maslens_llm::structured::StructuredOutput;
use maslens_llm::{ChatModel, Totals};
use maslens_trace::Trace;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// An answer that reasons, then locates.
pub(super) trait Reasoned: DeserializeOwned + Send + Sync {
    fn location(&self) -> &LocationAnswer;
    /// The reasoning, for the trail.
    fn trail(&self) -> Value;
}

/// What one protocol sends: its instructions, its answer's schema and the stage name its calls
/// are recorded under.
pub(super) struct Pass {
    pub protocol: Protocol,
    pub instructions: Rendered,
    pub schema: Value,
    pub stage: &'static str,
}

/// `schema` of `reasoning` properties (in order, all required), then [`super::location_schema`]'s.
pub(super) fn schema_with(reasoning: Vec<(&str, Value)>, error_modes: &[String]) -> Value {
    let location = super::location_schema(error_modes);
    let mut props = serde_json::Map::new();
    let mut required: Vec<Value> = Vec::new();
    for (name, schema) in reasoning {
        props.insert(name.into(), schema);
        required.push(name.into());
    }
    if let (Some(p), Some(r)) = (
        location["properties"].as_object(),
        location["required"].as_array(),
    ) {
        props.extend(p.clone());
        required.extend(r.iter().cloned());
    }
    json!({"type": "object", "properties": props, "required": required})
}

/// Run `pass` on `trace` (module docs); `make` builds the pass once the trace is known to fit.
pub(super) async fn one_pass<A: Reasoned>(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
    protocol: Protocol,
    make: impl FnOnce() -> Result<Pass, LocateError>,
) -> Result<JudgeResult, LocateError> {
    let n = trace.steps.len();
    let guide = prior.map(|p| (p, None));
    let limit = budget(model, trace, settings);
    let Some(fitted) = render::fit_guided(model, trace, 0..n, limit, MIN_STEP_CHARS, guide) else {
        let mut windowed = all_at_once(model, trace, settings, prior).await?;
        windowed.protocol = protocol;
        return Ok(windowed);
    };
    let pass = make()?;
    let ctx = prompts::fitted_context(trace, &fitted, settings.with_ground_truth)?;
    let mut stats = Totals::default();
    let check = |a: &A| crate::location_problem(trace, 0..=last_index(trace), a.location());
    let out: StructuredOutput<A> = call(
        model,
        trace,
        &ctx,
        &pass.instructions,
        &pass.schema,
        settings,
        pass.stage,
        &mut stats,
        &check,
    )
    .await?;
    let answer = out.value.as_ref();
    let finding = finding_from_answer(
        trace,
        answer.map(|a| a.location()),
        out.abstain_reason.as_deref(),
    );
    Ok(JudgeResult {
        protocol: pass.protocol,
        finding,
        stats,
        strategy: fitted.strategy,
        trail: answer.map(|a| vec![a.trail()]).unwrap_or_default(),
    })
}
