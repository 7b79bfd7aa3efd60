//! `maslens serve`: OpenTelemetry traces in, diagnoses out.
//!
//! - `POST /v1/traces` (OTLP/HTTP, protobuf or JSON, gzip) stores each span once and answers only
//!   after the store committed it; bad spans are counted in the OTLP partial-success answer with
//!   their reason, bad bodies get a 4xx, a store that cannot write gets a 503 (the exporter
//!   retries; nothing is lost).
//! - In the background ([`pipeline`]): runs are assembled from their spans; a complete run
//!   (root span arrived and quiet for `settle`, or idle for `idle`) is localized at once by the
//!   learned prior and, by policy, queued for the LLM methods; runs stored without a diagnosis
//!   (`maslens import --db`, `POST /api/runs`) are queued for the prior, at start-up and every
//!   `sweep`; two workers drain the queue, one for the instant prior and one for the LLM
//!   methods under the LLM layer's cache and budgets, so a prior never waits behind an LLM job; each diagnosis is written back ([`writeback`]) as a
//!   `gen_ai.evaluation.result` event to an OTLP logs endpoint and as a span annotation to
//!   Arize Phoenix.
//! - A JSON API under `/api` ([`api`]) with an OpenAPI document at `/openapi.json`.
//! - A web UI under `/ui` ([`ui`]): traces, one trace with its diagnoses, credit, evaluations,
//!   actions with live progress.
//!
//! Loopback by default; a bearer token is required on every route but `/health` when one is
//! configured (the CLI requires one on any other address). Browsers sign in once on
//! `/ui/login` and carry a session cookie instead.

pub mod api;
pub mod guard;
pub mod modes;
pub mod openapi;
pub mod pace;
pub mod pipeline;
pub mod propose;
pub mod ui;
pub mod writeback;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maslens_otlp::decode::{decode_slices, encode_response, inflated_body, DecodeError};
use maslens_otlp::Encoding;
use maslens_store::Store;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

/// Which completed runs the LLM methods diagnose on arrival (the prior localizes every run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    Off,
    Failed,
    All,
}

/// A method the queue runs: every localizer `maslens locate --method` has, and the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobMethod {
    /// The learned prior (no LLM).
    Prior,
    /// The default localizer, as `maslens locate` runs it (`stacked`: the LLM pipeline and the
    /// prior combined).
    Locate,
    /// The AgentLocate pipeline alone (Judge, Evaluators, vote): `maslens locate --method llm`.
    Llm,
    /// Implicit-failure scan.
    Scan,
}

impl JobMethod {
    /// Every method, in the order the names list them.
    pub const ALL: [JobMethod; 4] = [
        JobMethod::Locate,
        JobMethod::Llm,
        JobMethod::Prior,
        JobMethod::Scan,
    ];

    /// The names a request may give, as an error message lists them.
    pub const NAMES: &'static str =
        "locate (the default localizer, stacked; `stacked` is the same), llm, prior or scan";

    pub fn as_str(self) -> &'static str {
        match self {
            JobMethod::Prior => "prior",
            JobMethod::Locate => "locate",
            JobMethod::Llm => "llm",
            JobMethod::Scan => "scan",
        }
    }
    pub fn parse(s: &str) -> Option<JobMethod> {
        match s {
            "prior" => Some(JobMethod::Prior),
            "locate" | "stacked" => Some(JobMethod::Locate),
            "llm" => Some(JobMethod::Llm),
            "scan" => Some(JobMethod::Scan),
            _ => None,
        }
    }

    /// Runs without an LLM, in milliseconds: its jobs have their own worker
    /// ([`pipeline::Lane::Instant`]), so that they never wait behind an LLM job.
    pub fn instant(self) -> bool {
        self == JobMethod::Prior
    }

    /// A job's parameters: the Judge protocol of a `locate` or `llm` job (`--protocol`), kept
    /// only when it is not the default (all-at-once), so that a job asked with the default and
    /// one asked without it are the same job. Empty or absent: no parameters.
    pub fn params(self, protocol: Option<&str>) -> Result<Value, String> {
        let Some(name) = protocol.map(str::trim).filter(|p| !p.is_empty()) else {
            return Ok(json!({}));
        };
        let protocol: maslens_locate::Protocol =
            name.parse().map_err(|e| format!("protocol: {e}"))?;
        if !matches!(self, JobMethod::Locate | JobMethod::Llm) {
            return Err(format!(
                "protocol: only the locate and llm methods run a Judge, not {}",
                self.as_str()
            ));
        }
        Ok(match protocol {
            maslens_locate::Protocol::AllAtOnce => json!({}),
            p => json!({"protocol": p.as_str()}),
        })
    }

    /// The localizer a locate job runs (`None` for the scan).
    pub fn localizer(self) -> Option<maslens_core::locate::Method> {
        use maslens_core::locate::Method;
        match self {
            JobMethod::Prior => Some(Method::Prior),
            JobMethod::Locate => Some(Method::default()),
            JobMethod::Llm => Some(Method::Llm),
            JobMethod::Scan => None,
        }
    }
}

