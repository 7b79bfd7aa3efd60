//! The JSON API: runs (list with filters, one with its diagnoses and jobs, import), jobs (start a
//! method on a run or on every run a filter matches, poll), status, failure modes (serve/modes.rs) and a fix proposed for one (serve/propose.rs). Errors are
//! `{"error": "..."}` with a 4xx/5xx status.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use maslens_store::RunFilter;
use serde_json::{json, Value};

use super::pipeline::enqueue;
use super::{AppState, JobMethod};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/runs", get(list_runs).post(put_run))
        .route("/api/runs/{id}", get(get_run))
        .route("/api/jobs", post(start_jobs))
        .route("/api/jobs/{id}", get(get_job))
        .route("/api/status", get(status))
        .route("/api/modes", get(super::modes::api))
        .route("/api/modes/propose", post(super::propose::api))
}

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

pub(super) fn store_error(e: maslens_store::StoreError) -> Response {
    tracing::warn!(%e, "store");
    error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// Query parameters of `GET /api/runs` (`before` is the `next` cursor of the previous page).
#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ListQuery {
    /// Full-text search over step content: every word in one step; `"exact words"` side by
    /// side, in order; `a OR b` for either (`OR` in capitals).
    pub q: Option<String>,
    pub outcome: Option<String>,
    pub system: Option<String>,
    pub source: Option<String>,
    pub state: Option<String>,
    pub located_agent: Option<String>,
    pub agent: Option<String>,
    pub min_risk: Option<f64>,
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
    pub before: Option<String>,
    pub limit: Option<i64>,
}

/// A keyset cursor `NS:ID` (the last row of the previous page, as `next` gives it).
pub fn parse_cursor(c: &str) -> Result<(i64, String), String> {
    let (ns, id) = c
        .split_once(':')
        .ok_or_else(|| format!("before: expected NS:ID, got {c:?}"))?;
    let ns = ns
        .parse::<i64>()
        .map_err(|_| format!("before: {ns:?} is not a number"))?;
    if id.is_empty() || id.len() > 512 {
        return Err(format!("before: {id:?} is not a run id"));
    }
    Ok((ns, id.to_string()))
}

impl ListQuery {
    fn filter(&self) -> Result<RunFilter, String> {
        let before = self.before.as_deref().map(parse_cursor).transpose()?;
        Ok(RunFilter {
            q: self.q.clone(),
            outcome: self.outcome.clone(),
            system: self.system.clone(),
            source: self.source.clone(),
            state: self.state.clone(),
            located_agent: self.located_agent.clone(),
            agent: self.agent.clone(),
            min_risk: self.min_risk,
            since_ns: self.since_ns,
            until_ns: self.until_ns,
            before,
            limit: self.limit,
        })
    }
}

async fn list_runs(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let filter = match query.filter() {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match state.store.list_runs(&filter).await {
        Ok(runs) => {
            let limit = filter.limit.unwrap_or(50).clamp(1, 1000);
            let next = (runs.len() as i64 == limit)
                .then(|| runs.last().map(|r| format!("{}:{}", r.received_ns, r.id)))
                .flatten();
            Json(json!({"runs": runs, "next": next})).into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn get_run(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let run = match state.store.run(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("no run {id:?}")),
        Err(e) => return store_error(e),
    };
    let diagnoses = match state.store.diagnoses(&id).await {
        Ok(d) => d,
        Err(e) => return store_error(e),
    };
    let jobs = match state.store.jobs_of(&id).await {
        Ok(j) => j,
        Err(e) => return store_error(e),
    };
    Json(json!({
        "run": run.summary,
        "trace_hash": run.summary.trace_hash,
        "trace": run.trace,
        "diagnoses": diagnoses,
        "jobs": jobs,
    }))
    .into_response()
}

/// Import a trace (the maslens trace format) as a run.
async fn put_run(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    let trace: maslens_trace::Trace = match serde_json::from_slice(&body) {
        Ok(t) => t,
        Err(e) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("the body is not a maslens trace: {e}"),
            )
        }
    };
    match state.store.put_trace(&trace).await {
        Ok(hash) => (
            StatusCode::CREATED,
            Json(json!({"id": trace.id, "trace_hash": hash})),
        )
            .into_response(),
        Err(e @ maslens_store::StoreError::Clash(_)) => error(StatusCode::CONFLICT, e.to_string()),
        // An id the store does not take: the request is wrong, a retry cannot help.
        Err(e @ maslens_store::StoreError::Invalid(_)) => {
            error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
        }
        Err(e) => store_error(e),
    }
}

/// `POST /api/jobs`: a method on one run (`run`) or on every run a filter matches (`filter`).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartJobs {
    /// `locate` (the default localizer, stacked, as `maslens locate`; alias `stacked`), `llm` (the
    /// LLM pipeline alone), `prior` or `scan`.
    pub method: String,
    /// The Judge protocol of a `locate` or `llm` job, as `maslens locate --protocol`:
    /// `all-at-once` (the default), `step-by-step`, `binary-search`, `a2p`, `taxonomy` or `echo`.
    pub protocol: Option<String>,
    pub run: Option<String>,
    /// The same fields as `GET /api/runs`' query (at most 1,000 runs).
    pub filter: Option<Value>,
}

