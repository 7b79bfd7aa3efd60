//! Running a method from the UI: `POST /ui/actions` on one trace or on every trace a list
//! filter matches, then the batch's progress page (`/ui/jobs/{batch}`) and its live events.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use maslens_store::RunSummary;
use minijinja::context;
use serde::Deserialize;

use super::list::{some, ListParams, ACTION_MAX_RUNS};
use super::render::{error_page, page, plain, store_error};
use super::session::posted_form;
use crate::serve::pipeline::enqueue;
use crate::serve::{AppState, JobMethod};

/// `POST /ui/actions`: a method on one run or on every run the list's filter matches.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ActionForm {
    method: String,
    /// The Judge protocol of a locate or llm run (empty: the default, all-at-once).
    protocol: String,
    run: String,
    #[serde(flatten)]
    filter: ListParams,
}

pub(super) async fn actions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match posted_form(&state, &headers, form) {
        Ok(f) => f,
        Err(page) => return *page,
    };
    let Some(method) = JobMethod::parse(&form.method) else {
        return error_page(
            &state,
            StatusCode::BAD_REQUEST,
            format!(
                "method: expected {}, got {:?}",
                JobMethod::NAMES,
                form.method
            ),
        );
    };
    let params = match method.params(Some(&form.protocol)) {
        Ok(p) => p,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e),
    };
    let runs: Vec<RunSummary> = if let Some(run) = some(&form.run) {
        match state.store.run_summary(&run).await {
            Ok(Some(r)) => vec![r],
            Ok(None) => {
                return error_page(&state, StatusCode::NOT_FOUND, format!("no trace {run:?}"))
            }
            Err(e) => return store_error(&state, e),
        }
    } else {
        let mut filter = match form.filter.filter() {
            Ok(f) => f,
            Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e),
        };
        filter.before = None;
        filter.limit = Some(ACTION_MAX_RUNS);
        match state.store.list_runs(&filter).await {
            Ok(r) => r,
            Err(e) => return store_error(&state, e),
        }
    };
    let mut ids = Vec::new();
    for run in &runs {
        let Some(hash) = &run.trace_hash else {
            continue;
        };
        match enqueue(&state.store, &run.id, method, hash, &params).await {
            Ok(j) => ids.push(j.id),
            Err(e) => return store_error(&state, e),
        }
    }
    if ids.is_empty() {
        return error_page(
            &state,
            StatusCode::UNPROCESSABLE_ENTITY,
            "no assembled trace matches: nothing to run",
        );
    }
    let batch = maslens_store::new_id(&[&ids.join(",")]);
    if let Err(e) = state.store.add_to_batch(&batch, &ids).await {
        return store_error(&state, e);
    }
    tracing::info!(%batch, method = method.as_str(), jobs = ids.len(), "UI action");
    Redirect::to(&format!("/ui/jobs/{batch}")).into_response()
}

fn valid_batch(b: &str) -> bool {
    !b.is_empty() && b.len() <= 64 && b.bytes().all(|c| c.is_ascii_alphanumeric())
}

pub(super) async fn job(State(state): State<Arc<AppState>>, Path(batch): Path<String>) -> Response {
    if !valid_batch(&batch) {
        return error_page(&state, StatusCode::BAD_REQUEST, "bad batch id");
    }
    let progress = match state.store.batch_progress(&batch).await {
        Ok(p) => p,
        Err(e) => return store_error(&state, e),
    };
    if progress.total == 0 {
        return error_page(&state, StatusCode::NOT_FOUND, format!("no batch {batch:?}"));
    }
    let jobs = match state.store.batch_jobs(&batch).await {
        Ok(j) => j,
        Err(e) => return store_error(&state, e),
    };
    let finished = progress.queued + progress.running == 0;
    page(
        &state,
        "job.html.j2",
        context! { title => "Action", nav => "traces", batch, progress, jobs, finished },
    )
}

/// `GET /ui/jobs/{batch}/events`: `progress` events while the batch runs (read from the store,
/// so any server sharing it reports the same), then `done`.
pub(super) async fn job_events(
    State(state): State<Arc<AppState>>,
    Path(batch): Path<String>,
) -> Response {
    if !valid_batch(&batch) {
        return plain(StatusCode::BAD_REQUEST, "bad batch id".into());
    }
    // A batch that does not exist is a 404, not a stream that never ends.
    match state.store.batch_progress(&batch).await {
        Ok(p) if p.total == 0 => {
            return plain(StatusCode::NOT_FOUND, format!("no batch {batch}"));
        }
        Ok(_) => {}
        Err(e) => return plain(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
    let poll = Duration::from_millis(300);
    let stream = futures_util::stream::unfold(
        (state, batch, None::<String>, false),
        move |(state, batch, last, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let p = match state.store.batch_progress(&batch).await {
                    Ok(p) => p,
                    Err(e) => {
                        let ev = Event::default().event("failure").data(e.to_string());
                        return Some((
                            Ok::<_, std::convert::Infallible>(ev),
                            (state, batch, last, true),
                        ));
                    }
                };
                let data = serde_json::to_string(&p).unwrap_or_else(|_| "{}".into());
                let finished = p.total > 0 && p.queued + p.running == 0;
                if last.as_deref() != Some(data.as_str()) || finished {
                    let ev = Event::default()
                        .event(if finished { "done" } else { "progress" })
                        .data(data.clone());
                    return Some((Ok(ev), (state, batch, Some(data), finished)));
                }
                tokio::time::sleep(poll).await;
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
