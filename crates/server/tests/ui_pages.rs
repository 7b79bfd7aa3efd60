//! The web UI over a real socket, without a browser: every page renders from the store with the
//! security headers; untrusted trace content (tests/ui/injection.json) comes back escaped and
//! inert; filters, full-text search and keyset pages; actions with live progress over SSE;
//! cross-site posts refused; sign-in with the token. The browser tests (crates/cli/tests/
//! ui_browser.rs) check the same pages in Chromium.

use std::path::PathBuf;
use std::time::Duration;

use maslens_server::serve::{self, ui, AppState, Policy, ServeConfig};
use maslens_store::diagnosis::ReportKind;
use maslens_store::{NewDiagnosis, Store};
use maslens_trace::{Outcome, Trace, TraceBuilder};
use serde_json::{json, Value};

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The injection fixture: its trace and its payloads.
fn injection() -> (Trace, Vec<String>) {
    let text = std::fs::read_to_string(repo("tests/ui/injection.json")).expect("fixture");
    let doc: Value = serde_json::from_str(&text).expect("json");
    let trace: Trace = serde_json::from_value(doc["trace"].clone()).expect("trace");
    let payloads = doc["payloads"]
        .as_object()
        .expect("payloads")
        .values()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    (trace, payloads)
}

struct Server {
    base: String,
    state: std::sync::Arc<AppState>,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn start(token: Option<&str>) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&maslens_store::default_url(dir.path()))
        .await
        .expect("store");
    start_on(store, dir, token).await
}

/// The same server on a fresh PostgreSQL database, when `MASLENS_TEST_PG_URL` names a server
/// (`scripts/test.sh` starts one; CI always has it).
async fn start_pg() -> Option<Server> {
    let Ok(url) = std::env::var("MASLENS_TEST_PG_URL") else {
        eprintln!("MASLENS_TEST_PG_URL is not set: the PostgreSQL variant is skipped");
        return None;
    };
    let db = maslens_store::testing::fresh_postgres(&url)
        .await
        .expect("a fresh PostgreSQL database");
    let store = Store::open(&db).await.expect("postgres store");
    Some(start_on(store, tempfile::tempdir().expect("tempdir"), None).await)
}

async fn start_on(store: Store, dir: tempfile::TempDir, token: Option<&str>) -> Server {
    let config = ServeConfig {
        token: token.map(String::from),
        policy: Policy::Off,
        tick: Duration::from_millis(50),
        // Runs are stored after the start-up sweep (awaited below) and none comes later, so
        // the tests decide what is queued (the sweep has its own tests in serve::pipeline).
        sweep: Duration::from_secs(3600),
        ..ServeConfig::default()
    };
    let state = AppState::new(store, config).expect("state");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let (swept, first_sweep) = tokio::sync::oneshot::channel();
    let report: serve::pipeline::SweepReport = Box::new(move |r| {
        let _ = swept.send(r.is_ok());
    });
    tokio::spawn(serve::background_with(state.clone(), rx, Some(report)));
    assert_eq!(first_sweep.await, Ok(true), "the start-up sweep ran");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = serve::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base: format!("http://{addr}"),
        state,
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client"),
        _dir: dir,
        _stop: stop,
    }
}

impl Server {
    async fn get(&self, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, headers, r.text().await.expect("body"))
    }

    /// A page that must render: 200 with the UI's security headers.
    async fn page(&self, path: &str) -> String {
        let (status, h, body) = self.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(h["content-security-policy"], ui::CSP, "{path}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
        body
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.base))
            .form(form)
            .send()
            .await
            .expect("POST")
    }
}

