//! `maslens serve` as users run it: the built binary, real clients. The OpenTelemetry Python SDK
//! (from PyPI, in the venv `scripts/pyenv.sh` makes; `.ci/run` makes it) exporting multi-agent runs
//! in GenAI conventions; `kill -9` during ingest and during the queue; two servers on one
//! PostgreSQL store (`scripts/pg.sh`, started by `.ci/run`); `--db` on the trace commands.

mod common;

use common::serve::{
    check_run, first_acts, get, poll, post, python, repo, serve, serve_with_stderr, venv,
};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn serve_receives_opentelemetry_sdk_runs_in_genai_conventions() {
    let Some(venv) = venv("bin/python") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let server = serve(db.to_str().expect("utf-8"), home.path(), &[]);
    let endpoint = format!("{}/v1/traces", server.url);
    let mut runs = python(
        &venv,
        "genai_run.py",
        &["--endpoint", &endpoint, "--gzip", "--runs", "2"],
    );
    runs.extend(python(
        &venv,
        "genai_run.py",
        &[
            "--endpoint",
            &endpoint,
            "--encoding",
            "json",
            "--split-traces",
        ],
    ));
    assert_eq!(runs.len(), 3);
    for r in &runs {
        let id = r["conversation_id"]
            .as_str()
            .or(r["trace_id"].as_str())
            .expect("run id");
        let run = check_run(&server.url, id);
        let agents: Vec<String> = r["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        // Agents (tools act as agents of kind `tool` too) in the order they first acted.
        let got: Vec<String> = first_acts(&run["trace"])
            .into_iter()
            .filter(|a| agents.contains(a))
            .collect();
        assert_eq!(got, agents, "{id}");
        assert_eq!(
            run["trace"]["steps"].as_array().map(Vec::len),
            r["steps"].as_u64().map(|n| n as usize),
            "{id}: every step arrived"
        );
    }
    // The same runs through `--db` on the CLI.
    let out = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args(["stats", "--db", db.to_str().expect("utf-8"), "--json"])
        .env("MASLENS_HOME", home.path())
        .output()
        .expect("stats");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).expect("stats json");
    assert_eq!(stats["traces"], 3, "{stats}");
}

