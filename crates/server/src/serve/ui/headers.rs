//! The UI's security headers, as one layer over every UI path ([`security_headers`], applied
//! by `serve::router` outside authentication and the guards, so their redirects and refusals
//! carry them too), and the sink browsers report policy violations to ([`csp_report`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::session::has_session;
use crate::serve::AppState;

/// The policy of every UI page: our own script and stylesheet only, nothing inline, no
/// framing, forms post only here; violations are reported.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'; report-uri /ui/csp-report";

/// A CSP hash source (`sha256-...`) for one inline `<style>` block: a response extension a
/// handler sets when it serves such a page (the eval report); the layer allows that block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StyleHash(pub String);

/// Whether `path` is the UI's: its pages and assets, the root redirect, the favicon.
pub fn is_ui_path(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/") || path == "/favicon.ico"
}

/// The layer: the security headers on every response to a UI path, whatever produced it (a
/// page, an error page, a redirect, the router's 404, a refusal by a guard).
pub async fn security_headers(req: Request, next: Next) -> Response {
    let ui = is_ui_path(req.uri().path());
    let res = next.run(req).await;
    if ui {
        secure(res)
    } else {
        res
    }
}

/// The headers themselves; `Cache-Control: no-store` unless the response set its own.
fn secure(mut res: Response) -> Response {
    let csp = match res.extensions().get::<StyleHash>() {
        Some(StyleHash(hash)) => {
            CSP.replace("style-src 'self'", &format!("style-src 'self' '{hash}'"))
        }
        None => CSP.to_string(),
    };
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
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

/// `sha256-...` of the first inline `<style>` block (a CSP hash source).
pub fn style_hash(html: &str) -> Option<String> {
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

/// CSP violation reports (`report-uri`): logged and counted (`/api/status` shows the count).
pub async fn csp_report(
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
    // A report from a signed-in browser is worth a warning; anyone else's only a debug line, so
    // strangers cannot flood the log.
    match counted {
        true => {
            tracing::warn!(report = %text, "Content-Security-Policy violation reported by a browser")
        }
        false => {
            tracing::debug!(report = %text, "Content-Security-Policy report from a browser without a session")
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn style_hash_is_a_csp_source() {
        let h = style_hash("<html><style>body{}</style>").expect("hash");
        assert!(h.starts_with("sha256-") && h.len() == 7 + 44, "{h}");
        assert_eq!(style_hash("<p>no style</p>"), None);
    }

    #[test]
    fn ui_paths() {
        for p in [
            "/",
            "/ui",
            "/ui/",
            "/ui/traces/x",
            "/ui/static/app.css",
            "/favicon.ico",
        ] {
            assert!(is_ui_path(p), "{p}");
        }
        for p in [
            "/api/runs",
            "/v1/traces",
            "/health",
            "/openapi.json",
            "/uix",
        ] {
            assert!(!is_ui_path(p), "{p}");
        }
    }
}
