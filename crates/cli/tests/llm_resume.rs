//! Resume: really kill a `maslens batch run` of 50 calls part-way (SIGKILL), rerun it, and show
//! from the server's per-request counts and the cache counters that no call completed and
//! stored before the kill was made again.

use maslens_llm::cache::Cache;
use maslens_llm::testing::server::{last_user, FakeServer, Reply};
use maslens_llm::{ChatRequest, Message};
use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const N: usize = 50;
const CONCURRENCY: u64 = 4;

fn maslens(home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_maslens"));
    c.env("MASLENS_HOME", home)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MASLENS_MODEL")
        .env_remove("MASLENS_CACHE");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_batch_run_resumes_without_repeating_completed_calls() {
    let server = FakeServer::start(Arc::new(|b: &serde_json::Value, _| {
        Reply::Delay(
            Duration::from_millis(120),
            Box::new(Reply::Text(format!("answer to {}", last_user(b)))),
        )
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let lines: Vec<String> = (0..N)
        .map(|i| {
            serde_json::to_string(&ChatRequest::new(vec![Message::user(format!(
                "request {i}"
            ))]))
            .unwrap()
        })
        .collect();
    std::fs::write(&requests, lines.join("\n") + "\n").unwrap();
    let cache_path = dir.path().join("cache.sqlite");
    let spec = format!("openai:fixture@{}", server.base_url());
    let args = |cmd: &mut Command| {
        cmd.args(["--json", "batch", "run"])
            .arg(&requests)
            .args([
                "--model",
                &spec,
                "--concurrency",
                &CONCURRENCY.to_string(),
                "--cache",
            ])
            .arg(&cache_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    };

    // First run: kill it once about 20 answers have gone out.
    let mut cmd = maslens(dir.path());
    args(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let t = Instant::now();
    while server.counts.answered.load(Ordering::SeqCst) < 20 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the first run made no progress"
        );
        if let Some(status) = child.try_wait().unwrap() {
            panic!("first run ended before the kill: {status}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
    let answered_before = server.counts.answered.load(Ordering::SeqCst);

    let cache = Cache::open(&cache_path).unwrap();
    let stored: HashSet<String> = cache
        .keys()
        .unwrap()
        .iter()
        .map(|k| {
            cache.entry(k).unwrap().unwrap().request["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    drop(cache);
    let stored_n = stored.len() as u64;
    assert!(
        stored_n >= 1 && stored_n < N as u64,
        "killed part-way: {stored_n} stored"
    );
    // At most the calls in flight at the kill were answered but not stored.
    assert!(
        answered_before >= stored_n && answered_before - stored_n <= CONCURRENCY,
        "{answered_before} answered, {stored_n} stored"
    );

    // Second run: to the end.
    let mut cmd = maslens(dir.path());
    args(&mut cmd);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rerun failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let s = &summary["summary"];
    assert_eq!(s["ok"], N);
    assert_eq!(s["errors"], 0);
    assert_eq!(
        s["cache_hits"].as_u64().unwrap(),
        stored_n,
        "every stored call answered from the cache"
    );
    assert_eq!(s["cache_writes"].as_u64().unwrap(), N as u64 - stored_n);

    // The server's view: no call that was stored before the kill was made again; every request
    // was answered; the total is N plus at most the calls lost in flight.
    let counts = server.counts.all();
    for i in 0..N {
        let p = format!("request {i}");
        let (received, answered) = counts.get(&p).copied().unwrap_or((0, 0));
        assert!(answered >= 1, "{p} never answered");
        if stored.contains(&p) {
            assert_eq!(
                (received, answered),
                (1, 1),
                "{p} was completed before the kill and made again"
            );
        }
    }
    let total = server.counts.answered.load(Ordering::SeqCst);
    eprintln!(
        "resume: {stored_n} calls stored before the kill ({answered_before} answered by the server), \
         rerun: {} cache hits, {} new calls; server answers in total: {total} for {N} requests",
        s["cache_hits"], s["cache_writes"]
    );
    assert!(
        total >= N as u64 && total <= N as u64 + CONCURRENCY,
        "{total} answers for {N} requests"
    );
    let cache = Cache::open(&cache_path).unwrap();
    assert_eq!(cache.len().unwrap(), N as u64);
}

/// Issue 16 item 11: two processes sharing one cache computed the same request twice. Now the
/// second waits for the first's answer (a claim row with a lease in the cache): two `batch run`s
/// of the same requests, started together on one cache, make each call once between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_cache_make_each_call_once() {
    const M: usize = 6;
    let server = FakeServer::start(Arc::new(|b: &serde_json::Value, _| {
        Reply::Delay(
            Duration::from_millis(400),
            Box::new(Reply::Text(format!("answer to {}", last_user(b)))),
        )
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let lines: Vec<String> = (0..M)
        .map(|i| {
            serde_json::to_string(&ChatRequest::new(vec![Message::user(format!(
                "shared {i}"
            ))]))
            .unwrap()
        })
        .collect();
    std::fs::write(&requests, lines.join("\n") + "\n").unwrap();
    let cache_path = dir.path().join("cache.sqlite");
    let spec = format!("openai:fixture@{}", server.base_url());
    let run = || {
        let mut cmd = maslens(dir.path());
        cmd.args(["--json", "batch", "run"])
            .arg(&requests)
            .args(["--model", &spec, "--concurrency", "2", "--cache"])
            .arg(&cache_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let (a, b) = (run(), run());
    let (a, b) = tokio::task::spawn_blocking(move || {
        (a.wait_with_output().unwrap(), b.wait_with_output().unwrap())
    })
    .await
    .unwrap();
    for out in [&a, &b] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let counts = server.counts.all();
    for i in 0..M {
        let p = format!("shared {i}");
        assert_eq!(
            counts.get(&p).copied().unwrap_or((0, 0)).0,
            1,
            "{p} was computed by both processes"
        );
    }
    let summary = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let (sa, sb) = (summary(&a), summary(&b));
    let writes = sa["summary"]["cache_writes"].as_u64().unwrap()
        + sb["summary"]["cache_writes"].as_u64().unwrap();
    let hits = sa["summary"]["cache_hits"].as_u64().unwrap()
        + sb["summary"]["cache_hits"].as_u64().unwrap();
    assert_eq!((writes, hits), (M as u64, M as u64), "{sa}\n{sb}");
}
