//! `maslens serve` as users run it: the built binary, real clients. The OpenTelemetry Python SDK
//! (from PyPI, in the venv `scripts/pyenv.sh` makes; `.ci/run` makes it) exporting multi-agent runs
//! in GenAI conventions; `kill -9` during ingest; two servers on one PostgreSQL store
//! (`scripts/pg.sh`, started by `.ci/run`); `--db` on the trace commands. With the embedded model:
//! AutoGen AgentChat and LangGraph runs, instrumented by OpenInference, using `maslens
//! serve-model` as their model (`e2e_*`).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Kills the child when the test ends, however it ends.
struct Proc {
    child: Child,
    url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start a `maslens` server command whose first stdout line names its URL.
fn start(args: &[&str], home: &Path) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args(args)
        .env("MASLENS_HOME", home)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn maslens");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("first line");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .trim_end_matches(['/', ',', ';'])
        .to_string();
    Proc { child, url }
}

fn serve(db: &str, home: &Path, extra: &[&str]) -> Proc {
    let mut args = vec![
        "serve",
        "--port",
        "0",
        "--db",
        db,
        "--settle",
        "0.2",
        "--diagnose",
        "off",
    ];
    args.extend_from_slice(extra);
    start(&args, home)
}

/// The venv's Python (scripts/pyenv.sh). Required in CI; elsewhere a missing venv skips.
fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("MASLENS_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("MASLENS_HOME").map(|h| PathBuf::from(h).join("venv")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/maslens/venv"))
        })?;
    let py = venv.join("bin/python");
    if py.exists() {
        return Some(py);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} missing: .ci/run makes it with scripts/pyenv.sh",
        py.display()
    );
    eprintln!(
        "skipped: no venv at {} (scripts/pyenv.sh makes it)",
        venv.display()
    );
    None
}

