//! `/ui/modes`: the failure modes of the store's runs, per system ([`crate::serve::modes`]).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use super::render::{error_page, page, store_error, QueryOf};
use crate::serve::modes::{from_store, ModesError, ModesQuery};
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
