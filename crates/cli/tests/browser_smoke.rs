//! The browser harness itself (tests/common/browser.rs), on a tiny page served from this test under a
//! strict CSP: DOM text, an external script, a blocked inline script, the CSP violation counter,
//! axe-core, paint timing, a screenshot and the console log. Skips (printed) without chromedriver,
//! except under CI.

mod common;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use common::browser::Browser;
use serde_json::json;
use std::time::{Duration, Instant};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'";

/// What the page shows for the escaped payload.
const PAYLOAD: &str = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>"#;

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>maslens browser smoke</title>
<script src="/app.js"></script>
</head>
<body>
<main>
<h1>Browser smoke</h1>
<p id="payload">&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;</p>
<script>window.__pwned=1</script>
<button id="go" type="button">Go</button>
</main>
</body>
</html>
"#;

/// Loaded in <head>, so it listens before the inline script is parsed (and blocked).
const APP_JS: &str = r#"document.documentElement.dataset.cspViolations = '0';
document.addEventListener('securitypolicyviolation', function () {
  var d = document.documentElement.dataset;
  d.cspViolations = String(Number(d.cspViolations || 0) + 1);
});
document.addEventListener('keydown', function (e) {
  document.documentElement.dataset.lastKey = e.key;
});
document.addEventListener('DOMContentLoaded', function () {
  document.getElementById('go').addEventListener('click', function () {
    document.documentElement.dataset.clicked = '1';
  });
  document.body.dataset.ready = '1';
});
"#;

/// `body` as `ctype` under the strict CSP.
fn strict(ctype: &'static str, body: &'static str) -> axum::response::Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CONTENT_TYPE, ctype),
        ],
        body,
    )
        .into_response()
}

async fn serve() -> String {
    let app = axum::Router::new()
        .route(
            "/",
            get(|| async { strict("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/app.js",
            get(|| async { strict("text/javascript; charset=utf-8", APP_JS) }),
        )
        // No 404 (a console error) for the browser's favicon request.
        .route(
            "/favicon.ico",
            get(|| async { axum::http::StatusCode::NO_CONTENT }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/")
}

#[tokio::test]
async fn browser_harness_smoke() {
    let t0 = Instant::now();
    let url = serve().await;
    let Some(b) = Browser::start().await else {
        return;
    };
    eprintln!("chromium + chromedriver started in {:?}", b.startup);

    b.goto(&url).await;
    b.wait_for("body[data-ready='1']", Duration::from_secs(10))
        .await;
    assert_eq!(b.text("h1").await, "Browser smoke");
    assert_eq!(b.text("#payload").await, PAYLOAD);
    assert_eq!(
        b.eval_js("return document.body.dataset.ready;").await,
        json!("1")
    );
    assert_eq!(
        b.eval_js("return typeof window.__pwned;").await,
        json!("undefined"),
        "the inline script ran despite the CSP"
    );

    // The violation event is dispatched asynchronously: wait for it, then make sure no second one comes.
    let deadline = Instant::now() + Duration::from_secs(5);
    let count = |v: serde_json::Value| v.as_str().unwrap_or("").to_string();
    while count(
        b.eval_js("return document.documentElement.dataset.cspViolations;")
            .await,
    ) != "1"
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        count(
            b.eval_js("return document.documentElement.dataset.cspViolations;")
                .await
        ),
        "1",
        "expected exactly one CSP violation (the blocked inline script)"
    );

    // Input helpers: keys go to the focused element (here the body), clicks to the element.
    let last_key = "return document.documentElement.dataset.lastKey;";
    b.press_key("j").await;
    assert_eq!(b.eval_js(last_key).await, json!("j"));
    b.press_key("Enter").await;
    assert_eq!(b.eval_js(last_key).await, json!("Enter"));
    b.click("#go").await;
    assert_eq!(
        b.eval_js("return document.documentElement.dataset.clicked;")
            .await,
        json!("1")
    );

    let paint = b.paint_ms().await;
    eprintln!("first-contentful-paint: {paint:?} ms");
    let paint = paint.expect("a first-contentful-paint entry");
    assert!(paint < 1000.0, "first-contentful-paint {paint} ms");

    let t_axe = Instant::now();
    let violations = b.axe_violations().await;
    eprintln!("axe ran in {:?}: {violations:?}", t_axe.elapsed());
    assert!(violations.is_empty(), "axe violations: {violations:#?}");
    // And it does report: a button without a name is a WCAG 4.1.2 failure.
    b.eval_js(
        "const x = document.createElement('button'); x.id = 'nameless'; \
         document.querySelector('main').append(x);",
    )
    .await;
    let violations = b.axe_violations().await;
    assert!(
        violations
            .iter()
            .any(|v| v.starts_with("button-name: #nameless")),
        "{violations:#?}"
    );
    b.eval_js("document.getElementById('nameless').remove();")
        .await;
    // axe ran under the page's CSP without tripping it (injection goes through WebDriver).
    assert_eq!(
        count(
            b.eval_js("return document.documentElement.dataset.cspViolations;")
                .await
        ),
        "1"
    );

    let shot = b.screenshot("browser-smoke").await;
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        shot.display()
    );
    eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());

    let errors = b.console_errors().await;
    eprintln!("console SEVERE entries: {errors:#?}");
    assert_eq!(
        errors.len(),
        1,
        "expected one SEVERE entry (the blocked inline script): {errors:#?}"
    );
    assert!(errors[0].contains("Content Security Policy"), "{errors:#?}");
    // The log is handed out once.
    assert!(b.console_errors().await.is_empty());

    drop(b);
    eprintln!("browser smoke wall time: {:?}", t0.elapsed());
}
