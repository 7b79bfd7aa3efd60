//! `/ui/modes`: the failure modes of the store's runs, per system ([`crate::serve::modes`]), each
//! with a "Propose a fix" button ([`crate::serve::propose`]) and its page `/ui/proposals/{id}`.

use std::sync::Arc;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maslens_core::improve::{FixProposal, ImproveReport};
use maslens_store::diagnosis::ReportKind;
use minijinja::context;
use serde_json::{json, Value};

use super::render::{error_page, page, store_error, QueryOf};
use super::session::posted_form;
use crate::serve::modes::{from_store, ModesError, ModesQuery};
use crate::serve::pipeline::writeback_targets;
use crate::serve::propose::{ProposeError, ProposeRequest};
use crate::serve::AppState;

pub(super) async fn modes(
    State(state): State<Arc<AppState>>,
    query: QueryOf<ModesQuery>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e.body_text()),
    };
    let (report, facets) = tokio::join!(from_store(&state.store, &query), state.store.facets());
    let report = match report {
        Ok(r) => r,
        Err(ModesError::Invalid(m)) => return error_page(&state, StatusCode::BAD_REQUEST, m),
        Err(ModesError::Store(e)) => return store_error(&state, e),
    };
    let systems = match facets {
        Ok(f) => f.systems,
        Err(e) => return store_error(&state, e),
    };
    let params = context! {
        system => query.system.clone().unwrap_or_default(),
        outcome => query.outcome.clone().unwrap_or_else(|| "failure".into()),
        similarity => query.similarity.unwrap_or(report.options.similarity),
        gold => query.gold,
    };
    page(
        &state,
        "modes.html.j2",
        context! { title => "Failure modes", nav => "modes", report, systems, params },
    )
}

/// The form of each mode's "Propose a fix" button.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(super) struct ProposeForm {
    system: String,
    mode: String,
    outcome: String,
    similarity: String,
}

/// `POST /ui/modes/propose`: propose a fix for one mode, then show it (`/ui/proposals/{id}`).
pub(super) async fn propose(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<ProposeForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match posted_form(&state, &headers, form) {
        Ok(f) => f,
        Err(page) => return *page,
    };
    let similarity = match form.similarity.trim() {
        "" => None,
        s => match s.parse::<f64>() {
            Ok(x) => Some(x),
            Err(_) => {
                let m = format!("similarity: expected a number, got {s:?}");
                return error_page(&state, StatusCode::BAD_REQUEST, m);
            }
        },
    };
    let req = ProposeRequest {
        system: form.system,
        mode: form.mode,
        outcome: Some(form.outcome).filter(|o| !o.is_empty()),
        similarity,
    };
    match crate::serve::propose::propose(&state, &req).await {
        Ok(p) => match p.diagnoses.first() {
            Some(id) => Redirect::to(&format!("/ui/proposals/{id}")).into_response(),
            None => error_page(
                &state,
                StatusCode::NOT_FOUND,
                "the proposal has no example run",
            ),
        },
        Err(ProposeError::Invalid(m)) => error_page(&state, StatusCode::UNPROCESSABLE_ENTITY, m),
        Err(ProposeError::NotFound(m)) => error_page(&state, StatusCode::NOT_FOUND, m),
        Err(ProposeError::Model(m)) => error_page(&state, StatusCode::BAD_GATEWAY, m),
        Err(ProposeError::Store(e)) => store_error(&state, e),
    }
}

/// `/ui/proposals/{id}`: a proposal as stored (the `propose` diagnosis `id`).
pub(super) async fn proposal(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Response {
    let d = match state.store.diagnosis(&id).await {
        Ok(Some(d)) if d.body.method == "propose" => d,
        Ok(_) => return error_page(&state, StatusCode::NOT_FOUND, format!("no proposal {id:?}")),
        Err(e) => return store_error(&state, e),
    };
    let proposal: FixProposal = match serde_json::from_value(d.body.result["proposal"].clone()) {
        Ok(p) => p,
        Err(e) => {
            let m = format!("proposal {id:?}: field proposal: {e}");
            return error_page(&state, StatusCode::INTERNAL_SERVER_ERROR, m);
        }
    };
    let targets = writeback_targets(&state);
    let verification = match latest_loop(&state, &proposal.system).await {
        Ok(v) => v,
        Err(e) => return store_error(&state, e),
    };
    page(
        &state,
        "proposal.html.j2",
        context! { title => "A proposed fix", nav => "modes", proposal, targets, verification },
    )
}

/// The verification of the newest improvement loop stored for `system` (`maslens improve
/// --db`): held-out scores before and after each iteration's change with their interval, the
/// black-box baseline, the replay's statistics; `None` when no loop of the system is stored.
async fn latest_loop(
    state: &AppState,
    system: &str,
) -> Result<Option<Value>, maslens_store::StoreError> {
    let reports = state.store.reports(ReportKind::Improve).await?;
    let Some((id, _, created_ns, body)) = reports.into_iter().find(|r| r.1 == system) else {
        return Ok(None);
    };
    let report: ImproveReport = match serde_json::from_value(body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(%id, %e, "stored improve report does not parse");
            return Ok(Some(json!({"id": id, "unreadable": e.to_string()})));
        }
    };
    let iterations: Vec<Value> = report
        .iterations
        .iter()
        .map(|it| {
            json!({"index": it.index, "chosen": it.chosen, "repeated": it.repeated,
                         "acceptance": it.acceptance})
        })
        .collect();
    Ok(Some(json!({
        "id": id,
        "created_ns": created_ns,
        "model": report.model,
        "held_out_tasks": report.held_out_tasks,
        "level": report.level,
        "initial_score": report.initial_score,
        "final_score": report.final_score,
        "changed": report.changed(),
        "iterations": iterations,
        "baseline": report.baseline.as_ref().map(|b| json!({
            "final_score": b.final_score, "calls": b.calls, "budget_calls": b.budget_calls})),
        "replay": report.replay.as_ref().map(|r| json!({
            "stats": r.stats, "unsupported": r.unsupported, "kept": r.kept})),
        "stopped": report.stopped,
    })))
}
