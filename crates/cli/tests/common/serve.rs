//! Helpers for the tests that run `maslens serve` / `serve-model` and Python clients.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A server child, killed when the test ends however it ends.
pub struct Proc {
    pub child: Child,
    pub url: String,
    /// Its first stdout line (the start-up line).
    pub first_line: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// `kill -9`, then reap.
    pub fn kill9(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Start a `maslens` server command whose first stdout line names its URL (`home`: its
/// MASLENS_HOME; none keeps the user's, where the embedded model was fetched).
pub fn start(args: &[&str], home: Option<&Path>) -> Proc {
    start_with_stderr(args, home, Stdio::inherit())
}

/// [`start`] with the server's stderr going to `stderr` (a file the test reads).
pub fn start_with_stderr(args: &[&str], home: Option<&Path>, stderr: Stdio) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maslens"));
    if let Some(h) = home {
        cmd.env("MASLENS_HOME", h);
    }
    let mut child = cmd
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
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
    Proc {
        child,
        url,
        first_line: line.trim_end().to_string(),
    }
}

/// `maslens serve` on a free port over `db`, quick to complete runs, no LLM on arrival.
pub fn serve(db: &str, home: &Path, extra: &[&str]) -> Proc {
    serve_with_stderr(db, home, extra, Stdio::inherit())
}

/// [`serve`] with its stderr going to `stderr`.
pub fn serve_with_stderr(db: &str, home: &Path, extra: &[&str], stderr: Stdio) -> Proc {
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
    start_with_stderr(&args, Some(home), stderr)
}

/// The venv `scripts/pyenv.sh` makes (`MASLENS_VENV`, else `$MASLENS_HOME/venv`, else
/// `~/.cache/maslens/venv`) when it has `needed` (`bin/python`, `bin/phoenix`). Required in CI
/// (`.ci/run` makes it); elsewhere a missing venv skips the test with a message.
pub fn venv(needed: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("MASLENS_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("MASLENS_HOME").map(|h| PathBuf::from(h).join("venv")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/maslens/venv"))
        })?;
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

/// GET a JSON document (null when it does not answer JSON).
pub fn get(url: &str) -> Value {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", url])
        .output()
        .expect("curl");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// POST a JSON body; returns (status, body).
pub fn post(url: &str, body: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "30",
            "-w",
            "\n%{http_code}",
            "-H",
            "content-type: application/json",
            "--data-binary",
            "@-",
            url,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            if let Some(mut s) = c.stdin.take() {
                s.write_all(body.as_bytes())?;
            }
            c.wait_with_output()
        })
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// GET `url` until `ok` holds, for at most `secs`.
pub fn poll(url: &str, ok: impl Fn(&Value) -> bool, secs: u64) -> Value {
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

/// Run a producer from tests/otel with the venv's Python; its JSON summary lines.
pub fn python(venv: &Path, script: &str, args: &[&str]) -> Vec<Value> {
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
        .collect()
}

/// Agents in the order they first act.
pub fn first_acts(trace: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in trace["steps"].as_array().into_iter().flatten() {
        let a = s["agent"].as_str().unwrap_or_default().to_string();
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// A run that arrived and was localized by the prior on one of its spans; steps in start order.
pub fn check_run(base: &str, run_id: &str) -> Value {
    let run = poll(
        &format!("{base}/api/runs/{run_id}"),
        |v| v["diagnoses"].as_array().is_some_and(|d| !d.is_empty()),
        60,
    );
    let steps = run["trace"]["steps"].as_array().expect("steps");
    let span = run["diagnoses"][0]["span_id"]
        .as_str()
        .expect("diagnosis tied to a span");
    assert!(
        steps
            .iter()
            .any(|s| s["span"]["span_id"].as_str() == Some(span)),
        "the diagnosis names a span of the run"
    );
    let starts: Vec<&str> = steps
        .iter()
        .filter_map(|s| s["timestamp"].as_str())
        .collect();
    let mut sorted = starts.clone();
    sorted.sort();
    assert_eq!(starts, sorted, "steps ordered by start time");
    run
}
