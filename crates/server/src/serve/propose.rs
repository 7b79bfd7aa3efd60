//! "Propose a fix" for a failure mode (`POST /api/modes/propose`, and the button on each mode of
//! `/ui/modes`): [`maslens_core::improve::propose`] on the mode's example runs with the server's
//! model. The proposal is stored as a `propose` diagnosis on each example run (not a
//! localization: it names no agent or step of its own), so the run pages list it and the outbox
//! writes it back to Phoenix / OTLP as an annotation on the example's decisive-step span.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use maslens_core::improve::{self, FixProposal};
use maslens_core::modes::Mode;
use maslens_store::{FollowUp, NewDiagnosis, StoreError};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::api::{error, store_error};
use super::modes::{from_store, ModesError, ModesQuery};
use super::pipeline::{models, writeback_targets};
use super::AppState;

/// Which mode to propose a fix for: the system and the mode's id as `GET /api/modes` gives them
/// with the same `outcome` and `similarity`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposeRequest {
    pub system: String,
    pub mode: String,
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub similarity: Option<f64>,
}

/// The proposal and the diagnoses that hold it (one per example run).
#[derive(Debug, Clone, Serialize)]
pub struct Proposed {
    pub proposal: FixProposal,
    pub diagnoses: Vec<String>,
}

/// Why there is no proposal.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Model(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ModesError> for ProposeError {
    fn from(e: ModesError) -> Self {
        match e {
            ModesError::Invalid(m) => ProposeError::Invalid(m),
            ModesError::Store(e) => ProposeError::Store(e),
        }
    }
}

/// Examples of a mode the rewrite is shown at most.
const EXAMPLES: usize = 8;

/// Propose a fix for the mode `req` names and store it on the mode's example runs.
pub async fn propose(state: &AppState, req: &ProposeRequest) -> Result<Proposed, ProposeError> {
    let started = Instant::now();
    let query = ModesQuery {
        system: Some(req.system.clone()),
        outcome: req.outcome.clone(),
        similarity: req.similarity,
        examples: Some(EXAMPLES),
        ..ModesQuery::default()
    };
    let report = from_store(&state.store, &query).await?;
    let mode = report
        .systems
        .iter()
        .filter(|s| s.system == req.system)
        .flat_map(|s| &s.modes)
        .find(|m| m.id == req.mode)
        .ok_or_else(|| {
            ProposeError::NotFound(format!(
                "no failure mode {:?} of system {:?} (GET /api/modes lists them)",
                req.mode, req.system
            ))
        })?;
    let traces = example_traces(state, mode).await?;
    let m = models(state).await.map_err(ProposeError::Model)?;
    let proposal = improve::propose(
        m.judge.model.as_ref(),
        &state.config.model,
        &req.system,
        mode,
        &traces,
        400,
        0,
    )
    .await
    .map_err(|e| match e {
        maslens_core::CoreError::Invalid(m) => ProposeError::Invalid(m),
        e => ProposeError::Model(e.to_string()),
    })?;
    let diagnoses = store(state, &proposal, mode, &traces, started).await?;
    Ok(Proposed {
        proposal,
        diagnoses,
    })
}

async fn example_traces(
    state: &AppState,
    mode: &Mode,
) -> Result<BTreeMap<String, Trace>, StoreError> {
    let mut traces = BTreeMap::new();
    for ex in &mode.examples {
        if let Some(trace) = state.store.run(&ex.run).await?.and_then(|r| r.trace) {
            traces.insert(ex.run.clone(), trace);
        }
    }
    Ok(traces)
}

/// One `propose` diagnosis per example run, each on the example's decisive-step span (when the
/// run came over OTLP) with the write-back targets queued.
async fn store(
    state: &AppState,
    proposal: &FixProposal,
    mode: &Mode,
    traces: &BTreeMap<String, Trace>,
    started: Instant,
) -> Result<Vec<String>, StoreError> {
    let targets = writeback_targets(state);
    let mut ids = Vec::new();
    for run in &proposal.examples {
        let Some(trace) = traces.get(run) else {
            continue;
        };
        let step = mode
            .examples
            .iter()
            .find(|e| &e.run == run)
            .and_then(|e| e.step);
        let span = step
            .and_then(|s| trace.position_of(s))
            .and_then(|p| trace.steps[p].span.clone());
        let d = NewDiagnosis {
            run_id: run.clone(),
            method: "propose".into(),
            model: Some(proposal.model.clone()),
            prompt_versions: FixProposal::prompt_versions(),
            params: json!({"system": proposal.system, "mode": proposal.mode, "step": step}),
            usage: json!({}),
            trace_hash: None,
            agent: None,
            step: None,
            otel_trace_id: span.as_ref().map(|s| s.trace_id.clone()),
            span_id: span.map(|s| s.span_id),
            confidence: None,
            risk: None,
            result: json!({"proposal": proposal, "note": proposal.note()}),
            elapsed_ms: i64::try_from(started.elapsed().as_millis()).ok(),
            events: Vec::new(),
        };
        let follow = FollowUp {
            outbox: &targets,
            ..Default::default()
        };
        ids.push(state.store.add_diagnosis_with(&d, follow).await?);
    }
    Ok(ids)
}

/// `POST /api/modes/propose`: `{"proposal": FixProposal, "diagnoses": [ids]}`.
pub(super) async fn api(
    State(state): State<Arc<AppState>>,
    body: Result<Json<ProposeRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    match propose(&state, &req).await {
        Ok(p) => Json(p).into_response(),
        Err(ProposeError::Invalid(m)) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        Err(ProposeError::NotFound(m)) => error(StatusCode::NOT_FOUND, m),
        Err(ProposeError::Model(m)) => error(StatusCode::BAD_GATEWAY, m),
        Err(ProposeError::Store(e)) => store_error(e),
    }
}