/// Where diagnoses are written back.
#[derive(Debug, Clone)]
pub struct WriteBack {
    /// An OTLP/HTTP logs endpoint (`http://host:4318/v1/logs`; `/v1/logs` added when missing).
    pub otlp_logs: Option<String>,
    /// An Arize Phoenix base URL (`http://host:6006`).
    pub phoenix: Option<String>,
    /// Phoenix API key (`Authorization: Bearer`).
    pub phoenix_token: Option<String>,
    /// How long one send may take (30 s by default); a claimed delivery is leased for twice
    /// that ([`WriteBack::lease`]).
    pub timeout: Duration,
}

impl Default for WriteBack {
    fn default() -> Self {
        WriteBack {
            otlp_logs: None,
            phoenix: None,
            phoenix_token: None,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A duration as the store's nanoseconds (saturating).
pub(crate) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl WriteBack {
    /// How long a delivery stays claimed: twice a send's timeout, so one send fits, and a
    /// delivery claimed by a server that died is sent by another once that has passed.
    pub fn lease(&self) -> Duration {
        self.timeout.saturating_mul(2)
    }
}

/// How `maslens serve` runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Required as `Authorization: Bearer TOKEN` on every route but `/health` when set.
    pub token: Option<String>,
    /// Host names (any port) this server answers to; `None` answers to any (a server on a
    /// non-loopback address, reached by names it cannot know, behind its token). Loopback
    /// names by default, so a DNS-rebinding page cannot reach a local server.
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a browser session lasts after sign-in.
    pub session_ttl: Duration,
    /// Reverse proxies whose `X-Forwarded-For` names the client ([`guard::client_address`]):
    /// failed sign-ins and tokens are then limited per client, not per proxy.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Largest request body, before and after decompression.
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    /// A run whose root span arrived is complete after this long without new spans.
    pub settle: Duration,
    /// A run without a root span is complete after this long without new spans.
    pub idle: Duration,
    pub policy: Policy,
    /// LLM methods queued for a completed run under `policy`.
    pub on_arrival: Vec<JobMethod>,
    /// Model spec for the LLM methods.
    pub model: String,
    pub llm: maslens_llm::OpenOptions,
    pub writeback: WriteBack,
    /// This server's name in job claims.
    pub worker: String,
    /// Background loop period.
    pub tick: Duration,
    /// A growing run waits this many times its last assembly's duration before the next one
    /// ([`pace::AssemblyPace`]; 0: assemble on every pass).
    pub assembly_pace: f64,
    /// A job claimed longer ago than this is given back (its worker died).
    pub lease: Duration,
    /// A job that runs longer than this fails with the reason (a model that never answers would
    /// otherwise hold the LLM lane for its timeout times its retries); shorter than `lease`.
    pub job_timeout: Duration,
    /// How often the runs stored without a diagnosis (`maslens import --db`, `POST /api/runs`)
    /// are looked for and queued for the prior; all of them at start-up.
    pub sweep: Duration,
    pub max_attempts: i64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            token: None,
            allowed_hosts: Some(
                guard::LOOPBACK_HOSTS
                    .iter()
                    .map(|h| h.to_string())
                    .collect(),
            ),
            session_ttl: Duration::from_secs(12 * 3600),
            trusted_proxies: Vec::new(),
            max_body_bytes: 64 << 20,
            request_timeout: Duration::from_secs(60),
            settle: Duration::from_secs(2),
            idle: Duration::from_secs(60),
            policy: Policy::Failed,
            on_arrival: vec![JobMethod::Locate],
            model: "local:smollm2-135m".into(),
            llm: maslens_llm::OpenOptions::default(),
            writeback: WriteBack::default(),
            worker: format!("maslens-{}", std::process::id()),
            tick: Duration::from_millis(250),
            assembly_pace: 4.0,
            lease: Duration::from_secs(15 * 60),
            job_timeout: Duration::from_secs(10 * 60),
            sweep: Duration::from_secs(10),
            max_attempts: 3,
        }
    }
}

