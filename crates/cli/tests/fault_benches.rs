//! The fault-figure scripts of issue 16 (bench/, docs/security.md "Fault figures") at a small
//! scale, so they keep working: the chaos run (SIGKILL and resume of `eval locate`), the LLM
//! faults through the fault-injecting proxy, and serve-model under load (embedded model: e2e); and
//! the growing-run assembly, idle-connection, full-disk and memory-per-body benches of issue 35.
//! Each script checks its own figures and exits 1 when one misses.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script(name: &str, args: &[&str]) -> (i32, String) {
    let mut python = Command::new("python3");
    python
        .arg(repo().join("bench").join(name))
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_maslens"))
        .args(args)
        .env_remove("MASLENS_MODEL");
    run(python)
}

/// Run a bench script: its exit code and its stdout then stderr.
fn run(mut command: Command) -> (i32, String) {
    let out = command.output().expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn chaos_script_kills_resumes_and_matches_the_uninterrupted_report() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("chaos");
    let (code, out) = script(
        "chaos_eval_locate.py",
        &[
            "--traces",
            "6",
            "--kills",
            "3",
            "--delay-ms",
            "30",
            "--work",
            work.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("chaos: PASS: 3 kills, 0 repeated calls"),
        "{out}"
    );
    assert!(out.contains("\"lost_verdicts\": 0"), "{out}");
    assert!(out.contains("report identical"), "{out}");
}

#[test]
fn llm_faults_script_ends_every_case_with_a_verdict_or_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("faults");
    let (code, out) = script(
        "llm_faults.py",
        &[
            "--traces",
            "6",
            "--rate",
            "0.5",
            "--work",
            work.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("llm faults: PASS"), "{out}");
    assert!(out.contains("faults injected"), "{out}");
    assert!(out.contains("neither 0"), "{out}");
}

/// The embedded model behind serve-model for 30 s of mixed load: the server stays up, answers
/// no 5xx, and the probe episodes run. The figures' pass/fail (RSS, queueing delay) is the full
/// run's business (docs/security.md); half a minute on a shared machine is too short for them.
#[test]
fn e2e_serve_model_load_script_runs_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("load.json");
    let (_, out) = script(
        "serve_model_load.py",
        &[
            "--minutes",
            "0.5",
            "--mixed-s",
            "5",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
            .unwrap_or_else(|e| panic!("no figures ({e}): {out}"));
    assert_eq!(figures["server_alive_at_end"], true, "{out}");
    assert_eq!(figures["bad_5xx"], 0, "{out}");
    assert_eq!(figures["errors"], 0, "{out}");
    assert_eq!(figures["good_bad_status"], 0, "{out}");
    assert!(figures["probes"].as_u64().unwrap_or(0) >= 3, "{out}");
    // Every probe got the server's own measure of its wait (the x-maslens-queue-ms header).
    let probes = figures["probe_detail"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        probes.iter().all(|p| p["server_queue_ms"].is_number()),
        "{out}"
    );
}

/// `bench/serve_growing_run.py` (docs/serve.md, issue 35 F18) at a tiny scale: both servers take
/// every batch and end with the whole run assembled, and the script prints its ratio.
#[test]
fn serve_growing_run_script_runs_briefly() {
    let (code, out) = script(
        "serve_growing_run.py",
        &["--batches", "3", "--spans", "40", "--gap", "0.05"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("one run of 120 chat spans"), "{out}");
    assert!(
        out.contains("baseline (--assembly-pace 0): server CPU"),
        "{out}"
    );
    assert!(out.contains("CPU ratio baseline/paced: "), "{out}");
}

/// Idle connections past the server's cap (a descriptor limit of 256: a cap of 128) do not keep
/// a new client waiting: each new client closes the longest-idle connection.
#[test]
fn idle_connections_script_serves_new_clients_past_the_cap() {
    let (code, out) = script(
        "serve_connections.py",
        &[
            "--idle",
            "600",
            "--procs",
            "2",
            "--seconds",
            "3",
            "--every",
            "1",
            "--server-nofile",
            "256",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("600 idle connections opened (0 failed)"),
        "{out}"
    );
    assert!(out.contains("worst new-client latency"), "{out}");
}

/// A store on a small tmpfs that fills up, then has room again: refusals are retryable, nothing
/// acknowledged is lost, every run is assembled and diagnosed without a restart. Mounting needs
/// root: elsewhere the test says so and passes, except under `CI`, where it fails.
#[test]
fn disk_full_script_recovers_without_a_restart() {
    let (code, out) = script("serve_disk_full.py", &["--full-wait", "2"]);
    if out.contains("cannot mount") && std::env::var_os("CI").is_none() {
        eprintln!("skipped: {out}");
        return;
    }
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("codes while full: {503:"), "{out}");
    assert!(out.contains(", lost: 0"), "{out}");
}

/// Memory per MiB of body (issue 35: "memory proportional to the body, at most 4x"): one 8 MiB
/// body of each shape, received and stored within 4x, and the run's assembly within the bounds
/// `bench/serve_body_rss.py --check` holds (6x for attribute-dense spans, whose unread
/// attributes the store does not read back: 15.8x before; 12x for content-heavy spans: 14.6x
/// before). Needs the venv's protobuf classes.
#[test]
fn memory_per_body_script_stays_within_its_bounds() {
    let Some(venv) = common::serve::venv("bin/python") else {
        return;
    };
    let mut python = Command::new(venv.join("bin/python"));
    python
        .arg(repo().join("bench/serve_body_rss.py"))
        .args(["--maslens", env!("CARGO_BIN_EXE_maslens")])
        .args(["--mib", "8", "--bodies", "1", "--check"]);
    let (code, text) = run(python);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("check: PASS"), "{text}");
}