#[test]
fn kill_9_loses_no_acknowledged_span_and_queued_jobs_resume() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let db = db.to_str().expect("utf-8");
    let line = std::fs::read_to_string(repo().join("tests/otel/recorded/genai.jsonl"))
        .expect("recorded")
        .lines()
        .next()
        .expect("a line")
        .to_string();
    // Many distinct runs: the recorded request with fresh trace ids and conversation ids.
    let bodies: Vec<String> = (0..400)
        .map(|i| {
            line.replace(
                "ce78f7c36e0bb4fc1115fb6c84cd19aa",
                &format!("{:032x}", i + 1),
            )
            .replace("genai-recorded-1", &format!("conv-{i}"))
        })
        .collect();
    let mut server = serve(db, home.path(), &["--job-lease", "1"]);
    let url = format!("{}/v1/traces", server.url);
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let acked = acked.clone();
        std::thread::spawn(move || {
            for b in bodies {
                if post(&url, &b).0 != 200 {
                    break;
                }
                acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // Kill it mid-stream.
    let start = Instant::now();
    while acked.load(std::sync::atomic::Ordering::SeqCst) < 40 {
        assert!(start.elapsed() < Duration::from_secs(60), "ingest stalled");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.kill9();
    sender.join().expect("sender");
    let acknowledged = acked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(acknowledged < 400, "the kill came before the stream ended");
    // Restarted on the same store: every acknowledged run is there, whole.
    let mut again = serve(db, home.path(), &["--job-lease", "1"]);
    let status = poll(
        &format!("{}/api/runs?limit=1000&state=complete", again.url),
        |v| {
            v["runs"]
                .as_array()
                .is_some_and(|r| r.len() >= acknowledged)
        },
        60,
    );
    for r in status["runs"].as_array().expect("runs") {
        assert_eq!(r["n_spans"], 13, "{}", r["id"]);
    }
    // Queue prior jobs on every run and kill the server while they drain; the rest resume.
    let (code, body) = post(
        &format!("{}/api/jobs", again.url),
        r#"{"method":"prior","filter":{"limit":1000}}"#,
    );
    assert_eq!(code, 202, "{body}");
    let jobs: Value = serde_json::from_str(&body).expect("jobs json");
    let n_jobs = jobs["jobs"].as_array().map(Vec::len).unwrap_or(0);
    assert!(n_jobs >= acknowledged, "{jobs}");
    again.kill9();
    let third = serve(db, home.path(), &["--job-lease", "1"]);
    let status = poll(
        &format!("{}/api/status", third.url),
        |v| v["jobs"]["done"].as_u64() == Some(n_jobs as u64),
        120,
    );
    assert!(status["jobs"].get("failed").is_none(), "{status}");
}

/// The PostgreSQL of `scripts/pg.sh` (`MASLENS_TEST_PG_URL`, which `.ci/run` sets); outside CI a
/// missing one skips the test with a message.
fn pg_url() -> Option<String> {
    let url = std::env::var("MASLENS_TEST_PG_URL").ok();
    if url.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "MASLENS_TEST_PG_URL is set by .ci/run (scripts/pg.sh)"
        );
        eprintln!("skipped: MASLENS_TEST_PG_URL not set (scripts/pg.sh start)");
    }
    url
}

#[test]
fn two_servers_share_one_postgres_store() {
    let Some(pg) = pg_url() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let db = rt
        .block_on(maslens_store::testing::fresh_postgres(&pg))
        .expect("fresh database");
    let home = tempfile::tempdir().expect("tempdir");
    let a = serve(&db, home.path(), &[]);
    let b = serve(&db, home.path(), &[]);
    // One run's spans, one request per span, split between the two servers, some sent to both.
    let mut lines: Vec<String> = Vec::new();
    for l in std::fs::read_to_string(repo().join("tests/otel/recorded/langgraph.jsonl"))
        .expect("recorded")
        .lines()
    {
        let req: Value = serde_json::from_str(l).expect("json");
        for rs in req["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    let mut one_ss = ss.clone();
                    one_ss["spans"] = Value::Array(vec![span.clone()]);
                    let mut one_rs = rs.clone();
                    one_rs["scopeSpans"] = Value::Array(vec![one_ss]);
                    lines.push(serde_json::json!({"resourceSpans": [one_rs]}).to_string());
                }
            }
        }
    }
    assert_eq!(lines.len(), 14);
    for (i, l) in lines.iter().enumerate() {
        let (first, second) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        assert_eq!(post(&format!("{}/v1/traces", first.url), l).0, 200);
        if i % 3 == 0 {
            assert_eq!(post(&format!("{}/v1/traces", second.url), l).0, 200);
        }
    }
    let run = check_run(&a.url, "langgraph-recorded-1");
    assert_eq!(
        first_acts(&run["trace"]),
        ["supervisor", "research_agent", "writer_agent"]
    );
    assert_eq!(run["run"]["n_spans"], 14);
    std::thread::sleep(Duration::from_secs(1));
    let run = get(&format!("{}/api/runs/langgraph-recorded-1", b.url));
    assert_eq!(
        run["diagnoses"].as_array().map(Vec::len),
        Some(1),
        "completed and diagnosed once across both servers"
    );
    // Imported runs, jobs queued on one server, drained by both: each exactly once.
    for i in 0..30 {
        let t = maslens_trace::TraceBuilder::new(format!("imp-{i}"))
            .task("q")
            .step("A", "x")
            .step("B", "y")
            .build();
        let body = serde_json::to_string(&t).expect("json");
        assert_eq!(post(&format!("{}/api/runs", a.url), &body).0, 201);
    }
    let (code, body) = post(
        &format!("{}/api/jobs", a.url),
        r#"{"method":"prior","filter":{"source":"import"}}"#,
    );
    assert_eq!(code, 202);
    let jobs: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(30));
    poll(
        &format!("{}/api/status", b.url),
        |v| v["jobs"]["done"].as_u64() == Some(30),
        60,
    );
    let mut total = 0;
    for i in 0..30 {
        let run = get(&format!("{}/api/runs/imp-{i}", b.url));
        total += run["diagnoses"].as_array().map(Vec::len).unwrap_or(0);
    }
    assert_eq!(total, 30, "no job ran twice");
}