/// A hand-written locate diagnosis (the shape `maslens_locate::LocateVerdict` serializes to)
/// whose model-written text carries the payloads too: model output is untrusted as well.
fn locate_fixture(run: &str, hash: &str, payload: &str) -> NewDiagnosis {
    let finding = |agent: &str, step: i64, c: f64| json!({"agent": agent, "step": step, "confidence": c, "rationale": format!("because {payload}")});
    NewDiagnosis {
        run_id: run.into(),
        method: "locate".into(),
        model: Some("fixture".into()),
        trace_hash: Some(hash.into()),
        agent: Some("Coder".into()),
        step: Some(2),
        confidence: Some(0.8),
        result: json!({
            "agent": "Coder", "step": 2, "confidence": 0.8, "source": "vote", "agreement": 0.5,
            "rationale": format!("The code step ran {payload}"), "model": "fixture",
            "judge": {"protocol": "all-at-once", "finding": finding("Coder", 2, 0.9)},
            "evaluators": [
                {"style": format!("strict{payload}"), "model": "fixture", "finding": finding("Coder", 2, 0.7)},
                {"style": "lenient", "model": "fixture", "finding": finding("Orchestrator", 0, 0.4)}
            ],
            "vote": {"winner": ["Coder", 2], "support": [
                {"agent": "Coder", "step": 2, "score": 1.6, "ballots": 2},
                {"agent": "Orchestrator", "step": 0, "score": 0.4, "ballots": 1}], "tied": false}
        }),
        ..NewDiagnosis::default()
    }
}

fn scan_fixture(run: &str, hash: &str, payload: &str) -> NewDiagnosis {
    let event = json!({"step": 1, "agent": "Web<b>Surfer</b>", "error_type": "hallucination",
        "description": format!("made up {payload}"), "evidence": payload, "severity": "high",
        "absorption": {"label": "absorbed", "rationale": format!("fixed later {payload}")}});
    // Reported but not counted: shown with why, escaped like the rest.
    let flagged = json!({"step": 2, "agent": format!("Coder{payload}"), "error_type": "reasoning_error",
        "description": format!("doubted {payload}"), "evidence": format!("quote {payload}"),
        "severity": "low", "confidence": "high",
        "evidence_check": {"status": "unsupported", "coverage": 0.25, "agent_matches": true},
        "flags": [format!("evidence not found in step 2 (coverage 0.25) {payload}")]});
    NewDiagnosis {
        run_id: run.into(),
        method: "scan".into(),
        model: Some("fixture".into()),
        trace_hash: Some(hash.into()),
        risk: Some(0.4),
        result: json!({"events": [event.clone()], "flagged": [flagged], "risk": 0.4}),
        events: vec![maslens_store::ImplicitEvent {
            step: Some(1),
            agent: Some("Web<b>Surfer</b>".into()),
            error_type: Some("hallucination".into()),
            severity: Some(1.2),
            absorbed_by: Some(3),
            event,
        }],
        ..NewDiagnosis::default()
    }
}

fn assert_inert(path: &str, body: &str, payloads: &[String]) {
    for p in payloads {
        if p.contains('<') || p.contains('"') {
            assert!(
                !body.contains(p.as_str()),
                "{path}: raw payload {p:?} in the page"
            );
        }
    }
    // Our one script, nothing else; no javascript: link, no inline handler, no inline style.
    assert_eq!(body.matches("<script").count(), 1, "{path}");
    assert!(!body.contains("href=\"javascript"), "{path}");
    for attr in [
        " onerror=\"",
        " onload=\"",
        " onfocus=\"",
        " style=\"",
        " srcdoc=\"",
    ] {
        assert!(!body.contains(attr), "{path}: {attr}");
    }
    assert!(!body.contains("<style"), "{path}");
    assert!(!body.contains("<iframe"), "{path}");
}

