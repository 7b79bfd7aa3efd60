//! The trace list (`/ui/traces`): its filters as the GET form sends them, keyset pages, capped
//! counts and where a search matched.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maslens_store::{RunFilter, RunSummary};
use minijinja::context;
use serde::Deserialize;

use super::render::{error_page, page, store_error, urlencode, QueryOf};
use super::view;
use crate::serve::AppState;

/// Rows per list page.
pub const PAGE_ROWS: i64 = 50;
/// The list counts matches up to this many ("More than 1,000"): a count walks every match, and
/// a common word with another filter at 10,000 cost 0.3-0.9 s at 100,000 runs.
const COUNT_CAP: i64 = 1_000;
/// With a search, each counted run is a full-text lookup: count fewer ("More than 200").
const COUNT_CAP_SEARCH: i64 = 200;
/// Runs a filtered action may start.
pub(super) const ACTION_MAX_RUNS: i64 = 1000;

/// The list's filters, as the GET form sends them (empty fields mean "any").
#[derive(Debug, Default, Clone, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ListParams {
    pub q: String,
    pub system: String,
    pub outcome: String,
    pub agent: String,
    pub located: String,
    pub state: String,
    pub min_risk: String,
    /// `YYYY-MM-DD` (UTC), inclusive.
    pub since: String,
    /// `YYYY-MM-DD` (UTC), inclusive.
    pub until: String,
    /// Keyset cursor `NS:ID` (the last row of the previous page).
    pub before: String,
}

/// A form field trimmed, or `None` when empty.
pub(super) fn some(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_string())
}

impl ListParams {
    /// The store filter, or which field is wrong.
    pub fn filter(&self) -> Result<RunFilter, String> {
        let min_risk = match some(&self.min_risk) {
            None => None,
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Some(x),
                _ => return Err(format!("min_risk: {v:?} is not a number")),
            },
        };
        let date = |field: &str, v: &str| -> Result<Option<i64>, String> {
            match some(v) {
                None => Ok(None),
                Some(d) => view::parse_date(&d)
                    .map(Some)
                    .ok_or_else(|| format!("{field}: expected YYYY-MM-DD, got {d:?}")),
            }
        };
        let since_ns = date("since", &self.since)?;
        let until_ns = date("until", &self.until)?.map(|d| d.saturating_add(86_400_000_000_000));
        let before = some(&self.before)
            .as_deref()
            .map(crate::serve::api::parse_cursor)
            .transpose()?;
        let outcome = some(&self.outcome);
        if let Some(o) = &outcome {
            if !["success", "failure", "unknown"].contains(&o.as_str()) {
                return Err(format!(
                    "outcome: expected success, failure or unknown, got {o:?}"
                ));
            }
        }
        Ok(RunFilter {
            q: some(&self.q),
            system: some(&self.system),
            outcome,
            agent: some(&self.agent),
            located_agent: some(&self.located),
            state: some(&self.state),
            min_risk,
            since_ns,
            until_ns,
            before,
            ..RunFilter::default()
        })
    }

    /// This filter as a query string, without the cursor (links to the next page add it).
    pub fn query(&self) -> String {
        let pairs = [
            ("q", &self.q),
            ("system", &self.system),
            ("outcome", &self.outcome),
            ("agent", &self.agent),
            ("located", &self.located),
            ("state", &self.state),
            ("min_risk", &self.min_risk),
            ("since", &self.since),
            ("until", &self.until),
        ];
        pairs
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}={}", urlencode(v.trim())))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// A list row.
#[derive(Debug, serde::Serialize)]
struct Row {
    #[serde(flatten)]
    run: RunSummary,
    risk_bucket: u8,
    /// `(step, agent)` where the search matched.
    matches: Vec<(i64, Option<String>)>,
}

pub(super) async fn traces(
    State(state): State<Arc<AppState>>,
    query: QueryOf<ListParams>,
) -> Response {
    let params = match query {
        Ok(Query(p)) => p,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e.body_text()),
    };
    let mut filter = match params.filter() {
        Ok(f) => f,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e),
    };
    filter.limit = Some(PAGE_ROWS + 1);
    // The page, the count and the filter menus are independent reads: run them side by side
    // (the pool has several connections; on a common search word the count is the slow one).
    let (runs, counted, facets) = tokio::join!(
        state.store.list_runs(&filter),
        // The count ignores the cursor and the page size: every match, not this page's.
        state.store.count_runs_capped(
            &filter,
            if filter.q.is_some() {
                COUNT_CAP_SEARCH
            } else {
                COUNT_CAP
            }
        ),
        state.store.facets(),
    );
    let (mut runs, (count, capped), facets) = match (runs, counted, facets) {
        (Ok(r), Ok(c), Ok(f)) => (r, c, f),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return store_error(&state, e),
    };
    let more = runs.len() as i64 > PAGE_ROWS;
    runs.truncate(PAGE_ROWS as usize);
    let next = more
        .then(|| runs.last().map(|r| format!("{}:{}", r.received_ns, r.id)))
        .flatten();
    // Where each listed run matched: one small full-text probe per row, side by side.
    let matches: Vec<Vec<(i64, Option<String>)>> = match &filter.q {
        Some(q) => {
            let probes = runs.iter().map(|r| state.store.step_matches(&r.id, q, 3));
            match futures_util::future::try_join_all(probes).await {
                Ok(all) => all
                    .into_iter()
                    .map(|m| m.into_iter().map(|m| (m.step, m.agent)).collect())
                    .collect(),
                Err(e) => return store_error(&state, e),
            }
        }
        None => vec![Vec::new(); runs.len()],
    };
    let rows: Vec<Row> = runs
        .into_iter()
        .zip(matches)
        .map(|(run, matches)| Row {
            risk_bucket: view::bucket(run.risk.unwrap_or(0.0)),
            run,
            matches,
        })
        .collect();
    let query = params.query();
    page(
        &state,
        "traces.html.j2",
        context! {
            title => "Traces",
            nav => "traces",
            rows,
            params,
            query,
            next,
            first_page => filter.before.is_some(),
            count,
            capped,
            facets,
            action_max => ACTION_MAX_RUNS,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_params_validate_every_field() {
        let ok = ListParams {
            q: " paris ".into(),
            outcome: "failure".into(),
            min_risk: "0.5".into(),
            since: "2026-11-01".into(),
            until: "2026-11-30".into(),
            before: "17:run-a".into(),
            ..ListParams::default()
        };
        let f = ok.filter().expect("filter");
        assert_eq!(f.q.as_deref(), Some("paris"));
        assert_eq!(f.before, Some((17, "run-a".into())));
        assert!(f.until_ns > f.since_ns);
        for (bad, field) in [
            (
                ListParams {
                    min_risk: "x".into(),
                    ..ListParams::default()
                },
                "min_risk",
            ),
            (
                ListParams {
                    min_risk: "NaN".into(),
                    ..ListParams::default()
                },
                "min_risk",
            ),
            (
                ListParams {
                    since: "yesterday".into(),
                    ..ListParams::default()
                },
                "since",
            ),
            (
                ListParams {
                    before: "nocolon".into(),
                    ..ListParams::default()
                },
                "before",
            ),
            (
                ListParams {
                    outcome: "<b>".into(),
                    ..ListParams::default()
                },
                "outcome",
            ),
        ] {
            let e = bad.filter().expect_err("rejected");
            assert!(e.starts_with(field), "{e}");
        }
        assert_eq!(
            ok.query(),
            "q=paris&outcome=failure&min_risk=0.5&since=2026-11-01&until=2026-11-30"
        );
    }
}
