//! Signing in from a browser: the login form, random expiring session cookies, logout, the
//! redirect of an unauthenticated navigation to the form, and the same-origin check every
//! state-changing UI request passes.

use std::sync::Arc;

use axum::extract::{Form, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use serde::Deserialize;

use super::render::{error_page, page, urlencode, QueryOf};
use crate::serve::AppState;

/// The fields of a state-changing form post from our own pages: another origin's post is
/// refused (403), a form that does not parse is a 400 naming what is wrong.
pub(super) fn posted_form<T>(
    state: &AppState,
    headers: &HeaderMap,
    form: Result<Form<T>, axum::extract::rejection::FormRejection>,
) -> Result<T, Box<Response>> {
    if !same_origin(headers) {
        return Err(Box::new(error_page(
            state,
            StatusCode::FORBIDDEN,
            "cross-site request refused",
        )));
    }
    form.map(|Form(f)| f)
        .map_err(|e| Box::new(error_page(state, StatusCode::BAD_REQUEST, e.body_text())))
}

/// State-changing requests must come from our own pages (the session cookie is SameSite=Strict;
/// this also stops a cross-site form when no token is configured).
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
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
pub fn has_session(headers: &HeaderMap, sessions: &crate::serve::guard::Sessions) -> bool {
    session_cookie(headers).is_some_and(|id| sessions.valid(id))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct LoginForm {
    token: String,
    next: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct LoginQuery {
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

pub(super) async fn login_page(
    State(state): State<Arc<AppState>>,
    query: QueryOf<LoginQuery>,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    page(
        &state,
        "login.html.j2",
        context! { title => "Sign in", next => safe_next(&q.next), failed => !q.failed.is_empty(), needed => state.config.token.is_some() },
    )
}

pub(super) async fn login(
    State(state): State<Arc<AppState>>,
    crate::serve::guard::Client(client): crate::serve::guard::Client,
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
    if state.auth_failures.blocked(client) {
        return crate::serve::guard::too_many();
    }
    // An empty token never signs in, whatever the server was given.
    if token.trim().is_empty() || !crate::serve::constant_time_eq(&form.token, token) {
        state.auth_failures.record_failure(client);
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

pub(super) async fn logout(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
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
}
