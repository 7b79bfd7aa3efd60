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
//! Content-Security-Policy (`script-src 'self'`, no inline script or style) is on every response
//! under a UI path, set by one layer ([`headers::security_headers`]), and violations are reported
//! to `/ui/csp-report` and counted in `/api/status`.
//!
//! The modules: `render` (templates, the page and error responses), [`headers`] (the
//! security-header layer and the CSP report sink), `list` (the trace list and its filters),
//! `pages` (a trace, a comparison, credit and eval reports), `actions` (running methods and
//! their progress), `session` (sign-in, sessions, same-origin checks).

mod actions;
pub mod assets;
pub mod headers;
mod list;
mod modes;
mod pages;
mod render;
mod session;
pub mod view;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::response::Redirect;
use axum::routing::{get, post};
use axum::Router;

use super::AppState;

pub use headers::{is_ui_path, security_headers, CSP};
pub use list::{ListParams, PAGE_ROWS};
pub use render::{check_templates, urlencode};
pub use session::{has_session, unauthenticated, COOKIE};

/// The UI's routes (auth is applied by the caller; see [`public`] for what needs none; the
/// security headers by [`security_headers`] over every UI path).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/traces") }))
        .route("/ui", get(|| async { Redirect::to("/ui/traces") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/traces") }))
        .route("/ui/traces", get(list::traces))
        .route("/ui/traces/{id}", get(pages::trace))
        .route("/ui/traces/{id}/compare", get(pages::compare))
        .route("/ui/credit", get(pages::credit_list))
        .route("/ui/credit/{id}", get(pages::credit))
        .route("/ui/modes", get(modes::modes))
        .route("/ui/modes/propose", post(modes::propose))
        .route("/ui/proposals/{id}", get(modes::proposal))
        .route("/ui/evals", get(pages::evals))
        .route("/ui/evals/{id}", get(pages::eval))
        .route("/ui/actions", post(actions::actions))
        .route("/ui/jobs/{batch}", get(actions::job))
        .route("/ui/jobs/{batch}/events", get(actions::job_events))
        // Public routes read small bodies only: no one can make the server buffer 64 MiB
        // before signing in.
        .route(
            "/ui/csp-report",
            post(headers::csp_report).layer(DefaultBodyLimit::max(PUBLIC_BODY_BYTES)),
        )
        .route(
            "/ui/login",
            get(session::login_page)
                .post(session::login)
                .layer(DefaultBodyLimit::max(PUBLIC_BODY_BYTES)),
        )
        .route("/ui/logout", post(session::logout))
        .route("/ui/static/{file}", get(assets::serve))
        .route("/favicon.ico", get(assets::favicon))
}

/// The largest body the public routes (sign-in, CSP reports) read.
pub const PUBLIC_BODY_BYTES: usize = 16 * 1024;

/// Paths that need no credentials: the login form, static files, the CSP report sink.
pub fn public(path: &str) -> bool {
    path == "/ui/login"
        || path.starts_with("/ui/static/")
        || path == "/ui/csp-report"
        || path == "/favicon.ico"
}
