//! The web UI in a real browser (Debian's headless Chromium through chromedriver), as a person
//! would use it: data put in the store by the CLI (`import`, `locate --method prior`,
//! `eval locate`, `optimize --simulation`, all with `--db`), `maslens serve` started as users
//! start it, then: the trace list, a click through to a trace, the keyboard, an action run with
//! live progress, two diagnoses compared, credit and evaluation pages, dark mode; axe-core
//! finds no WCAG A/AA violation on any page in either theme; the injection fixture executes
//! nothing (checked in the browser) and no page reports a CSP violation; a 130-step trace paints
//! in under a second. Screenshots go to target/ui-artifacts/.

mod common;

use common::browser::Browser;
use common::serve::{repo, serve};
use common::{data, maslens};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

fn run_ok(home: &Path, args: &[&str]) -> String {
    let out = maslens(home, args).output().expect("run maslens");
    assert!(
        out.status.success(),
        "maslens {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The injection fixture's trace, written as a trace file.
fn injection_file(dir: &Path) -> (String, std::path::PathBuf) {
    let text = std::fs::read_to_string(repo().join("tests/ui/injection.json")).expect("fixture");
    let doc: Value = serde_json::from_str(&text).expect("fixture json");
    let path = dir.join("injection.json");
    std::fs::write(&path, doc["trace"].to_string()).expect("write");
    (doc["trace"]["id"].as_str().expect("id").to_string(), path)
}

async fn status(base: &str) -> Value {
    let url = format!("{base}/api/status");
    tokio::task::spawn_blocking(move || common::serve::get(&url))
        .await
        .expect("status")
}

/// No WCAG A/AA violation in the light and the dark theme; a screenshot of each.
async fn check_page(b: &Browser, name: &str) {
    let pwned = b.eval_js("return typeof window.__pwned;").await;
    assert_eq!(pwned, "undefined", "{name}: an injected script ran");
    let violations = b
        .eval_js("return document.documentElement.dataset.cspViolations || '0';")
        .await;
    assert_eq!(violations, "0", "{name}: CSP violations in the page");
    let v = b.axe_violations().await;
    assert!(
        v.is_empty(),
        "{name} (light): axe violations:\n{}",
        v.join("\n")
    );
    b.screenshot(name).await;
    b.eval_js("document.documentElement.dataset.theme = 'dark'; return 1;")
        .await;
    let v = b.axe_violations().await;
    assert!(
        v.is_empty(),
        "{name} (dark): axe violations:\n{}",
        v.join("\n")
    );
    b.screenshot(&format!("{name}-dark")).await;
    b.eval_js("document.documentElement.dataset.theme = 'light'; return 1;")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_in_chromium() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path();
    let db = home.join("ui.db");
    let db = db.to_str().expect("path");
    // The store, filled the way users fill it.
    let whowhen = repo().join("examples/whowhen-style.json");
    let whowhen = whowhen.to_str().expect("path");
    let (inj_id, inj) = injection_file(home);
    let long = home.join("long.json");
    std::fs::write(
        &long,
        serde_json::to_string(&maslens_store::testing::long_trace("long-130", 130)).expect("json"),
    )
    .expect("write");
    // An Algorithm-Generated trace records its agents' prompts ("Propose a fix", below).
    let ag = data("whowhen/Algorithm-Generated/1.json");
    for f in [
        ag.to_str().expect("path"),
        whowhen,
        inj.to_str().expect("path"),
        long.to_str().expect("path"),
    ] {
        run_ok(home, &["import", f, "--db", db]);
        run_ok(home, &["locate", f, "--method", "prior", "--db", db]);
    }
    let aegis = format!("aegis:{}", data("aegis/sample.jsonl").display());
    run_ok(
        home,
        &["eval", "locate", &aegis, "--method", "prior", "--db", db],
    );
    run_ok(
        home,
        &[
            "optimize",
            "--simulation",
            "--seeds",
            "1",
            "--sim-questions",
            "80",
            "--opt-size",
            "20",
            "--db",
            db,
        ],
    );
    let (model_url, _) = common::stub_model_server_with(
        Duration::ZERO,
        Some("You verify every figure against its source before you answer."),
    );
    let model = format!("openai:x@{model_url}");
    let server = serve(db, home, &["--model", &model]);
    let base = server.url.clone();

    // The list, then a click through to a trace.
    b.goto(&format!("{base}/ui/traces")).await;
    b.wait_for("#runs", Duration::from_secs(5)).await;
    let rows = b
        .eval_js("return document.querySelectorAll('tr.run-row').length;")
        .await;
    assert_eq!(rows, 4);
    check_page(&b, "traces").await;
    // `/` focuses the search box; a search narrows the list to the trace that says it.
    b.press_key("/").await;
    assert_eq!(b.eval_js("return document.activeElement.id;").await, "q");
    b.press_key("Tromso").await;
    b.press_key("Enter").await;
    b.wait_for(".matches", Duration::from_secs(5)).await;
    let rows = b
        .eval_js("return document.querySelectorAll('tr.run-row').length;")
        .await;
    assert_eq!(rows, 1, "only the Who&When-style trace mentions Tromso");
    b.click("a.run-link").await;
    b.wait_for("#steps", Duration::from_secs(5)).await;
    let url = b.current_url().await.expect("url");
    assert!(url.path().contains("whowhen-style"), "{url}");
    let trace_page = format!("{base}{}", url.path());
    assert!(
        b.eval_js("return document.querySelectorAll('mark').length;")
            .await
            .as_u64()
            > Some(0)
    );
    check_page(&b, "trace").await;

    // The keyboard: j/k move between steps, Enter folds and unfolds, d jumps to the decisive step.
    b.press_key("j").await;
    assert_eq!(
        b.eval_js("return document.activeElement.dataset.step;")
            .await,
        "0"
    );
    b.press_key("j").await;
    assert_eq!(
        b.eval_js("return document.activeElement.dataset.step;")
            .await,
        "1"
    );
    b.press_key("k").await;
    assert_eq!(
        b.eval_js("return document.activeElement.dataset.step;")
            .await,
        "0"
    );
    let open = "return document.activeElement.parentElement.open;";
    let before = b.eval_js(open).await;
    b.press_key("Enter").await;
    assert_ne!(b.eval_js(open).await, before, "Enter toggles the step");
    b.press_key("d").await;
    let decisive = b
        .eval_js("return document.activeElement.closest('.card').classList.contains('decisive');")
        .await;
    assert_eq!(decisive, true, "d focuses the decisive step");
    // The decisive step carries the prior's verdict; the prior strip has one cell per step.
    let cells = b
        .eval_js("return document.querySelectorAll('.strip a.p').length;")
        .await;
    let steps = b
        .eval_js("return document.querySelectorAll('.step-row').length;")
        .await;
    assert_eq!(cells, steps);

    // An action: the Run menu offers every method, the default (`locate`, stacked) first and
    // selected; here the prior again on this trace, with live progress over SSE.
    let options = b
        .eval_js(
            "return [...document.querySelectorAll('#action-method option')].map(o => o.value);",
        )
        .await;
    assert_eq!(
        options,
        serde_json::json!(["locate", "llm", "prior", "scan"])
    );
    assert_eq!(
        b.eval_js("return document.getElementById('action-method').value;")
            .await,
        "locate"
    );
    b.eval_js("document.getElementById('action-method').value = 'prior'; return true;")
        .await;
    b.click("#run-action button[type=submit]").await;
    b.wait_for("#job-status[data-state=done]", Duration::from_secs(30))
        .await;
    let progress = b
        .eval_js("const p = document.getElementById('job-progress'); return [p.value, p.max];")
        .await;
    assert_eq!(progress, serde_json::json!([1, 1]));
    check_page(&b, "job").await;

    // Two diagnoses now: compare them side by side.
    b.goto(&trace_page).await;
    b.click("#compare-link").await;
    b.wait_for("#compare", Duration::from_secs(5)).await;
    assert!(b.text("#compare").await.contains("method"));
    check_page(&b, "compare").await;

    // Credit (optimizer history from `optimize --db`) and evaluation reports.
    b.goto(&format!("{base}/ui/credit")).await;
    b.click("#credit-list a").await;
    b.wait_for("#history", Duration::from_secs(5)).await;
    check_page(&b, "credit").await;
    // Failure modes of the stored runs, scored against their gold agents.
    b.goto(&format!("{base}/ui/modes?gold=true")).await;
    b.wait_for("table.modes", Duration::from_secs(5)).await;
    assert!(b.text("#purity").await.contains("these modes"));
    check_page(&b, "modes").await;
    // "Propose a fix" on the Algorithm-Generated run's mode: the proposal's page with its diff.
    let ag_mode = b
        .eval_js(
            "const a = [...document.querySelectorAll('table.modes tr')].find(r => r.innerHTML.includes('Algorithm-Generated%2F1\"'));\n\
             a.querySelector('form button').click(); return a.id;",
        )
        .await;
    assert!(
        ag_mode.as_str().is_some_and(|id| id.starts_with("mode-")),
        "{ag_mode}"
    );
    b.wait_for("#proposal-diff", Duration::from_secs(10)).await;
    assert!(b
        .text("#proposal-diff")
        .await
        .contains("You verify every figure"));
    check_page(&b, "proposal").await;
    b.goto(&format!("{base}/ui/evals")).await;
    check_page(&b, "evals").await;
    b.click("#eval-list a").await;
    b.wait_for("h1", Duration::from_secs(5)).await;
    assert_eq!(
        b.eval_js("return document.documentElement.dataset.cspViolations || '0';")
            .await,
        "0"
    );
    b.screenshot("eval-report").await;

    // Untrusted content: every step unfolded, nothing ran.
    b.goto(&format!(
        "{base}/ui/traces/{}",
        maslens_server::serve::ui::urlencode(&inj_id)
    ))
    .await;
    b.wait_for("#steps", Duration::from_secs(5)).await;
    b.eval_js("document.querySelectorAll('details').forEach(d => d.open = true); return 1;")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let body = b.text("#steps").await;
    assert!(
        body.contains("<script>window.__pwned=1</script>"),
        "payloads shown as text"
    );
    assert!(body.contains("[click me](javascript:window.__pwned=1)"));
    check_page(&b, "injection").await;
    b.goto(&format!("{base}/ui/traces?q=pwned")).await;
    check_page(&b, "injection-search").await;
    // A malformed fragment (a red-team finding: it threw before the shortcuts were wired).
    b.goto(&format!(
        "{base}/ui/traces/{}#%E0%A4%A",
        maslens_server::serve::ui::urlencode(&inj_id)
    ))
    .await;
    b.wait_for("#steps", Duration::from_secs(5)).await;
    let severe = b.console_errors().await;
    assert!(severe.is_empty(), "console errors:\n{}", severe.join("\n"));
    assert_eq!(
        status(&base).await["csp_reports"],
        0,
        "no CSP report reached the server"
    );

    // A 130-step trace paints in under a second.
    b.goto(&format!("{base}/ui/traces/long-130")).await;
    b.wait_for("#steps", Duration::from_secs(5)).await;
    let paint = b.paint_ms().await.expect("first-contentful-paint");
    let dcl = b
        .eval_js("const n = performance.getEntriesByType('navigation')[0]; return n.domContentLoadedEventEnd;")
        .await;
    eprintln!("130-step trace: first contentful paint {paint:.0} ms, DOMContentLoaded {dcl} ms");
    assert!(paint < 1000.0, "first contentful paint {paint} ms");
    let cards = b
        .eval_js("return document.querySelectorAll('.step-row').length;")
        .await;
    assert_eq!(cards, 130);
    check_page(&b, "trace-130").await;
}
