//! Failure modes from the store (`GET /api/modes`, the UI's `/ui/modes`, `maslens modes --db`):
//! the store's failed runs ([`maslens_store::Store::failed_runs`]) grouped by
//! [`maslens_core::modes::group`].

use std::collections::BTreeMap;
use std::sync::Arc;

use super::api::{error, store_error};
use super::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use maslens_core::improve;
use maslens_core::modes::{self, FailureCase, Mode, ModesOptions, ModesReport};
use maslens_store::{FailedRun, FailedRunFilter, Store, StoreError};
use maslens_trace::Trace;

/// Which runs and how to group them (query parameters of `GET /api/modes` and `/ui/modes`).
#[derive(Debug, Clone, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ModesQuery {
    /// Only this system's runs (`service.name`, or the import format).
    pub system: Option<String>,
    /// `failure` (default), `unknown`, `success`, or `any` (every run with a localization).
    pub outcome: Option<String>,
    /// Score the modes against the traces' gold decisive agents (loads every trace).
    pub gold: bool,
    /// Cosine threshold of the reason clustering, 0..1 (default 0.3; higher splits more).
    pub similarity: Option<f64>,
    /// Example runs per mode (default 3, at most 50).
    pub examples: Option<usize>,
    /// Runs read at most, oldest first (default 10,000).
    pub limit: Option<i64>,
}

/// Why modes could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ModesError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ModesQuery {
    /// The grouping options, checked ([`ModesOptions::checked`]).
    pub fn options(&self) -> Result<ModesOptions, ModesError> {
        let default = ModesOptions::default();
        ModesOptions {
            similarity: self.similarity.unwrap_or(default.similarity),
            examples: self.examples.unwrap_or(default.examples),
            ..default
        }
        .checked()
        .map_err(|e| ModesError::Invalid(e.to_string()))
    }

    fn filter(&self) -> FailedRunFilter {
        let default = FailedRunFilter::default();
        FailedRunFilter {
            system: self.system.clone().filter(|s| !s.is_empty()),
            outcome: self.outcome.clone().unwrap_or(default.outcome),
            gold: self.gold,
            limit: self.limit.unwrap_or(default.limit),
        }
    }
}

/// The modes of the runs `query` selects, each marked with whether a fix can be proposed for it
/// ([`improve::propose::mark`], from the stored traces of the located modes' examples).
pub async fn from_store(store: &Store, query: &ModesQuery) -> Result<ModesReport, ModesError> {
    let mut report = grouped(store, query).await?;
    let located = report
        .systems
        .iter()
        .flat_map(|s| &s.modes)
        .filter(|m| m.agent.is_some());
    let traces = example_traces(store, located).await?;
    improve::propose::mark(&mut report, |run| traces.get(run));
    Ok(report)
}

/// The modes of the runs `query` selects, not yet marked (what a proposal for one of them
/// regroups: it checks its own mode).
pub async fn grouped(store: &Store, query: &ModesQuery) -> Result<ModesReport, ModesError> {
    let options = query.options()?;
    let filter = query.filter();
    let (runs, more) = store.failed_runs(&filter).await.map_err(|e| match e {
        StoreError::Invalid(m) => ModesError::Invalid(m),
        e => ModesError::Store(e),
    })?;
    let cases: Vec<FailureCase> = runs.into_iter().map(case).collect();
    let mut report = modes::group(&cases, options);
    if more {
        report.notes.push(format!(
            "only the oldest {} runs were read (limit); raise it to read more",
            filter.limit
        ));
    }
    Ok(report)
}

/// The stored traces of the example runs of `modes`, by run id.
pub async fn example_traces<'a>(
    store: &Store,
    modes: impl Iterator<Item = &'a Mode>,
) -> Result<BTreeMap<String, Trace>, StoreError> {
    let mut traces = BTreeMap::new();
    for example in modes.flat_map(|m| &m.examples) {
        if traces.contains_key(&example.run) {
            continue;
        }
        if let Some(trace) = store.run(&example.run).await?.and_then(|r| r.trace) {
            traces.insert(example.run.clone(), trace);
        }
    }
    Ok(traces)
}

fn case(run: FailedRun) -> FailureCase {
    let trace = run.trace.as_ref();
    FailureCase {
        gold_agent: trace.and_then(|t| t.gold()).and_then(|g| g.agent),
        in_sample: trace.is_some_and(maslens_core::in_sample::trained_on),
        run: run.run,
        system: run.system,
        time_ns: run.time_ns,
        agent: run.agent,
        step: run.step.and_then(|s| usize::try_from(s).ok()),
        failure_types: run.failure_types,
        reason: run.reason,
    }
}

/// `GET /api/modes`: the [`ModesReport`] as JSON.
pub(super) async fn api(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ModesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    match from_store(&state.store, &query).await {
        Ok(report) => Json(report).into_response(),
        Err(ModesError::Invalid(m)) => error(StatusCode::BAD_REQUEST, m),
        Err(ModesError::Store(e)) => store_error(e),
    }
}