async fn start_jobs(
    State(state): State<Arc<AppState>>,
    body: Result<Json<StartJobs>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Json(req) = match body {
        Ok(b) => b,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.body_text()),
    };
    let Some(method) = JobMethod::parse(&req.method) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "method: expected {}, got {:?}",
                JobMethod::NAMES,
                req.method
            ),
        );
    };
    let params = match method.params(req.protocol.as_deref()) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let runs: Vec<maslens_store::RunSummary> = match (&req.run, &req.filter) {
        (Some(run), None) => match state.store.run_summary(run).await {
            Ok(Some(r)) => vec![r],
            Ok(None) => return error(StatusCode::NOT_FOUND, format!("no run {run:?}")),
            Err(e) => return store_error(e),
        },
        (None, Some(f)) => {
            let q: ListQuery = match serde_json::from_value(f.clone()) {
                Ok(q) => q,
                Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, format!("filter: {e}")),
            };
            let mut filter = match q.filter() {
                Ok(f) => f,
                Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e),
            };
            filter.limit = Some(filter.limit.unwrap_or(1000));
            match state.store.list_runs(&filter).await {
                Ok(r) => r,
                Err(e) => return store_error(e),
            }
        }
        _ => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "give exactly one of `run` and `filter`",
            )
        }
    };
    let mut jobs = Vec::new();
    for run in runs {
        // A run has a hash once its trace is stored (assembled or imported).
        let Some(hash) = &run.trace_hash else {
            return error(
                StatusCode::NOT_FOUND,
                format!("no assembled run {:?}", run.id),
            );
        };
        match enqueue(&state.store, &run.id, method, hash, &params).await {
            Ok(j) => jobs.push(j),
            Err(e) => return store_error(e),
        }
    }
    (StatusCode::ACCEPTED, Json(json!({"jobs": jobs}))).into_response()
}

async fn get_job(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match state.store.job(&id).await {
        Ok(Some(j)) => Json(j).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no job {id:?}")),
        Err(e) => store_error(e),
    }
}

async fn status(State(state): State<Arc<AppState>>) -> Response {
    let runs = state.store.count_runs().await;
    let jobs = state.store.job_counts().await;
    let outbox = state.store.outbox_counts().await;
    match (runs, jobs, outbox) {
        (Ok(runs), Ok(jobs), Ok(outbox)) => Json(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "backend": format!("{:?}", state.store.backend()).to_lowercase(),
            "runs": runs,
            "jobs": jobs.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
            "outbox": outbox
                .into_iter()
                .map(|(t, s, n)| json!({"target": t, "state": s, "count": n}))
                .collect::<Vec<_>>(),
            "policy": state.config.policy,
            "csp_reports": state.csp_reports.load(std::sync::atomic::Ordering::Relaxed),
            "model": state.config.model,
        }))
        .into_response(),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => store_error(e),
    }
}