#[test]
fn db_flag_imports_locates_and_reads_back() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let db = db.to_str().expect("utf-8");
    let example = repo().join("examples/whowhen-style.json");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_maslens"))
            .args(args)
            .env("MASLENS_HOME", home.path())
            .output()
            .expect("maslens");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // Before anything is in it, the store says how runs get there (and its folder is made).
    let fresh = home.path().join("not/yet/m.db");
    let out = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args([
            "locate",
            "--db",
            fresh.to_str().expect("utf-8"),
            "--method",
            "prior",
        ])
        .env("MASLENS_HOME", home.path())
        .output()
        .expect("maslens");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds no runs yet") && err.contains("maslens import"),
        "{err}"
    );
    run(&["import", example.to_str().expect("utf-8"), "--db", db]);
    let out = run(&["locate", "--db", db, "--method", "prior", "--json"]);
    let v: Value = serde_json::from_str(out.lines().next().expect("a line")).expect("json");
    let out = run(&["show", "--db", db, "--json"]);
    assert!(out.contains(v["trace"].as_str().expect("trace id")));
    // The verdict is stored as a diagnosis.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let diagnoses = rt.block_on(async {
        let store = maslens_store::Store::open(&maslens_store::url_from_arg(db))
            .await
            .expect("open");
        store
            .diagnoses(v["trace"].as_str().expect("id"))
            .await
            .expect("diagnoses")
    });
    assert_eq!(diagnoses.len(), 1);
    assert_eq!(diagnoses[0].body.method, "prior");
    assert_eq!(diagnoses[0].body.agent.as_deref(), v["agent"].as_str());
}

/// SIGTERM (systemd, Docker, Kubernetes) stops `serve` like Ctrl-C: in-flight requests drain, the
/// background tasks stop, exit code 0 (before, the default action killed it mid-request).
#[test]
fn sigterm_drains_and_exits_cleanly() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let mut server = serve(db.to_str().expect("utf-8"), home.path(), &[]);
    let line =
        std::fs::read_to_string(repo().join("tests/otel/recorded/genai.jsonl")).expect("recorded");
    assert_eq!(
        post(&format!("{}/v1/traces", server.url), line.trim()).0,
        200
    );
    sigterm_exits_cleanly_within(&mut server, Duration::from_secs(20));
}

