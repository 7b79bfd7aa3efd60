//! The web UI of `maslens serve`: server-rendered pages from the store (minijinja templates in
//! `templates/ui/`, one stylesheet and one script in `static/`, no build step).
//!
//! - `/ui/traces`: the list, with filters, full-text search over step content and keyset pages;
//! - `/ui/traces/{id}`: agent swimlanes, the decisive step with its rationale, each Evaluator's
//!   vote, the prior's distribution, implicit failures on their steps, OpenTelemetry ids;
//! - `/ui/traces/{id}/compare`: two diagnoses side by side;
//! - `/ui/credit`, `/ui/evals`: credit heat maps with optimizer history, evaluation reports;
//! - `POST /ui/actions` runs a method on a trace or on a filtered set; `/ui/jobs/{batch}` shows
//!   its progress, live over server-sent events.
//!
//! Trace content is untrusted. Every string goes through minijinja's HTML escaping; no markup is
//! built in Rust; step content is shown as text (markdown is never rendered); a strict
//! Content-Security-Policy (`script-src 'self'`, no inline script or style) is on every page and
//! violations are reported to `/ui/csp-report` and counted in `/api/status`.

pub mod assets;
pub mod view;

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::extract::{Form, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maslens_store::diagnosis::ReportKind;
use maslens_store::{RunFilter, RunSummary};
use minijinja::{context, Environment};
use serde::Deserialize;
use serde_json::{json, Value};

use super::pipeline::enqueue;
use super::{AppState, JobMethod};

/// The policy of every UI page: our own script and stylesheet only, nothing inline, no
/// framing, forms post only here; violations are reported.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'; report-uri /ui/csp-report";

/// Rows per list page.
pub const PAGE_ROWS: i64 = 50;
/// The list counts matches up to this many ("More than 1,000"): a count walks every match, and
/// a common word with another filter at 10,000 cost 0.3-0.9 s at 100,000 runs.
const COUNT_CAP: i64 = 1_000;
/// With a search, each counted run is a full-text lookup: count fewer ("More than 200").
const COUNT_CAP_SEARCH: i64 = 200;
/// Runs a filtered action may start.
const ACTION_MAX_RUNS: i64 = 1000;

const TEMPLATES: &[(&str, &str)] = &[
    (
        "base.html.j2",
        include_str!("../../../templates/ui/base.html.j2"),
    ),
    (
        "macros.html.j2",
        include_str!("../../../templates/ui/macros.html.j2"),
    ),
    (
        "traces.html.j2",
        include_str!("../../../templates/ui/traces.html.j2"),
    ),
    (
        "trace.html.j2",
        include_str!("../../../templates/ui/trace.html.j2"),
    ),
    (
        "compare.html.j2",
        include_str!("../../../templates/ui/compare.html.j2"),
    ),
    (
        "credit_list.html.j2",
        include_str!("../../../templates/ui/credit_list.html.j2"),
    ),
    (
        "credit.html.j2",
        include_str!("../../../templates/ui/credit.html.j2"),
    ),
    (
        "evals.html.j2",
        include_str!("../../../templates/ui/evals.html.j2"),
    ),
    (
        "job.html.j2",
        include_str!("../../../templates/ui/job.html.j2"),
    ),
    (
        "login.html.j2",
        include_str!("../../../templates/ui/login.html.j2"),
    ),
    (
        "error.html.j2",
        include_str!("../../../templates/ui/error.html.j2"),
    ),
];

fn build_env() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
    env.add_function("static_url", |name: String| assets::url(&name));
    // A path segment or query value: everything but RFC 3986 unreserved characters encoded.
    env.add_filter("urlencode", |s: String| urlencode(&s));
    env.add_filter("time", |ns: i64| view::format_ns(ns));
    env.add_filter("num", |v: Option<f64>, digits: Option<usize>| match v {
        Some(x) => format!("{x:.*}", digits.unwrap_or(3)),
        None => "—".to_string(),
    });
    env.add_filter("short", |s: String, n: Option<usize>| {
        let n = n.unwrap_or(12);
        if s.chars().count() > n {
            s.chars().take(n).collect::<String>() + "…"
        } else {
            s
        }
    });
    env.add_filter("thousands", |n: i64| {
        let s = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 {
            format!("-{out}")
        } else {
            out
        }
    });
    for (name, src) in TEMPLATES {
        env.add_template(name, src)?;
    }
    Ok(env)
}

static ENV: LazyLock<Result<Environment<'static>, String>> =
    LazyLock::new(|| build_env().map_err(|e| format!("{e:#}")));