fn get(url: &str) -> Value {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", url])
        .output()
        .expect("curl");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn poll(url: &str, ok: impl Fn(&Value) -> bool, secs: u64) -> Value {
    let start = Instant::now();
    loop {
        let v = get(url);
        if ok(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "{url} never satisfied the condition; last: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn python(py: &Path, script: &str, args: &[&str]) -> Vec<Value> {
    let out = Command::new(py)
        .arg(repo().join("tests/otel").join(script))
        .args(args)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn agents_in_order(trace: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in trace["steps"].as_array().into_iter().flatten() {
        let a = s["agent"].as_str().unwrap_or_default().to_string();
        if out.last() != Some(&a) {
            out.push(a);
        }
    }
    out
}

/// A run that arrived whole, localized by the prior on one of its spans.
fn check_run(base: &str, run_id: &str, agents: &[String]) -> Value {
    let run = poll(
        &format!("{base}/api/runs/{run_id}"),
        |v| v["diagnoses"].as_array().is_some_and(|d| !d.is_empty()),
        60,
    );
    let trace = &run["trace"];
    let got = agents_in_order(trace);
    for a in agents {
        assert!(got.contains(a), "agent {a} missing from {got:?}");
    }
    let d = &run["diagnoses"][0];
    let span = d["span_id"].as_str().expect("diagnosis tied to a span");
    let steps = trace["steps"].as_array().expect("steps");
    assert!(
        steps
            .iter()
            .any(|s| s["span"]["span_id"].as_str() == Some(span)),
        "the diagnosis names a span of the run"
    );
    // Steps in start order.
    let starts: Vec<&str> = steps
        .iter()
        .filter_map(|s| s["timestamp"].as_str())
        .collect();
    let mut sorted = starts.clone();
    sorted.sort();
    assert_eq!(starts, sorted, "steps ordered by start time");
    run
}

#[test]
fn serve_receives_opentelemetry_sdk_runs_in_genai_conventions() {
    let Some(py) = venv_python() else { return };
    let home = tempfile::tempdir().expect("tempdir");
    let db = home.path().join("m.db");
    let server = serve(db.to_str().expect("utf-8"), home.path(), &[]);
    let endpoint = format!("{}/v1/traces", server.url);
    let mut runs = python(
        &py,
        "genai_run.py",
        &["--endpoint", &endpoint, "--gzip", "--runs", "2"],
    );
    runs.extend(python(
        &py,
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
        let agents: Vec<String> = r["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        let run = check_run(&server.url, id, &agents);
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
    let server = serve(db, home.path(), &["--job-lease", "1"]);
    let url = format!("{}/v1/traces", server.url);
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let acked = acked.clone();
        std::thread::spawn(move || {
            for b in bodies {
                let out = Command::new("curl")
                    .args([
                        "-sS",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "--max-time",
                        "5",
                        "-H",
                        "content-type: application/json",
                        "--data-binary",
                        "@-",
                        &url,
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .and_then(|mut c| {
                        use std::io::Write;
                        c.stdin.take().map(|mut s| s.write_all(b.as_bytes()));
                        c.wait_with_output()
                    });
                match out {
                    Ok(o) if o.stdout == b"200" => {
                        acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    _ => break,
                }
            }
        })
    };
    // Kill it mid-stream.
    let start = Instant::now();
    while acked.load(std::sync::atomic::Ordering::SeqCst) < 40 {
        assert!(start.elapsed() < Duration::from_secs(60), "ingest stalled");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut server = server;
    let _ = Command::new("kill")
        .args(["-9", &server.child.id().to_string()])
        .status();
    let _ = server.child.wait();
    sender.join().expect("sender");
    let acknowledged = acked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(acknowledged < 400, "the kill came before the stream ended");
    // Restarted on the same store: every acknowledged run is there, whole.
    let again = serve(db, home.path(), &["--job-lease", "1"]);
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
    let out = Command::new("curl")
        .args([
            "-sS",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"method":"prior","filter":{"limit":1000}}"#,
            &format!("{}/api/jobs", again.url),
        ])
        .output()
        .expect("curl");
    let jobs: Value = serde_json::from_slice(&out.stdout).expect("jobs json");
    let n_jobs = jobs["jobs"].as_array().map(Vec::len).unwrap_or(0);
    assert!(n_jobs >= acknowledged, "{jobs}");
    let mut again = again;
    let _ = Command::new("kill")
        .args(["-9", &again.child.id().to_string()])
        .status();
    let _ = again.child.wait();
    let third = serve(db, home.path(), &["--job-lease", "1"]);
    let status = poll(
        &format!("{}/api/status", third.url),
        |v| v["jobs"]["done"].as_u64() == Some(n_jobs as u64),
        120,
    );
    assert!(status["jobs"].get("failed").is_none(), "{status}");
}

#[test]
fn two_servers_share_one_postgres_store() {
    let Ok(pg) = std::env::var("MASLENS_TEST_PG_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "MASLENS_TEST_PG_URL is set by .ci/run (scripts/pg.sh)"
        );
        eprintln!("skipped: MASLENS_TEST_PG_URL not set (scripts/pg.sh start)");
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
    let post = |base: &str, body: &str| {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                "content-type: application/json",
                "--data-binary",
                body,
                &format!("{base}/v1/traces"),
            ])
            .output()
            .expect("curl");
        assert_eq!(out.stdout, b"200");
    };
    for (i, l) in lines.iter().enumerate() {
        post(if i % 2 == 0 { &a.url } else { &b.url }, l);
        if i % 3 == 0 {
            post(if i % 2 == 0 { &b.url } else { &a.url }, l);
        }
    }
    let run = check_run(
        &a.url,
        "langgraph-recorded-1",
        &[
            "supervisor".into(),
            "research_agent".into(),
            "writer_agent".into(),
        ],
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
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                "content-type: application/json",
                "--data-binary",
                &serde_json::to_string(&t).expect("json"),
                &format!("{}/api/runs", a.url),
            ])
            .output()
            .expect("curl");
        assert_eq!(out.stdout, b"201");
    }
    let out = Command::new("curl")
        .args([
            "-sS",
            "-H",
            "content-type: application/json",
            "--data",
            r#"{"method":"prior","filter":{"source":"import"}}"#,
            &format!("{}/api/jobs", a.url),
        ])
        .output()
        .expect("curl");
    let jobs: Value = serde_json::from_slice(&out.stdout).expect("json");
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