/// Shared by the routes and the background tasks.
pub struct AppState {
    pub store: Store,
    pub config: ServeConfig,
    /// The learned prior, loaded once.
    pub prior: maslens_core::locate::PriorSource,
    /// The LLM stack, opened on the first LLM job.
    pub models: OnceCell<maslens_core::locate::Models>,
    pub http: reqwest::Client,
    /// Content-Security-Policy violations browsers reported on UI pages.
    pub csp_reports: std::sync::atomic::AtomicU64,
    /// Browser sessions (random, expiring, revoked by logout).
    pub sessions: guard::Sessions,
    /// Failed sign-ins and bearer tokens: 20 a minute at most.
    pub auth_failures: guard::FailureLimit,
    /// Slots for large request bodies read at once ([`guard::body_slots`]).
    pub body_slots: Arc<tokio::sync::Semaphore>,
    /// When each large run may be assembled again.
    pub pace: pace::AssemblyPace,
}

impl AppState {
    pub fn new(store: Store, config: ServeConfig) -> Result<Arc<AppState>, ServeError> {
        if config.job_timeout >= config.lease {
            return Err(ServeError::Setup(format!(
                "the job timeout ({} s) must be shorter than the job lease ({} s), or a job still \
                 running would be given to another worker",
                config.job_timeout.as_secs_f64(),
                config.lease.as_secs_f64()
            )));
        }
        if config.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(ServeError::Setup(
                "the token is empty: give a real one, or none on a loopback address".into(),
            ));
        }
        ui::check_templates().map_err(|e| ServeError::Setup(format!("UI templates: {e}")))?;
        let (prior, _) = maslens_core::locate::PriorSource::load("builtin")
            .map_err(|e| ServeError::Setup(format!("the built-in prior: {e}")))?;
        let http = reqwest::Client::builder()
            .timeout(config.writeback.timeout)
            .build()
            .map_err(|e| ServeError::Setup(format!("HTTP client: {e}")))?;
        let pace = pace::AssemblyPace::new(config.assembly_pace)
            .map_err(|e| ServeError::Setup(format!("the assembly pace {e}")))?;
        let config_ttl = config.session_ttl;
        Ok(Arc::new(AppState {
            store,
            config,
            prior,
            models: OnceCell::new(),
            http,
            csp_reports: std::sync::atomic::AtomicU64::new(0),
            sessions: guard::Sessions::new(config_ttl),
            auth_failures: guard::FailureLimit::new(20, Duration::from_secs(60)),
            body_slots: Arc::new(tokio::sync::Semaphore::new(guard::LARGE_BODIES_AT_ONCE)),
            pace,
        }))
    }
}

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Store(#[from] maslens_store::StoreError),
}

/// The line `maslens serve` prints once it listens on `bound`: the UI, OTLP, API and OpenAPI
/// addresses (`json`: as a JSON object).
pub fn listening(bound: std::net::SocketAddr, json: bool) -> String {
    let (base, ui, otlp) = (
        format!("http://{bound}"),
        format!("http://{bound}/ui"),
        format!("http://{bound}/v1/traces"),
    );
    match json {
        true => serde_json::json!({"url": base, "otlp_traces": otlp, "ui": ui}).to_string(),
        false => format!(
            "listening on {base} (UI: {ui}, OTLP: {otlp}, API: /api, OpenAPI: /openapi.json); \
             Ctrl-C or SIGTERM stops"
        ),
    }
}

/// Every route of `maslens serve`.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    let timeout = state.config.request_timeout;
    Router::new()
        .route("/v1/traces", post(v1_traces))
        .merge(api::routes())
        .merge(ui::routes())
        .route("/openapi.json", get(openapi::document))
        // Inside the credentials check: only a client with them can hold a body slot.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::body_slots,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .route("/health", get(health))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        // Outermost: the UI's security headers on every response to a UI path, the guards'
        // and the sign-in redirects included.
        .layer(axum::middleware::from_fn(ui::security_headers))
        .with_state(state)
}

/// `ok`, or 503 with the reason when the store cannot take writes (its file was deleted).
async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.store.check_file() {
        Ok(()) => "ok".into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// Equal strings, compared in time that depends only on their lengths.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Credentials check when a token is configured: `Authorization: Bearer TOKEN`, or on UI
/// routes only the UI's session cookie (a cookie never authorizes `/api` or `/v1`). The UI's
/// login form and static files need none; a browser that navigates to a UI page without a
/// session is sent to the login form. Failed tokens count toward the sign-in limit.
async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(token) = &state.config.token {
        let path = req.uri().path();
        if ui::public(path) {
            return next.run(req).await;
        }
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ui_route = path == "/" || path == "/ui" || path.starts_with("/ui/");
        let client = guard::client_of(&req, &state.config.trusted_proxies);
        let session = ui_route && ui::has_session(req.headers(), &state.sessions);
        let ok = session
            || match given {
                Some(_) if state.auth_failures.blocked(client) => return guard::too_many(),
                Some(g) if constant_time_eq(g, token) => true,
                Some(_) => {
                    state.auth_failures.record_failure(client);
                    false
                }
                None => false,
            };
        if !ok {
            if let Some(r) = ui::unauthenticated(req.method(), path, req.uri().query()) {
                return r;
            }
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a bearer token is required (Authorization: Bearer TOKEN)",
            )
                .into_response();
        }
    }
    next.run(req).await
}