/// Check at startup that every template compiles (a bug here is ours, not the user's).
pub fn check_templates() -> Result<(), String> {
    ENV.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The UI's routes (auth is applied by the caller; see [`public`] for what needs none).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/traces") }))
        .route("/ui", get(|| async { Redirect::to("/ui/traces") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/traces") }))
        .route("/ui/traces", get(traces))
        .route("/ui/traces/{id}", get(trace))
        .route("/ui/traces/{id}/compare", get(compare))
        .route("/ui/credit", get(credit_list))
        .route("/ui/credit/{id}", get(credit))
        .route("/ui/evals", get(evals))
        .route("/ui/evals/{id}", get(eval))
        .route("/ui/actions", post(actions))
        .route("/ui/jobs/{batch}", get(job))
        .route("/ui/jobs/{batch}/events", get(job_events))
        .route("/ui/csp-report", post(csp_report))
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/static/{file}", get(assets::serve))
        .route("/favicon.ico", get(assets::favicon))
}

/// Paths that need no credentials: the login form, static files, the CSP report sink.
pub fn public(path: &str) -> bool {
    path == "/ui/login"
        || path.starts_with("/ui/static/")
        || path == "/ui/csp-report"
        || path == "/favicon.ico"
}

/// Security headers on every UI response (pages and assets).
pub fn secure(mut res: Response, style_hash: Option<&str>) -> Response {
    let h = res.headers_mut();
    let csp = match style_hash {
        Some(hash) => CSP.replace("style-src 'self'", &format!("style-src 'self' '{hash}'")),
        None => CSP.to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// Render a page (200) or the error page.
fn page(state: &AppState, name: &str, ctx: minijinja::Value) -> Response {
    let env = match ENV.as_ref() {
        Ok(e) => e,
        Err(e) => return plain(StatusCode::INTERNAL_SERVER_ERROR, e.clone()),
    };
    let ctx = context! { auth => state.config.token.is_some(), ..ctx };
    match env.get_template(name).and_then(|t| t.render(ctx)) {
        Ok(html) => secure(
            ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
            None,
        ),
        Err(e) => {
            tracing::error!(template = name, error = %format!("{e:#}"), "UI template");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("template {name}: {e}"),
            )
        }
    }
}

fn plain(status: StatusCode, msg: String) -> Response {
    secure((status, msg).into_response(), None)
}

/// The error page with a status.
fn error_page(state: &AppState, status: StatusCode, message: impl Into<String>) -> Response {
    let mut r = page(
        state,
        "error.html.j2",
        context! { title => status.canonical_reason().unwrap_or("Error"), status => status.as_u16(), message => message.into() },
    );
    *r.status_mut() = status;
    r
}

fn store_error(state: &AppState, e: maslens_store::StoreError) -> Response {
    tracing::warn!(%e, "store");
    error_page(state, StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

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

fn some(s: &str) -> Option<String> {
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
            .map(super::api::parse_cursor)
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

/// Everything but RFC 3986 unreserved characters (`A-Z a-z 0-9 - _ . ~`) is encoded.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encode a path segment or query value.
pub fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
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

/// A page's query string, or the 400 page naming what is wrong (the JSON API's pattern).
type QueryOf<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

async fn traces(State(state): State<Arc<AppState>>, query: QueryOf<ListParams>) -> Response {
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

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TraceParams {
    /// The diagnosis to highlight.
    d: String,
    /// Search terms to mark.
    q: String,
}

async fn trace(
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
    let Some(tr) = &stored.trace else {
        return page(
            &state,
            "trace.html.j2",
            context! { title => format!("Trace {id}"), run => stored.summary, pending => true, jobs },
        );
    };
    let v = view::trace_view(
        tr,
        &stored.summary,
        &diagnoses,
        some(&params.d).as_deref(),
        &params.q,
    );
    page(
        &state,
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
struct CompareParams {
    a: String,
    b: String,
}

async fn compare(
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

async fn credit_list(State(state): State<Arc<AppState>>) -> Response {
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

async fn credit(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
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
    let per_trace: Vec<Value> = body
        .get("traces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            json!({"id": t.get("id").or_else(|| t.get("trace")), "table": t.get("table").and_then(view::heatmap)})
        })
        .collect();
    page(
        &state,
        "credit.html.j2",
        context! {
            title => name.clone(), nav => "credit", id, name, created_ns => created, run_id, kind,
            model => body.get("model").cloned(), lambda => body.get("lambda").cloned(),
            heat, heat_caption, history, per_trace,
            summary => body.get("summary").cloned(),
            errors => body.get("errors").cloned(),
        },
    )
}

async fn evals(State(state): State<Arc<AppState>>) -> Response {
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
async fn eval(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
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
    secure(
        ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        hash.as_deref(),
    )
}

/// `sha256-...` of the first inline `<style>` block (a CSP hash source).
fn style_hash(html: &str) -> Option<String> {
    use base64::Engine;
    use sha2::Digest;
    let start = html.find("<style>")? + "<style>".len();
    let end = start + html[start..].find("</style>")?;
    let digest = sha2::Sha256::digest(&html.as_bytes()[start..end]);
    Some(format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    ))
}

/// `POST /ui/actions`: a method on one run or on every run the list's filter matches.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ActionForm {
    method: String,
    run: String,
    #[serde(flatten)]
    filter: ListParams,
}

/// State-changing requests must come from our own pages (the session cookie is SameSite=Strict;
/// this also stops a cross-site form when no token is configured).
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return site == "same-origin" || site == "none";
    }
    match (
        headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()),
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
    ) {
        (Some(origin), Some(host)) => {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        }
        // Not a browser (no Origin): curl and tests; the token still applies.
        (None, _) => true,
        (Some(_), None) => false,
    }
}

async fn actions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    if !same_origin(&headers) {
        return error_page(&state, StatusCode::FORBIDDEN, "cross-site request refused");
    }
    let Form(form) = match form {
        Ok(f) => f,
        Err(e) => return error_page(&state, StatusCode::BAD_REQUEST, e.body_text()),
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
        match enqueue(&state.store, &run.id, method, hash, &json!({})).await {
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

async fn job(State(state): State<Arc<AppState>>, Path(batch): Path<String>) -> Response {
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
async fn job_events(State(state): State<Arc<AppState>>, Path(batch): Path<String>) -> Response {
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
    secure(
        Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response(),
        None,
    )
}

/// CSP violation reports (`report-uri`): logged and counted (`/api/status` shows the count).
async fn csp_report(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // Counted only from a signed-in browser (or with no token set), so the count cannot be
    // faked from outside; others are logged.
    let counted = state.config.token.is_none() || has_session(&headers, &state.sessions);
    if counted {
        state.csp_reports.fetch_add(1, Ordering::Relaxed);
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]).into_owned();
    tracing::warn!(report = %text, "Content-Security-Policy violation reported by a browser");
    StatusCode::NO_CONTENT.into_response()
}

pub const COOKIE: &str = "maslens_session";

/// The session id the request's cookie carries, if any.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find_map(|(k, v)| (k == COOKIE).then_some(v))
}

/// Whether the request carries a live session cookie.
pub fn has_session(headers: &HeaderMap, sessions: &super::guard::Sessions) -> bool {
    session_cookie(headers).is_some_and(|id| sessions.valid(id))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LoginForm {
    token: String,
    next: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LoginQuery {
    next: String,
    failed: String,
}

/// Only our own UI paths are followed after logging in.
fn safe_next(next: &str) -> String {
    if next.starts_with("/ui/")
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
    {
        next.to_string()
    } else {
        "/ui/traces".into()
    }
}

async fn login_page(State(state): State<Arc<AppState>>, query: QueryOf<LoginQuery>) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    page(
        &state,
        "login.html.j2",
        context! { title => "Sign in", next => safe_next(&q.next), failed => !q.failed.is_empty(), needed => state.config.token.is_some() },
    )
}

async fn login(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !same_origin(&headers) {
        return error_page(&state, StatusCode::FORBIDDEN, "cross-site request refused");
    }
    let next = safe_next(&form.next);
    let Some(token) = &state.config.token else {
        return Redirect::to(&next).into_response();
    };
    if state.auth_failures.blocked() {
        return super::guard::too_many();
    }
    if !super::constant_time_eq(&form.token, token) {
        state.auth_failures.record_failure();
        tracing::info!("UI sign-in with a wrong token");
        return Redirect::to(&format!("/ui/login?failed=1&next={}", urlencode(&next)))
            .into_response();
    }
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        state.sessions.create(),
        state.sessions.ttl().as_secs()
    );
    let mut r = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return (StatusCode::FORBIDDEN, "cross-site request refused").into_response();
    }
    if let Some(id) = session_cookie(&headers) {
        state.sessions.revoke(id);
    }
    let mut r = Redirect::to("/ui/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("maslens_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    r
}

/// An unauthenticated browser navigation goes to the login form; anything else gets 401.
pub fn unauthenticated(method: &Method, path: &str, query: Option<&str>) -> Option<Response> {
    if method == Method::GET && (path == "/" || path.starts_with("/ui")) {
        let here = match query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_string(),
        };
        return Some(Redirect::to(&format!("/ui/login?next={}", urlencode(&here))).into_response());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_compile() {
        check_templates().expect("templates");
    }

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

    #[test]
    fn next_links_stay_on_the_ui() {
        assert_eq!(safe_next("/ui/traces/x"), "/ui/traces/x");
        for bad in [
            "//evil.example/ui/",
            "https://evil.example",
            "/api/runs",
            "/ui\\x",
            "",
        ] {
            assert_eq!(safe_next(bad), "/ui/traces", "{bad}");
        }
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h), "no Origin: not a browser");
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:4318"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:4318"),
        );
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&h));
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h));
    }

    #[test]
    fn style_hash_is_a_csp_source() {
        let h = style_hash("<html><style>body{}</style>").expect("hash");
        assert!(h.starts_with("sha256-") && h.len() == 7 + 44, "{h}");
        assert_eq!(style_hash("<p>no style</p>"), None);
    }
}
