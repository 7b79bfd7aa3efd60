//! The pages over one stored thing: a trace (`/ui/traces/{id}`), two of its diagnoses side by
//! side (`/compare`), credit reports and their optimizer history, evaluation reports.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maslens_store::diagnosis::ReportKind;
use minijinja::context;
use serde::Deserialize;
use serde_json::{json, Value};

use super::headers::{style_hash, StyleHash};
use super::list::some;
use super::render::{error_page, html_response, page, store_error, QueryOf};
use super::view;
use crate::serve::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct TraceParams {
    /// The diagnosis to highlight.
    d: String,
    /// Search terms to mark.
    q: String,
}

pub(super) async fn trace(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    query: QueryOf<TraceParams>,
) -> Response {
    let params = match query {
        Ok(Query(p)) => p,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e.body_text()),
    };
    let stored = match state.store.run(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return error_page(&state, StatusCode::NOT_FOUND, format!("no trace {id:?}")),
        Err(e) => return store_error(&state, e),
    };
    let diagnoses = match state.store.diagnoses(&id).await {
        Ok(d) => d,
        Err(e) => return store_error(&state, e),
    };
    let jobs = match state.store.jobs_of(&id).await {
        Ok(j) => j,
        Err(e) => return store_error(&state, e),
    };
    // Building the page (search marks over every step) is CPU work: off the async workers, so
    // a large trace never holds up other requests.
    let st = state.clone();
    let built = tokio::task::spawn_blocking(move || {
        trace_page(&st, &id, stored, &diagnoses, jobs, &params)
    })
    .await;
    built.unwrap_or_else(|e| {
        error_page(
            &state,
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("building the trace page failed: {e}"),
        )
    })
}

fn trace_page(
    state: &AppState,
    id: &str,
    stored: maslens_store::StoredRun,
    diagnoses: &[maslens_store::Diagnosis],
    jobs: Vec<maslens_store::Job>,
    params: &TraceParams,
) -> Response {
    let Some(tr) = &stored.trace else {
        return page(
            state,
            "trace.html.j2",
            context! { title => format!("Trace {id}"), run => stored.summary, pending => true, jobs },
        );
    };
    let v = view::trace_view(
        tr,
        &stored.summary,
        diagnoses,
        some(&params.d).as_deref(),
        &params.q,
    );
    page(
        state,
        "trace.html.j2",
        context! {
            title => format!("Trace {id}"),
            nav => "traces",
            run => stored.summary,
            task => tr.task,
            ground_truth => tr.ground_truth,
            v,
            jobs,
            q => params.q,
        },
    )
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct CompareParams {
    a: String,
    b: String,
}

pub(super) async fn compare(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    query: QueryOf<CompareParams>,
) -> Response {
    let params = match query {
        Ok(Query(p)) => p,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e.body_text()),
    };
    let summary = match state.store.run_summary(&id).await {
        Ok(Some(s)) => s,
        Ok(None) => return error_page(&state, StatusCode::NOT_FOUND, format!("no trace {id:?}")),
        Err(e) => return store_error(&state, e),
    };
    let diagnoses = match state.store.diagnoses(&id).await {
        Ok(d) => d,
        Err(e) => return store_error(&state, e),
    };
    let views: Vec<view::DiagnosisView> = diagnoses
        .iter()
        .map(|d| view::diagnosis_view(d, summary.trace_hash.as_deref()))
        .collect();
    let pick = |want: &str, fallback: usize| -> Option<view::DiagnosisView> {
        match some(want) {
            Some(w) => views.iter().find(|d| d.id == w).cloned(),
            None => views.iter().rev().nth(fallback).cloned(),
        }
    };
    let (Some(a), Some(b)) = (pick(&params.a, 1), pick(&params.b, 0)) else {
        return error_page(
            &state,
            StatusCode::NOT_FOUND,
            format!(
                "trace {id:?} has {} diagnoses; comparing needs two (or the ids given do not belong to it)",
                views.len()
            ),
        );
    };
    let rows = view::compare_rows(&a, &b);
    page(
        &state,
        "compare.html.j2",
        context! { title => format!("Compare diagnoses of {id}"), nav => "traces", run => summary, a, b, rows, all => views },
    )
}

