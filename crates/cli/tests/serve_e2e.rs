//! End to end with real components: agent frameworks (AutoGen AgentChat, LangGraph) instrumented
//! by their OpenInference instrumentors, using `maslens serve-model` (the embedded SmolLM2-135M) as
//! their OpenAI-compatible model and exporting to `maslens serve`; Arize Phoenix (PyPI, its
//! default SQLite) receiving the same spans and maslens' diagnoses as span annotations. The venv
//! comes from `scripts/pyenv.sh --phoenix` (`.ci/run`). Slow: named `e2e_*`.
#![cfg(feature = "local")]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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

/// Start a server command (`home`: its MASLENS_HOME; none keeps the user's, where the embedded
/// model was fetched).
fn start(args: &[&str], home: Option<&Path>) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maslens"));
    if let Some(h) = home {
        cmd.env("MASLENS_HOME", h);
    }
    let mut child = cmd
        .args(args)
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

/// The venv's Python; required (the e2e tests run in CI, where `.ci/run` makes the venv).
fn venv(with_phoenix: bool) -> Option<PathBuf> {
    let venv = std::env::var_os("MASLENS_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/maslens/venv"))
        })?;
    let needed = if with_phoenix {
        "bin/phoenix"
    } else {
        "bin/python"
    };
    if venv.join(needed).exists() {
        return Some(venv);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} missing: .ci/run makes it with scripts/pyenv.sh --phoenix",
        venv.join(needed).display()
    );
    eprintln!("skipped: no {needed} in {}", venv.display());
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
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn python(venv: &Path, script: &str, args: &[&str]) -> Value {
    let out = Command::new(venv.join("bin/python"))
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
        .next()
        .expect("a summary line")
}

/// The run arrived whole (its agents, one step per model call, in order) and its diagnosis is
/// tied to one of its spans.
fn check(serve: &str, run_id: &str, agents: &[&str], model_calls: u64) {
    let run = poll(
        &format!("{serve}/api/runs/{run_id}"),
        |v| v["diagnoses"].as_array().is_some_and(|d| !d.is_empty()),
        60,
    );
    let steps = run["trace"]["steps"].as_array().expect("steps");
    assert_eq!(
        steps.len() as u64,
        model_calls,
        "{run_id}: one step per model call"
    );
    let seen: Vec<&str> = steps.iter().filter_map(|s| s["agent"].as_str()).collect();
    let mut order: Vec<&str> = Vec::new();
    for a in &seen {
        if !order.contains(a) {
            order.push(a);
        }
    }
    assert_eq!(
        order, agents,
        "{run_id}: agents in the order they first acted"
    );
    let span = run["diagnoses"][0]["span_id"].as_str().expect("a span");
    assert!(steps
        .iter()
        .any(|s| s["span"]["span_id"].as_str() == Some(span)));
}

#[test]
fn e2e_autogen_and_langgraph_runs_arrive_whole_and_get_diagnosed() {
    let Some(venv) = venv(false) else { return };
    let home = tempfile::tempdir().expect("tempdir");
    let model = start(
        &[
            "serve-model",
            "--port",
            "0",
            "--threads",
            "2",
            "--served-name",
            "smollm2",
        ],
        None,
    );
    let db = home.path().join("m.db");
    let serve = start(
        &[
            "serve",
            "--port",
            "0",
            "--db",
            db.to_str().expect("utf-8"),
            "--settle",
            "0.5",
            "--diagnose",
            "off",
        ],
        Some(home.path()),
    );
    let endpoint = format!("{}/v1/traces", serve.url);
    let a = python(
        &venv,
        "autogen_run.py",
        &["--base-url", &model.url, "--endpoint", &endpoint],
    );
    let run = a["trace_ids"][0].as_str().expect("trace id");
    check(
        &serve.url,
        run,
        &["Solver", "Checker", "Reporter"],
        a["model_calls"].as_u64().expect("calls"),
    );
    let l = python(
        &venv,
        "langgraph_run.py",
        &[
            "--base-url",
            &model.url,
            "--endpoint",
            &endpoint,
            "--thread-id",
            "lg-e2e",
        ],
    );
    check(
        &serve.url,
        "lg-e2e",
        &["supervisor", "research_agent", "writer_agent"],
        l["model_calls"].as_u64().expect("calls"),
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn e2e_phoenix_receives_maslens_diagnoses_as_span_annotations() {
    let Some(venv) = venv(true) else { return };
    let home = tempfile::tempdir().expect("tempdir");
    let (port, grpc) = (free_port(), free_port());
    let mut phoenix = Command::new(venv.join("bin/phoenix"))
        .arg("serve")
        .env("PHOENIX_WORKING_DIR", home.path().join("phoenix"))
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start phoenix");
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _phoenix = Kill(&mut phoenix);
    let phoenix_url = format!("http://127.0.0.1:{port}");
    poll(
        &format!("{phoenix_url}/v1/projects"),
        |v| v["data"].is_array(),
        120,
    );
    let db = home.path().join("m.db");
    let serve = start(
        &[
            "serve",
            "--port",
            "0",
            "--db",
            db.to_str().expect("utf-8"),
            "--settle",
            "0.5",
            "--diagnose",
            "off",
            "--phoenix",
            &phoenix_url,
        ],
        Some(home.path()),
    );
    // The same spans to both: Phoenix shows them, maslens says which one broke the run.
    python(
        &venv,
        "genai_run.py",
        &[
            "--endpoint",
            &format!("{phoenix_url}/v1/traces"),
            "--also-endpoint",
            &format!("{}/v1/traces", serve.url),
            "--conversation-id",
            "phoenix-e2e",
        ],
    );
    let run = poll(
        &format!("{}/api/runs/phoenix-e2e", serve.url),
        |v| v["diagnoses"].as_array().is_some_and(|d| !d.is_empty()),
        60,
    );
    let span = run["diagnoses"][0]["span_id"]
        .as_str()
        .expect("a span")
        .to_string();
    let annotations = poll(
        &format!("{phoenix_url}/v1/projects/default/span_annotations?span_ids={span}"),
        |v| v["data"].as_array().is_some_and(|d| !d.is_empty()),
        90,
    );
    let a = &annotations["data"][0];
    assert_eq!(a["name"], "maslens.decisive_error");
    assert_eq!(a["span_id"], span.as_str());
    assert_eq!(a["result"]["label"], "decisive_error");
    assert_eq!(a["metadata"]["maslens.method"], "prior");
}