/// SIGTERM to `server`, then its exit code 0 within `limit` (a panic naming the limit otherwise).
fn sigterm_exits_cleanly_within(server: &mut common::serve::Proc, limit: Duration) {
    let _ = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = server.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            start.elapsed() < limit,
            "still running {limit:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// Issue 37 item 7 (a, c): runs imported with `--db` get the prior (no LLM) when `serve` starts,
/// which says on stderr how many it queued; the start-up line names the web UI, which answers.
#[test]
fn serve_queues_the_prior_on_imported_runs_and_names_the_ui() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let db = db.to_str().expect("utf-8");
    for file in ["examples/whowhen-style.json", "examples/native.jsonl"] {
        let out = Command::new(env!("CARGO_BIN_EXE_maslens"))
            .args([
                "import",
                repo().join(file).to_str().expect("utf-8"),
                "--db",
                db,
            ])
            .env("MASLENS_HOME", home.path())
            .output()
            .expect("import");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = home.path().join("serve.stderr");
    let stderr = std::fs::File::create(&log).expect("log file");
    let server = serve_with_stderr(db, home.path(), &[], stderr.into());
    let url = &server.url;
    assert!(
        server.first_line.starts_with(&format!(
            "listening on {url} (UI: {url}/ui, OTLP: {url}/v1/traces, API: /api, OpenAPI: /openapi.json)"
        )),
        "{}",
        server.first_line
    );
    let ui = Command::new("curl")
        .args(["-sS", "-L", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{url}/ui"))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&ui.stdout), "200");
    let runs = get(&format!("{url}/api/runs?limit=100"));
    let ids: Vec<String> = runs["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_str().map(String::from))
        .collect();
    assert!(ids.len() >= 2, "{runs}");
    for id in &ids {
        let run = poll(
            &format!("{url}/api/runs/{}", id.replace('/', "%2F")),
            |v| v["diagnoses"].as_array().is_some_and(|d| !d.is_empty()),
            60,
        );
        assert_eq!(run["diagnoses"][0]["method"], "prior", "{id}");
        let methods: Vec<&str> = run["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .filter_map(|j| j["method"].as_str())
            .collect();
        assert_eq!(methods, ["prior"], "{id}: no LLM job is queued by itself");
    }
    let said = format!(
        "queued the prior (no LLM, instant) on {} runs stored without a diagnosis",
        ids.len()
    );
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&said) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "stderr never said {said:?}: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 36 item 5: SIGTERM while a job runs on the embedded model. `serve` exits 0 within 5 s
/// (the inference stops at its next token instead of holding the runtime until it ends), the
/// job goes back to the queue, and the next `serve` on the store runs it to its diagnosis.
#[test]
fn e2e_sigterm_stops_a_running_local_job_which_runs_after_a_restart() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db").display().to_string();
    let imported = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args(["import", "examples/whowhen-style.json", "--db", &db, "-q"])
        .current_dir(repo())
        .output()
        .expect("import");
    assert!(imported.status.success(), "{imported:?}");
    // The user's MASLENS_HOME (the embedded model is there); no cache, so the job really runs.
    let args = [
        "serve",
        "--port",
        "0",
        "--db",
        &db,
        "--settle",
        "0.2",
        "--diagnose",
        "off",
        "--model",
        "local:smollm2-135m",
        "--cache-mode",
        "off",
        "--threads",
        "2",
    ];
    let mut server = common::serve::start(&args, None);
    let runs = get(&format!("{}/api/runs", server.url));
    let run = runs["runs"][0]["id"]
        .as_str()
        .expect("the imported run")
        .to_string();
    let body = serde_json::json!({"method": "llm", "run": run}).to_string();
    let (code, text) = post(&format!("{}/api/jobs", server.url), &body);
    assert_eq!(code, 202, "{text}");
    let job: Value = serde_json::from_str(&text).expect("JSON");
    let job_url = format!(
        "{}/api/jobs/{}",
        server.url,
        job["jobs"][0]["id"].as_str().expect("id")
    );
    poll(&job_url, |j| j["state"] == "running", 120);
    std::thread::sleep(Duration::from_millis(1500)); // inside the model's first call
    sigterm_exits_cleanly_within(&mut server, Duration::from_secs(5));

    let again = common::serve::start(&args, None);
    let job_url = job_url.replace(&server.url, &again.url);
    let done = poll(&job_url, |j| j["state"] == "done", 600);
    assert!(done["diagnosis_id"].is_string(), "{done}");
}

/// Red-team findings: an empty token (an unset variable that expanded to nothing) and
/// out-of-range numbers are refused at start with a message, never a panic or a server that
/// signs anyone in or refuses every body.
#[test]
fn an_empty_token_and_out_of_range_flags_are_refused_at_start() {
    let home = tempfile::tempdir().unwrap();
    let db = home.path().join("s.db");
    let db = db.to_str().unwrap();
    for (args, says) in [
        (vec!["--token", ""], "--token (or MASLENS_TOKEN) is empty"),
        (vec!["--token", "  ", "--host", "0.0.0.0"], "is empty"),
        (vec!["--idle", "1e30"], "--idle must be a number of seconds"),
        (vec!["--job-lease", "1e30"], "--job-lease must be"),
        (
            vec!["--assembly-pace=-1"],
            "--assembly-pace must be a number",
        ),
        (
            vec!["--assembly-pace", "NaN"],
            "--assembly-pace must be a number",
        ),
        (
            vec!["--max-body-mib", "17592186044416"],
            "--max-body-mib must be from 1 to",
        ),
    ] {
        let mut all = vec!["serve", "--db", db, "--port", "0"];
        all.extend(args.iter().copied());
        let out = common::maslens(home.path(), &all).output().unwrap();
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// GET `url` with a bearer token and, when given, an `X-Forwarded-For` header: the status.
fn get_as(url: &str, token: &str, forwarded_for: Option<&str>) -> u16 {
    let auth = format!("authorization: Bearer {token}");
    let mut args = vec!["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", &auth];
    let xff = forwarded_for.map(|f| format!("x-forwarded-for: {f}"));
    if let Some(h) = &xff {
        args.extend(["-H", h.as_str()]);
    }
    args.push(url);
    let out = Command::new("curl").args(&args).output().expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Issue 35: behind a reverse proxy every client has the proxy's address, so 20 wrong tokens
/// from anyone locked every client out. With `--trusted-proxy` the client is the address the
/// proxy put in `X-Forwarded-For`, and only the one that failed is limited; without it the
/// header is not believed (a client cannot pick its own address).
#[test]
fn behind_a_trusted_proxy_the_failure_limit_is_per_forwarded_client() {
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let db = db.to_str().expect("utf-8");
    let base = ["--token", "s3cret"];
    let mut proxied = serve(
        db,
        home.path(),
        &[&base[..], &["--trusted-proxy", "127.0.0.1"]].concat(),
    );
    let url = format!("{}/api/runs", proxied.url);
    let stranger = Some("198.51.100.1, 203.0.113.7");
    for _ in 0..20 {
        assert_eq!(get_as(&url, "wrong", stranger), 401);
    }
    assert_eq!(
        get_as(&url, "s3cret", stranger),
        429,
        "the failing client is limited"
    );
    assert_eq!(
        get_as(&url, "s3cret", Some("198.51.100.2")),
        200,
        "another is not"
    );
    assert_eq!(get_as(&url, "s3cret", None), 200, "nor the proxy itself");
    proxied.kill9();

    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let mut direct = serve(db.to_str().expect("utf-8"), home.path(), &base);
    let url = format!("{}/api/runs", direct.url);
    for _ in 0..20 {
        assert_eq!(get_as(&url, "wrong", stranger), 401);
    }
    assert_eq!(
        get_as(&url, "s3cret", Some("198.51.100.2")),
        429,
        "without --trusted-proxy the header names no one"
    );
    direct.kill9();
}

/// `bench/serve_chaos.py` (docs/security.md, issue 35) at a small scale: two servers on one
/// PostgreSQL store, load, a `kill -9` or two; every acknowledged span stored, every run
/// diagnosed, every diagnosis written back exactly once (the script checks and exits 1).
#[test]
fn serve_chaos_script_runs_briefly() {
    let Some(pg) = pg_url() else {
        return;
    };
    let Some(venv) = venv("bin/python") else {
        return;
    };
    let log = tempfile::NamedTempFile::new().expect("log");
    let out = Command::new(venv.join("bin/python"))
        .arg(repo().join("bench/serve_chaos.py"))
        .args(["--bin", env!("CARGO_BIN_EXE_maslens")])
        .args(["--minutes", "0.25", "--drain-minutes", "1", "--seed", "1"])
        // A delivery a kill leaves claimed is sent again after 4 s, not 60 (the local receiver
        // answers at once). The test still takes about 75 s instead of 20 now and then, for a
        // reason not yet found (the script's "drained in" line would say where).
        .args(["--writeback-timeout", "2"])
        .arg("--log")
        .arg(log.path())
        .env("MASLENS_TEST_PG_URL", pg)
        .output()
        .expect("python runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("kill -9") && text.ends_with("PASS\n"),
        "{text}"
    );
}