/// What kind of credit report a stored body is.
fn credit_kind(body: &Value) -> &'static str {
    if body.get("table").is_some() {
        "credit"
    } else if body.get("seeds").is_some() {
        "optimize"
    } else {
        "unknown"
    }
}

pub(super) async fn credit_list(State(state): State<Arc<AppState>>) -> Response {
    match state.store.reports(ReportKind::Credit).await {
        Ok(list) => {
            let items: Vec<Value> = list
                .iter()
                .map(|(id, name, created, body)| {
                    json!({"id": id, "name": name, "created_ns": created, "kind": credit_kind(body),
                           "model": body.get("model"), "traces": body.get("traces").and_then(Value::as_array).map(Vec::len)})
                })
                .collect();
            page(
                &state,
                "credit_list.html.j2",
                context! { title => "Credit", nav => "credit", items },
            )
        }
        Err(e) => store_error(&state, e),
    }
}

pub(super) async fn credit(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let (name, created, run_id, body) = match state.store.report(ReportKind::Credit, &id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error_page(
                &state,
                StatusCode::NOT_FOUND,
                format!("no credit report {id:?}"),
            )
        }
        Err(e) => return store_error(&state, e),
    };
    let kind = credit_kind(&body);
    let history = view::optimizer_history(&body);
    // A credit run's corpus table; for an optimizer run, the credit of its last iteration.
    let (heat, heat_caption) = match body.get("table").and_then(view::heatmap) {
        Some(h) => (Some(h), "Credit over all traces".to_string()),
        None => match history.iter().rev().find(|h| h.credit.is_some()) {
            Some(h) => (
                h.credit.clone(),
                format!(
                    "Credit at the last iteration (seed {}, iteration {})",
                    h.seed, h.iteration
                ),
            ),
            None => (None, String::new()),
        },
    };
    // Per-trace credit (a credit run's `traces`): a table each, and one table per system when
    // the traces come from several (the run's own table would mix their roles).
    let credits = view::trace_credits(&body);
    let systems = view::system_heatmaps(&credits);
    let per_trace: Vec<Value> = credits
        .iter()
        .filter_map(|c| Some(json!({"id": c.trace_id, "table": view::trace_heatmap(c)?})))
        .collect();
    page(
        &state,
        "credit.html.j2",
        context! {
            title => name.clone(), nav => "credit", id, name, created_ns => created, run_id, kind,
            model => body.get("model").cloned(), lambda => body.get("lambda").cloned(),
            heat, heat_caption, history, per_trace, systems,
            summary => body.get("summary").cloned(),
            errors => body.get("errors").cloned(),
        },
    )
}

pub(super) async fn evals(State(state): State<Arc<AppState>>) -> Response {
    match state.store.reports(ReportKind::Eval).await {
        Ok(list) => {
            let items: Vec<Value> = list
                .iter()
                .map(|(id, name, created, body)| {
                    json!({"id": id, "name": name, "created_ns": created,
                           "title": body.get("title"), "method": body.get("method"),
                           "model": body.get("model"), "dataset": body.get("dataset"),
                           "cases": body.get("cases"),
                           "agent_accuracy": body.get("agent_accuracy").and_then(|a| a.get("value")),
                           "step_accuracy": body.get("step_accuracy").and_then(|a| a.get("value"))})
                })
                .collect();
            page(
                &state,
                "evals.html.j2",
                context! { title => "Evaluations", nav => "evals", items },
            )
        }
        Err(e) => store_error(&state, e),
    }
}

/// One eval report: the report page `maslens eval --html` writes, served as is. Its stylesheet
/// is inline, so the policy allows exactly that style block by its hash.
pub(super) async fn eval(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let (_, _, _, body) = match state.store.report(ReportKind::Eval, &id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error_page(
                &state,
                StatusCode::NOT_FOUND,
                format!("no eval report {id:?}"),
            )
        }
        Err(e) => return store_error(&state, e),
    };
    let report: maslens_eval::report::LocateReport = match serde_json::from_value(body) {
        Ok(r) => r,
        Err(e) => {
            return error_page(
                &state,
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("eval report {id}: not a report this version reads: {e}"),
            )
        }
    };
    let html = maslens_eval::html::render(&report);
    let hash = style_hash(&html);
    let mut res = html_response(html);
    if let Some(hash) = hash {
        res.extensions_mut().insert(StyleHash(hash));
    }
    res
}
