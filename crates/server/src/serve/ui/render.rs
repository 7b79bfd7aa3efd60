//! Rendering: the templates (compiled in and checked at startup), the filters they use, and
//! the page, error-page and plain responses every handler returns.

use std::sync::LazyLock;

use axum::extract::Query;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use minijinja::{context, Environment};

use super::{assets, view};
use crate::serve::AppState;

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
        "modes.html.j2",
        include_str!("../../../templates/ui/modes.html.j2"),
    ),
    (
        "proposal.html.j2",
        include_str!("../../../templates/ui/proposal.html.j2"),
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

/// Render a page (200) or the error page.
pub(super) fn page(state: &AppState, name: &str, ctx: minijinja::Value) -> Response {
    let env = match ENV.as_ref() {
        Ok(e) => e,
        Err(e) => return plain(StatusCode::INTERNAL_SERVER_ERROR, e.clone()),
    };
    let ctx = context! { auth => state.config.token.is_some(), ..ctx };
    match env.get_template(name).and_then(|t| t.render(ctx)) {
        Ok(html) => html_response(html),
        Err(e) => {
            tracing::error!(template = name, error = %format!("{e:#}"), "UI template");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("template {name}: {e}"),
            )
        }
    }
}

/// An HTML body (the security headers are the layer's: `headers::security_headers`).
pub(super) fn html_response(html: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// A plain-text response, where an HTML page would not be read (the event stream).
pub(super) fn plain(status: StatusCode, msg: String) -> Response {
    (status, msg).into_response()
}

/// The error page with a status.
pub(super) fn error_page(
    state: &AppState,
    status: StatusCode,
    message: impl Into<String>,
) -> Response {
    let mut r = page(
        state,
        "error.html.j2",
        context! { title => status.canonical_reason().unwrap_or("Error"), status => status.as_u16(), message => message.into() },
    );
    *r.status_mut() = status;
    r
}

pub(super) fn store_error(state: &AppState, e: maslens_store::StoreError) -> Response {
    tracing::warn!(%e, "store");
    error_page(state, StatusCode::SERVICE_UNAVAILABLE, e.to_string())
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

/// A page's query string, or the 400 page naming what is wrong (the JSON API's pattern).
pub(super) type QueryOf<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_compile() {
        check_templates().expect("templates");
    }
}
