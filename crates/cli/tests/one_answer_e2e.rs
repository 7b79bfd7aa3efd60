//! One answer everywhere (issue 40): one trace through `maslens locate`, `maslens eval locate`
//! and a job on `maslens serve` (`POST /api/jobs`), with the same embedded model (SmolLM2-135M)
//! and the same cache, gives the same verdict, for the default method and for each `--method`.
//! The first run fills the cache; every later run replays it (`--cache-mode replay`: a call the
//! first run did not make is an error, so the entry points also make the same calls). The Python
//! package's side is `python/tests/test_one_answer.py`. Slow: named `e2e_*`.
#![cfg(feature = "local")]

mod common;

use common::serve::{get, poll, post, start};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MODEL: &str = "local:smollm2-135m";

fn example() -> PathBuf {
    common::serve::repo().join("examples/whowhen-style.json")
}

/// The binary with a per-test cache (MASLENS_HOME left alone so the model store is found).
fn maslens(cache: &Path, args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .env("MASLENS_CACHE", cache)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MASLENS_MODEL")
        .env_remove("MASLENS_CONFIG")
        .args(args)
        .output()
        .expect("run maslens");
    assert!(
        o.status.code().is_some_and(|c| c <= 1),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `(agent, step, probability)` of a verdict as JSON.
fn answer(v: &Value) -> (Value, Value, Value) {
    (
        v["agent"].clone(),
        v["step"].clone(),
        v["probability"].clone(),
    )
}

fn method_flags(method: Option<&str>) -> Vec<&str> {
    match method {
        Some(m) => vec!["--method", m],
        None => Vec::new(),
    }
}

/// The CLI's verdict (the first run: it fills the cache).
fn cli_verdict(cache: &Path, method: Option<&str>) -> Value {
    let ex = example();
    let mut args = vec!["--json", "locate", ex.to_str().unwrap(), "--model", MODEL];
    args.extend(method_flags(method));
    args.extend(["--threads", "2"]);
    let o = maslens(cache, &args);
    let line = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .map(String::from);
    serde_json::from_str(&line.expect("a verdict line")).expect("JSON verdict")
}

/// `eval locate`'s scored prediction and its verdict for the one case, replayed.
fn eval_verdict(cache: &Path, dir: &Path, method: Option<&str>) -> (Value, Value) {
    let ex = example();
    let out = dir.join(format!("eval-{}", method.unwrap_or("default")));
    let mut args = vec![
        "--json",
        "eval",
        "locate",
        ex.to_str().unwrap(),
        "--model",
        MODEL,
        "--cache-mode",
        "replay",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(method_flags(method));
    args.extend(["--threads", "2"]);
    let o = maslens(cache, &args);
    let report: Value = serde_json::from_slice(&o.stdout).expect("report JSON");
    let verdicts = std::fs::read_to_string(out.join("verdicts.jsonl")).expect("verdicts.jsonl");
    let line: Value = serde_json::from_str(verdicts.lines().next().expect("one verdict")).unwrap();
    (report["per_case"][0]["pred"].clone(), line)
}

#[test]
fn e2e_one_trace_gives_one_verdict_from_the_cli_eval_and_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache.sqlite");
    // The native trace the API takes.
    let native = dir.path().join("trace.jsonl");
    let ex = example();
    maslens(
        &cache,
        &[
            "import",
            ex.to_str().unwrap(),
            "-o",
            native.to_str().unwrap(),
        ],
    );
    let body = std::fs::read_to_string(&native).unwrap();
    let trace: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    let id = trace["id"].as_str().unwrap().to_string();

    // (CLI --method, serve job method, the verdict's method prefix)
    let methods = [
        (None, "locate", "stacked"),
        (Some("stacked"), "stacked", "stacked"),
        (Some("llm"), "llm", "locate/"),
        (Some("prior"), "prior", "prior"),
    ];
    let mut cli = Vec::new();
    for (m, _, prefix) in methods {
        let v = cli_verdict(&cache, m);
        assert!(
            v["method"].as_str().unwrap().starts_with(prefix),
            "{m:?}: {v}"
        );
        assert!(v["agent"].is_string() && v["step"].is_u64(), "{m:?}: {v}");
        let (pred, line) = eval_verdict(&cache, dir.path(), m);
        assert_eq!(answer(&line), answer(&v), "eval locate {m:?}");
        assert_eq!(
            (&pred["agent"], &pred["step"]),
            (&v["agent"], &v["step"]),
            "{m:?}"
        );
        cli.push(v);
    }
    // The default is stacked.
    assert_eq!(answer(&cli[0]), answer(&cli[1]));

    let db = dir.path().join("serve.db").display().to_string();
    let cache_arg = cache.to_str().unwrap().to_string();
    let server = start(
        &[
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
            MODEL,
            "--cache",
            &cache_arg,
            "--cache-mode",
            "replay",
            "--threads",
            "2",
        ],
        None,
    );
    let (code, text) = post(&format!("{}/api/runs", server.url), &body);
    assert_eq!(code, 201, "{text}");
    for (i, (m, job, _)) in methods.iter().enumerate() {
        let req = serde_json::json!({"method": job, "run": id}).to_string();
        let (code, text) = post(&format!("{}/api/jobs", server.url), &req);
        assert!(
            code == 200 || code == 201 || code == 202,
            "{job}: {code} {text}"
        );
        let want = cli[i]["method"].clone();
        let run = poll(
            &format!("{}/api/runs/{}", server.url, urlencode(&id)),
            |r| diagnosis_by(r, &want).is_some(),
            600,
        );
        let d = diagnosis_by(&run, &want).unwrap();
        assert_eq!(
            (&d["agent"], &d["step"]),
            (&cli[i]["agent"], &cli[i]["step"]),
            "serve job {job} ({m:?})"
        );
        assert_eq!(answer(&d["result"]), answer(&cli[i]), "serve job {job}");
        // Provenance: method, model, options and the revision that answered.
        assert_eq!(d["params"]["method"], want);
        assert_eq!(d["params"]["revision"], cli[i]["revision"]);
        assert!(d["params"]["options"].is_object(), "{d}");
    }
    let jobs = get(&format!("{}/api/status", server.url));
    assert!(jobs.is_object(), "{jobs}");
}

/// The diagnosis whose verdict came from `method` (the one verdict's `method`).
fn diagnosis_by<'a>(run: &'a Value, method: &Value) -> Option<&'a Value> {
    run["diagnoses"]
        .as_array()?
        .iter()
        .rev()
        .find(|d| &d["result"]["method"] == method && d["params"]["options"].is_object())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