/// OTLP/HTTP trace export.
async fn v1_traces(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header_str = |h: header::HeaderName| headers.get(h).and_then(|v| v.to_str().ok());
    let encoding = match Encoding::from_content_type(header_str(header::CONTENT_TYPE)) {
        Ok(e) => e,
        Err(e) => return (StatusCode::UNSUPPORTED_MEDIA_TYPE, e.to_string()).into_response(),
    };
    let refused = |e: DecodeError| {
        let status = match e {
            DecodeError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            DecodeError::ContentType(_) | DecodeError::ContentEncoding(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            _ => StatusCode::BAD_REQUEST,
        };
        tracing::info!(%e, "OTLP request refused");
        (status, e.to_string()).into_response()
    };
    let limit = state.config.max_body_bytes;
    let bytes = match inflated_body(&body, header_str(header::CONTENT_ENCODING), limit) {
        Ok(b) => b,
        Err(e) => return refused(e),
    };
    // A large protobuf body is stored slice by slice, in one transaction (memory proportional to
    // the body): each slice's spans are dropped before the next is decoded.
    let mut slices = match decode_slices(&bytes, encoding) {
        Ok(s) => s,
        Err(e) => return refused(e),
    };
    let mut left_out = maslens_otlp::span::Flattened::default();
    let mut repaired = maslens_otlp::decode::Decoded::default();
    let next = || {
        let decoded = slices.next()?;
        let mut flat = maslens_otlp::span::flatten(&decoded.request);
        // Spans of an OTLP/JSON body that did not parse: rejected one by one, the others kept.
        left_out.rejected.append(&mut flat.rejected);
        left_out.rejected.extend(decoded.rejected);
        repaired.repaired_text += decoded.repaired_text;
        Some(flat.spans)
    };
    let out = match state.store.ingest_slices(next).await {
        Ok(o) => o,
        Err(e) => {
            // Not stored, not acknowledged: the exporter retries after Retry-After.
            tracing::warn!(%e, "could not store spans");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                format!("the store could not take the spans: {e}"),
            )
                .into_response();
        }
    };
    tracing::debug!(
        stored = out.stored,
        duplicates = out.duplicates,
        rejected = left_out.rejected.len(),
        "spans received"
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, encoding.content_type())],
        encode_response(
            encoding,
            left_out.rejected.len(),
            &partial_message(&left_out, &repaired, &out),
        ),
    )
        .into_response()
}

/// The partial-success message: the rejected spans, then the strings that were not UTF-8, then
/// the spans stored with text replaced.
fn partial_message(
    flat: &maslens_otlp::span::Flattened,
    decoded: &maslens_otlp::decode::Decoded,
    out: &maslens_store::IngestOutcome,
) -> String {
    [
        flat.rejection_message(),
        decoded.repair_message(),
        out.sanitized_message(),
    ]
    .into_iter()
    .filter(|m| !m.is_empty())
    .collect::<Vec<_>>()
    .join("; ")
}

/// Run the background tasks (assembly, completion, the prior on runs stored without a
/// diagnosis, the queue's two workers, write-back) until `shutdown` resolves.
pub async fn background(state: Arc<AppState>, shutdown: tokio::sync::watch::Receiver<bool>) {
    background_with(state, shutdown, None).await
}

/// [`background`], telling `first_sweep` how many runs stored without a diagnosis the start-up
/// sweep queued for the prior (the CLI says so on stderr).
pub async fn background_with(
    state: Arc<AppState>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    first_sweep: Option<pipeline::SweepReport>,
) {
    let a = tokio::spawn(pipeline::assemble_loop(
        state.clone(),
        shutdown.clone(),
        first_sweep,
    ));
    let instant = tokio::spawn(pipeline::worker_loop(
        state.clone(),
        shutdown.clone(),
        pipeline::Lane::Instant,
    ));
    let llm = tokio::spawn(pipeline::worker_loop(
        state.clone(),
        shutdown.clone(),
        pipeline::Lane::Llm,
    ));
    let b = tokio::spawn(writeback::loop_(state, shutdown));
    let _ = tokio::join!(a, instant, llm, b);
}
