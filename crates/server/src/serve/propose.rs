//! "Propose a fix" for a failure mode (`POST /api/modes/propose`, and the button on each mode of
//! `/ui/modes`): [`maslens_core::improve::propose`] on the mode's example runs with the server's
//! model. The proposal is stored as a `propose` diagnosis on each example run (not a
//! localization: it names no agent or step of its own), so the run pages list it and the outbox
//! writes it back to Phoenix / OTLP as an annotation on the example's decisive-step span.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use maslens_core::improve::{self, FixProposal, ModeToFix};
use maslens_store::{FollowUp, NewDiagnosis, Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::api::{error, store_error};
use super::modes::{example_traces, grouped, ModesError, ModesQuery};
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

/// The mode `req` names, grouped from the store with [`improve::propose::EXAMPLES`] examples,
/// and the traces of its examples.
pub async fn prepare(store: &Store, req: &ProposeRequest) -> Result<ModeToFix, ProposeError> {
    let query = ModesQuery {
        system: Some(req.system.clone()),
        outcome: req.outcome.clone(),
        similarity: req.similarity,
        examples: Some(improve::propose::EXAMPLES),
        ..ModesQuery::default()
    };
    let report = grouped(store, &query).await?;
    let (system, mode) = report
        .find(Some(&req.system), &req.mode)
        .map_err(|e| ProposeError::NotFound(e.to_string()))?;
    Ok(ModeToFix {
        system: system.to_string(),
        mode: mode.clone(),
        traces: example_traces(store, std::iter::once(mode)).await?,
    })
}

/// Propose a fix for the mode `req` names with the server's model, and store it on the mode's
/// example runs with the server's write-back targets.
pub async fn propose(state: &AppState, req: &ProposeRequest) -> Result<Proposed, ProposeError> {
    let started = Instant::now();
    let prepared = prepare(&state.store, req).await?;
    let m = models(state).await.map_err(ProposeError::Model)?;
    let proposal = improve::propose(
        m.judge.model.as_ref(),
        &prepared.system,
        &prepared.mode,
        &prepared.traces,
        400,
        0,
    )
    .await
    .map_err(ProposeError::of)?;
    let targets = writeback_targets(state);
    let diagnoses = store_proposal(&state.store, &proposal, &prepared, &targets, started).await?;
    Ok(Proposed {
        proposal,
        diagnoses,
    })
}

impl ProposeError {
    /// A failed proposal: the mode cannot have one (invalid), or the model failed.
    pub fn of(e: maslens_core::CoreError) -> ProposeError {
        match e {
            maslens_core::CoreError::Invalid(m) => ProposeError::Invalid(m),
            e => ProposeError::Model(e.to_string()),
        }
    }
}

/// One `propose` diagnosis per example run, each on the example's decisive-step span (when the
/// run came over OTLP) with `targets` queued for write-back; the diagnoses' ids.
pub async fn store_proposal(
    store: &Store,
    proposal: &FixProposal,
    prepared: &ModeToFix,
    targets: &[&str],
    started: Instant,
) -> Result<Vec<String>, StoreError> {
    let mut ids = Vec::new();
    for run in &proposal.examples {
        let Some(trace) = prepared.traces.get(run) else {
            continue;
        };
        let step = prepared
            .mode
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
            outbox: targets,
            ..Default::default()
        };
        ids.push(store.add_diagnosis_with(&d, follow).await?);
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