#[tokio::test]
async fn untrusted_content_is_escaped_on_every_page() {
    let s = start(None).await;
    let (trace, payloads) = injection();
    let hash = s.state.store.put_trace(&trace).await.expect("put");
    let prior = serve::pipeline::prior_to_diagnosis(&s.state.prior, &trace, &hash).expect("prior");
    s.state.store.add_diagnosis(&prior).await.expect("prior");
    let script = &payloads
        .iter()
        .find(|p| p.starts_with("<script>"))
        .expect("script payload")
        .clone();
    s.state
        .store
        .add_diagnosis(&locate_fixture(&trace.id, &hash, script))
        .await
        .expect("locate");
    s.state
        .store
        .add_diagnosis(&scan_fixture(&trace.id, &hash, script))
        .await
        .expect("scan");
    let id = ui::urlencode(&trace.id);
    let pages = [
        "/ui/traces".to_string(),
        "/ui/traces?q=pwned".to_string(),
        format!("/ui/traces/{id}"),
        format!("/ui/traces/{id}?q=script"),
        format!("/ui/traces/{id}/compare"),
    ];
    for path in &pages {
        let body = s.page(path).await;
        assert_inert(path, &body, &payloads);
    }
    let body = s.page(&format!("/ui/traces/{id}")).await;
    // Shown as text: escaped, literally.
    assert!(body.contains("&lt;script&gt;window.__pwned=1&lt;&#x2f;script&gt;"));
    assert!(body.contains("[click me](javascript:window.__pwned=1)"));
    assert!(
        body.contains("{{ 7*7 }}"),
        "template syntax in data is not evaluated"
    );
    // The decisive step, the ballots, the vote, the prior strip, the implicit failure and the
    // step that absorbed it.
    assert!(
        body.contains("class=\"card lane-2 decisive"),
        "decisive card"
    );
    assert!(body.contains("Evaluator (strict&lt;script&gt;"));
    assert!(body.contains("Confidence-weighted vote"));
    assert_eq!(
        body.matches("<li><a class=\"p p-").count(),
        trace.steps.len()
    );
    assert!(body.contains("implicit: hallucination"));
    assert!(body.contains("absorbed by <a href=\"#step-3\">step 3</a>"));
    // The flagged event (issue 37 item 7d): its step, agent, confidence and why, escaped.
    assert!(body.contains("<a href=\"#flagged\">1 flagged, not counted</a>"));
    let flagged = body
        .split("id=\"flagged\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("the flagged table");
    assert!(flagged.contains("<a href=\"#step-2\">2</a>"), "{flagged}");
    assert!(flagged.contains("reasoning_error") && flagged.contains("<td>high</td>"));
    assert!(flagged.contains("evidence not found in step 2 (coverage 0.25) &lt;script&gt;"));
    assert!(flagged.contains("Coder&lt;script&gt;"), "{flagged}");
    // Compare (item 7e): a localization did not scan, which is not "0 implicit failures".
    let compare = s.page(&format!("/ui/traces/{id}/compare")).await;
    assert!(compare.contains("<td>not scanned</td><td>1 (1 flagged, not counted)</td>"));
    // Search terms are marked inside escaped text.
    let marked = s.page(&format!("/ui/traces/{id}?q=pwned")).await;
    assert!(marked.contains("<mark>pwned</mark>"));
}

#[tokio::test]
async fn list_filters_search_and_keyset_pages() {
    list_checks(start(None).await).await;
}

#[tokio::test]
async fn list_filters_search_and_keyset_pages_on_postgres() {
    if let Some(s) = start_pg().await {
        list_checks(s).await;
    }
}

async fn list_checks(s: Server) {
    for i in 0..130 {
        let outcome = if i % 3 == 0 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        let word = if i % 10 == 0 { "zebra" } else { "horse" };
        let t = TraceBuilder::new(format!("run-{i:03}"))
            .task(format!("task {i}"))
            .outcome(outcome)
            .step("Planner", format!("plan with a {word}"))
            .step("Coder", "write code")
            .build();
        s.state.store.put_trace(&t).await.expect("put");
    }
    let all = s.page("/ui/traces").await;
    assert!(all.contains("130 traces match."), "count");
    let failed = s.page("/ui/traces?outcome=failure").await;
    assert!(failed.contains("44 traces match."));
    let zebra = s.page("/ui/traces?q=zebra").await;
    assert!(zebra.contains("13 traces match."));
    assert!(zebra.contains("matched in step 0 (Planner)"));
    // Issue 37 item 7f: OR between words, a quoted phrase (in order), the syntax on the form.
    let either = s.page("/ui/traces?q=zebra+OR+horse").await;
    assert!(either.contains("130 traces match."));
    assert!(either.contains("id=\"q-help\""));
    let phrase = s.page("/ui/traces?q=%22a+zebra%22").await;
    assert!(phrase.contains("13 traces match."));
    let reversed = s.page("/ui/traces?q=%22zebra+a%22").await;
    assert!(reversed.contains("0 traces match."));
    let both = s.page("/ui/traces?q=zebra+horse").await;
    assert!(
        both.contains("0 traces match."),
        "the default is still every word"
    );
    let marked = s.page("/ui/traces/run-000?q=zebra+OR+code").await;
    assert!(marked.contains("<mark>zebra</mark>") && marked.contains("<mark>code</mark>"));
    // Follow "Older" until the end: every run once.
    let mut seen = Vec::new();
    let mut path = "/ui/traces".to_string();
    loop {
        let body = s.page(&path).await;
        for chunk in body.split("class=\"run-link\" href=\"/ui/traces/").skip(1) {
            seen.push(chunk.split('"').next().expect("id").to_string());
        }
        let Some(i) = body.find("id=\"older\" rel=\"next\" href=\"") else {
            break;
        };
        let rest = &body[i + "id=\"older\" rel=\"next\" href=\"".len()..];
        path = rest.split('"').next().expect("href").replace("&amp;", "&");
    }
    assert_eq!(seen.len(), 130);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 130, "pages are disjoint");
    // Bad filters: a 400 page that names the field.
    for (q, field) in [
        ("min_risk=abc", "min_risk"),
        ("since=yesterday", "since"),
        ("before=nocolon", "before"),
        ("outcome=maybe", "outcome"),
    ] {
        let (status, h, body) = s.get(&format!("/ui/traces?{q}")).await;
        assert_eq!(status, 400, "{q}");
        assert_eq!(h["content-security-policy"], ui::CSP);
        assert!(body.contains(field), "{q}: {body}");
    }
    let (status, _, _) = s.get("/ui/traces/no-such-run").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn actions_run_with_live_progress_and_refuse_cross_site_posts() {
    let s = start(None).await;
    for i in 0..4 {
        let t = TraceBuilder::new(format!("r{i}"))
            .outcome(if i < 3 {
                Outcome::Failure
            } else {
                Outcome::Success
            })
            .step("A", "first")
            .step("B", "second")
            .build();
        s.state.store.put_trace(&t).await.expect("put");
    }
    let r = s
        .post_form(
            "/ui/actions",
            &[("method", "prior"), ("outcome", "failure")],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303);
    let location = r.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    assert!(location.starts_with("/ui/jobs/"), "{location}");
    // The event stream reports progress and ends with `done` once the worker finished.
    let mut events = s
        .http
        .get(format!("{}{location}/events", s.base))
        .send()
        .await
        .expect("events");
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !text.contains("event: done") {
        let chunk = tokio::time::timeout_at(deadline, events.chunk())
            .await
            .expect("done within 30 s")
            .expect("chunk")
            .expect("stream open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let done = text
        .split("event: done\ndata: ")
        .nth(1)
        .and_then(|d| d.lines().next())
        .expect("done data");
    let p: Value = serde_json::from_str(done).expect("progress json");
    assert_eq!(p["total"], 3);
    assert_eq!(p["done"], 3);
    let job = s.page(&location).await;
    assert!(job.contains("3 done, 0 failed"));
    let trace = s.page("/ui/traces/r0").await;
    assert!(trace.contains("by <strong>prior</strong>"));
    // From another site: refused, nothing queued.
    let r = s
        .http
        .post(format!("{}/ui/actions", s.base))
        .header("origin", "http://evil.example")
        .form(&[("method", "prior"), ("run", "r3")])
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 403);
    assert!(s.state.store.jobs_of("r3").await.expect("jobs").is_empty());
    let r = s
        .post_form("/ui/actions", &[("method", "rm -rf"), ("run", "r3")])
        .await;
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test]
async fn browsers_sign_in_with_the_token() {
    let s = start(Some("s3cret")).await;
    let (status, h, _) = s.get("/ui/traces?outcome=failure").await;
    assert_eq!(status, 303);
    assert_eq!(
        h["location"],
        "/ui/login?next=%2Fui%2Ftraces%3Foutcome%3Dfailure"
    );
    let (status, _, _) = s.get("/api/runs").await;
    assert_eq!(status, 401, "the API still wants the bearer token");
    // The login form and the assets need nothing.
    s.page("/ui/login").await;
    let css = ui::assets::url("app.css");
    let (status, h, _) = s.get(&css).await;
    assert_eq!(status, 200);
    assert_eq!(h["content-type"], "text/css; charset=utf-8");
    assert!(h["cache-control"]
        .to_str()
        .expect("cc")
        .contains("immutable"));
    let r = s
        .post_form("/ui/login", &[("token", "wrong"), ("next", "/ui/traces")])
        .await;
    assert!(r.headers()["location"]
        .to_str()
        .expect("loc")
        .contains("failed=1"));
    assert!(r.headers().get("set-cookie").is_none());
    let r = s
        .post_form(
            "/ui/login",
            &[("token", "s3cret"), ("next", "//evil.example")],
        )
        .await;
    assert_eq!(r.headers()["location"], "/ui/traces", "no open redirect");
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    assert!(
        !cookie.contains("s3cret"),
        "the cookie never carries the token"
    );
    let pair = cookie.split(';').next().expect("pair").to_string();
    let r = s
        .http
        .get(format!("{}/ui/traces", s.base))
        .header("cookie", pair.clone())
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    // Issue 35: the cookie is for UI routes only; each sign-in is a new random session; logout
    // revokes it.
    let with_cookie = |path: &str| {
        s.http
            .get(format!("{}{path}", s.base))
            .header("cookie", pair.clone())
            .send()
    };
    let r = with_cookie("/api/runs").await.expect("GET");
    assert_eq!(r.status().as_u16(), 401, "a cookie never authorizes /api");
    let again = s
        .post_form("/ui/login", &[("token", "s3cret"), ("next", "/ui/traces")])
        .await;
    let again = again.headers()["set-cookie"].to_str().expect("cookie");
    assert!(!again.starts_with(&pair), "a new session per sign-in");
    assert!(again.contains("Max-Age="), "sessions expire: {again}");
    let r = s
        .http
        .post(format!("{}/ui/logout", s.base))
        .header("cookie", pair.clone())
        .send()
        .await
        .expect("logout");
    assert_eq!(r.status().as_u16(), 303);
    let r = with_cookie("/ui/traces").await.expect("GET");
    assert_eq!(
        r.status().as_u16(),
        303,
        "a revoked session goes to the login form"
    );
}

/// Issue 35: failed sign-ins and bearer tokens are limited (20 a minute); past the limit even
/// the right token is not checked.
#[tokio::test]
async fn sign_ins_and_tokens_are_rate_limited() {
    let s = start(Some("s3cret")).await;
    for _ in 0..20 {
        let r = s
            .post_form("/ui/login", &[("token", "wrong"), ("next", "/ui/traces")])
            .await;
        assert_eq!(r.status().as_u16(), 303);
    }
    let r = s
        .post_form("/ui/login", &[("token", "s3cret"), ("next", "/ui/traces")])
        .await;
    assert_eq!(r.status().as_u16(), 429);
    let r = s
        .http
        .get(format!("{}/api/runs", s.base))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 429);
}

#[tokio::test]
async fn credit_and_eval_pages() {
    let s = start(None).await;
    let credit = json!({
        "format_version": 1, "model": "fixture", "lambda": 0.5,
        "table": {"roles": ["Solver<script>", "Critic"], "rounds": ["round 1", "round 2"],
                  "cell": [[0.91, 0.2], [null, 0.55]], "cell_n": [[2, 2], [0, 2]],
                  "role_credit": [0.55, 0.55], "round_credit": [0.4, 0.8]},
        "traces": [], "errors": [], "prompt_versions": []
    });
    let cid = s
        .state
        .store
        .add_report(ReportKind::Credit, "debate credit", None, &credit)
        .await
        .expect("credit");
    let optimize = json!({"name": "opt", "model": "fixture", "summary": [
            {"method": "ours", "accuracies": [0.5], "mean": 0.5, "std": 0.0, "calls": 12.0}],
        "seeds": [{"seed": 0, "bcd": {"iterations": [
            {"iteration": 0, "opt_accuracy": 0.4, "calls_after": 6, "selected_roles": ["Critic"],
             "selected_rounds": [1], "rewrites": [{"target": "role:Critic", "before": "old", "after": "new <b>", "diagnosis": "too lenient"}],
             "credit": credit["table"]}]}}]});
    let oid = s
        .state
        .store
        .add_report(ReportKind::Credit, "optimize", None, &optimize)
        .await
        .expect("optimize");
    let list = s.page("/ui/credit").await;
    assert!(list.contains("debate credit") && list.contains("optimize"));
    let page = s.page(&format!("/ui/credit/{cid}")).await;
    assert!(
        page.contains("class=\"heat heat-9\""),
        "0.91 is the darkest bucket"
    );
    assert!(page.contains("Solver&lt;script&gt;"));
    assert!(
        page.contains("Weakest roles (tied): <strong>Solver&lt;script&gt;</strong> and <strong>Critic</strong>"),
        "both roles have 0.55: {page}"
    );
    // Per-trace credit of two systems: a table per trace, and one per system instead of one
    // mixing their roles.
    let trace = |id: &str, agents: [&str; 2]| {
        json!({"trace_id": id, "mode": "generic", "segmenting": "auto", "agents": agents,
               "segments": ["round 1"], "q": [[0.5], [0.5]], "p": [[0.5], [0.5]],
               "c": [[0.2], [0.8]], "labels": [[null], [null]], "segment_score": [0.6],
               "abstentions": 0, "calls": 2})
    };
    let mut two = credit.clone();
    two["traces"] = json!([
        trace("run-a", ["Planner", "Coder"]),
        trace("run-b", ["Solver", "Critic"])
    ]);
    let tid = s
        .state
        .store
        .add_report(ReportKind::Credit, "two systems", None, &two)
        .await
        .expect("credit");
    let page = s.page(&format!("/ui/credit/{tid}")).await;
    assert!(
        page.contains("per system") && page.contains("System 2 (1 trace)"),
        "{page}"
    );
    assert!(page.contains("<summary>run-a</summary>") && page.contains("Credit of run-b"));
    let page = s.page(&format!("/ui/credit/{oid}")).await;
    assert!(page.contains("Optimizer history") && page.contains("role:Critic"));
    assert!(page.contains("new &lt;b&gt;"));
    // An eval report: the JSON the eval report snapshot records.
    let snap = std::fs::read_to_string(repo(
        "crates/eval/tests/snapshots/report_snapshots__locate_report_json.snap",
    ))
    .expect("snapshot");
    let json_text = snap.splitn(3, "---").nth(2).expect("snapshot body");
    let report: Value = serde_json::from_str(json_text.trim()).expect("report json");
    let eid = s
        .state
        .store
        .add_report(ReportKind::Eval, "whowhen", None, &report)
        .await
        .expect("eval");
    let list = s.page("/ui/evals").await;
    assert!(list.contains(&format!("/ui/evals/{eid}")));
    let (status, h, body) = s.get(&format!("/ui/evals/{eid}")).await;
    assert_eq!(status, 200, "{body}");
    let csp = h["content-security-policy"].to_str().expect("csp");
    assert!(csp.contains("style-src 'self' 'sha256-"), "{csp}");
    assert!(!csp.contains("unsafe-inline"));
    let (status, _, _) = s.get("/ui/credit/nope").await;
    assert_eq!(status, 404);
}

/// Issue 35's smaller items: a sign-in `next` with CR/LF is no 500; the live progress of a
/// missing batch is a 404, not an endless stream; CSP reports from outside a session are not
/// counted when a token is set.
#[tokio::test]
async fn small_hardening_items() {
    let s = start(Some("s3cret")).await;
    let r = s
        .post_form(
            "/ui/login",
            &[
                ("token", "s3cret"),
                ("next", "/ui/traces\r\nSet-Cookie: x=1"),
            ],
        )
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/ui/traces");
    let cookie = r.headers()["set-cookie"].to_str().expect("cookie");
    let pair = cookie.split(';').next().expect("pair").to_string();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        s.http
            .get(format!("{}/ui/jobs/abc123/events", s.base))
            .header("cookie", pair)
            .send(),
    )
    .await
    .expect("answers at once")
    .expect("GET");
    assert_eq!(r.status().as_u16(), 404);
    let r = s
        .http
        .post(format!("{}/ui/csp-report", s.base))
        .header("content-type", "application/csp-report")
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(
        s.state
            .csp_reports
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// Asserts the UI's security headers on a response; `cache` is the Cache-Control it must carry.
fn assert_secure(what: &str, h: &reqwest::header::HeaderMap, cache: &str) {
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(get("content-security-policy"), ui::CSP, "{what}: CSP");
    assert_eq!(get("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(get("referrer-policy"), "same-origin", "{what}");
    assert_eq!(get("x-frame-options"), "DENY", "{what}");
    assert_eq!(get("cross-origin-opener-policy"), "same-origin", "{what}");
    assert!(
        get("cache-control").contains(cache),
        "{what}: cache-control"
    );
}

/// Issue 40: the security headers are a layer over every UI path, so no response kind can lack
/// them: pages, error pages, the router's own 404, redirects (the handlers' and the sign-in
/// guard's), static files, plain-text errors and the CSP report sink. The JSON API is not a UI
/// path and keeps its own headers.
#[tokio::test]
async fn every_ui_response_carries_the_security_headers() {
    let open = start(None).await;
    let css = ui::assets::url("app.css");
    for (path, status, cache) in [
        ("/ui/login", 200, "no-store"),
        ("/ui/traces", 200, "no-store"),
        ("/ui/traces/nope", 404, "no-store"),
        ("/ui/traces?min_risk=x", 400, "no-store"),
        ("/ui/no-such-page", 404, "no-store"),
        ("/", 303, "no-store"),
        ("/ui", 303, "no-store"),
        ("/ui/jobs/bad!/events", 400, "no-store"),
        (css.as_str(), 200, "immutable"),
        ("/favicon.ico", 200, "max-age=86400"),
    ] {
        let (got, h, body) = open.get(path).await;
        assert_eq!(got, status, "{path}: {body}");
        assert_secure(path, &h, cache);
    }
    let r = open
        .http
        .post(format!("{}/ui/csp-report", open.base))
        .header("content-type", "application/csp-report")
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 204);
    assert_secure("POST /ui/csp-report", r.headers(), "no-store");
    let (_, h, _) = open.get("/api/status").await;
    assert!(h.get("content-security-policy").is_none(), "not a UI path");

    let locked = start(Some("s3cret")).await;
    let (status, h, _) = locked.get("/ui/traces").await;
    assert_eq!(status, 303, "to the login form");
    assert_secure("sign-in redirect", &h, "no-store");
    let r = locked
        .post_form("/ui/login", &[("token", "s3cret"), ("next", "/ui/traces")])
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert_secure("POST /ui/login", r.headers(), "no-store");
    let r = locked
        .post_form("/ui/login", &[("token", "wrong"), ("next", "/ui/traces")])
        .await;
    assert_secure("failed sign-in", r.headers(), "no-store");
}

/// Issue 39 item 5: a proposal's page shows the verification of the newest improvement loop
/// stored for its system (`maslens improve --db`), and says so when there is none. The loop's
/// report is a labelled fixture in `ImproveReport`'s JSON shape, not a real run.
#[tokio::test]
async fn a_proposal_shows_the_stored_loops_verification() {
    let s = start(None).await;
    let trace = TraceBuilder::new("sys/run-1")
        .task("q")
        .step("Planner", "plan")
        .step("Coder", "code")
        .build();
    let hash = s.state.store.put_trace(&trace).await.expect("put");
    let proposal = json!({"format_version": 1, "system": "sys", "mode": "m1", "words": ["code"],
        "runs": 3, "agent": "Coder", "before": "You write code.", "model": "fixture",
        "template": "improve/rewrite.v1", "examples": ["sys/run-1"],
        "rewrite": {"agent": "Coder", "prompt": "You write tested code.", "evidence": 2}});
    let id = s
        .state
        .store
        .add_diagnosis(&NewDiagnosis {
            run_id: "sys/run-1".into(),
            method: "propose".into(),
            trace_hash: Some(hash),
            result: json!({"proposal": proposal}),
            ..NewDiagnosis::default()
        })
        .await
        .expect("proposal");
    let page = s.page(&format!("/ui/proposals/{id}")).await;
    assert!(page.contains("id=\"no-loop\""), "{page}");
    let acceptance = |before: f64, after: f64, accepted: bool| {
        json!({"tasks": 10, "before": before, "after": after, "delta": after - before,
               "lo": after - before - 0.1, "hi": after - before + 0.1, "level": 0.9,
               "accepted": accepted, "why_not": if accepted { Value::Null } else { json!("the interval includes 0") }})
    };
    let report = json!({"format_version": 2, "system": "sys", "model": "fixture", "held_out_tasks": 10,
        "level": 0.9, "initial_score": 0.4, "final_score": 0.6,
        "initial_prompts": {"Coder": "You write code.", "Planner": "Plan."},
        "final_prompts": {"Coder": "You write tested code.", "Planner": "Plan."},
        "iterations": [
            {"index": 0, "chosen": ["Coder"], "acceptance": acceptance(0.4, 0.6, true)},
            {"index": 1, "chosen": ["Planner"], "acceptance": acceptance(0.6, 0.55, false)}],
        "baseline": {"budget_calls": 40, "calls": 38, "final_score": 0.5},
        "replay": {"kept": true, "changed": ["Coder"], "stats": [{"config": "held-out", "traces": 4,
            "unique_tasks": 4, "if_positions": 4, "success_traces": 0, "failure_traces": 4,
            "delta_spr": null, "unmatched_traces": [], "spr_noop": 0.25, "spr_fix": 0.75, "rr_noop": 0.0, "rr_fix": 0.5,
            "delta_rr": {"estimate": 0.5, "lo": 0.1, "hi": 0.9, "level": 0.9, "resamples": 1000}}]}});
    s.state
        .store
        .add_report(
            ReportKind::Improve,
            "other-system",
            None,
            &json!({"system": "other-system"}),
        )
        .await
        .expect("other");
    s.state
        .store
        .add_report(ReportKind::Improve, "sys", None, &report)
        .await
        .expect("loop");
    let page = s.page(&format!("/ui/proposals/{id}")).await;
    assert!(page.contains("id=\"verification\""), "{page}");
    assert!(
        page.contains("<td>0.400</td><td>0.600</td><td>0.200 (0.100 to 0.300)</td><td>yes</td>"),
        "{page}"
    );
    assert!(page.contains("no: the interval includes 0"), "{page}");
    assert!(page.contains("38 of 40 calls"), "{page}");
    assert!(page.contains("it changed Coder."), "{page}");
    assert!(
        page.contains("0.25 / 0.75") && page.contains("0.50 (0.10 to 0.90)"),
        "{page}"
    );
}
