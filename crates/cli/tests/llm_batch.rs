//! The batch-file round trip through the binary: run some requests live, export the rest as
//! OpenAI Batch JSONL, import an output file (out of order, with a bad line), rerun offline in
//! replay mode, then `cache stats` / `cache clear`.

mod common;
use common::*;

use maslens_llm::testing::server::{completion, last_user, FakeServer};
use maslens_llm::{ChatRequest, Message};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_replay_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let write = |name: &str, n: usize| {
        let p = home.join(name);
        let lines: Vec<String> = (0..n)
            .map(|i| {
                serde_json::to_string(&ChatRequest::new(vec![Message::user(format!("q{i}"))]))
                    .unwrap()
            })
            .collect();
        std::fs::write(&p, lines.join("\n")).unwrap();
        p.to_str().unwrap().to_string()
    };
    let first_two = write("two.jsonl", 2);
    let all_five = write("five.jsonl", 5);

    // Two requests live against a server.
    let server = FakeServer::echo().await.unwrap();
    let spec = format!("openai:gpt-4o-mini@{}", server.base_url());
    let o = run(maslens(
        home,
        &["--json", "batch", "run", &first_two, "--model", &spec],
    ))
    .await;
    assert!(o.status.success());
    assert_eq!(stdout_json(&o)["summary"]["ok"], 2);
    // Without -o the answers are shown, not dropped: in the JSON, or as JSONL on stdout with the
    // summary on stderr.
    let results = stdout_json(&o)["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(results.len(), 2, "{}", stdout_json(&o));
    let o = run(maslens(
        home,
        &["batch", "run", &first_two, "--model", &spec],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines.iter().all(|l| l["custom_id"].is_string()),
        "{lines:?}"
    );
    assert!(stderr(&o).contains("2 requests: 2 ok"), "{}", stderr(&o));
    drop(server);

    // Export the rest: only the 3 uncached ones, no server and no API key needed.
    let batch = home.join("batch.jsonl");
    let o = run(maslens(
        home,
        &[
            "--json",
            "batch",
            "export",
            "--requests",
            &all_five,
            "-o",
            batch.to_str().unwrap(),
            "--model",
            "openai:gpt-4o-mini",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout_json(&o)["summary"]["deferred"], 3);
    let lines: Vec<Value> = std::fs::read_to_string(&batch)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines
        .iter()
        .all(|l| l["method"] == "POST" && l["url"] == "/v1/chat/completions"));

    // A batch output file as the OpenAI Batch API writes it, in reverse order, with one bad line.
    let mut out = vec!["{not json".to_string()];
    for l in lines.iter().rev() {
        let body = completion(&l["body"], &format!("batched {}", last_user(&l["body"])));
        out.push(
            json!({"id": "batch_req_1", "custom_id": l["custom_id"], "error": null,
                   "response": {"status_code": 200, "request_id": "r", "body": body}})
            .to_string(),
        );
    }
    let output = home.join("output.jsonl");
    std::fs::write(&output, out.join("\n")).unwrap();
    let o = run(maslens(
        home,
        &["--json", "batch", "import", output.to_str().unwrap()],
    ))
    .await;
    assert_eq!(
        o.status.code(),
        Some(1),
        "a bad line is reported as a problem"
    );
    let rep = stdout_json(&o);
    assert_eq!(rep["imported"], 3);
    assert_eq!(rep["errors"][0]["line"], 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("output.jsonl:1:"));

    // Offline rerun in replay mode: all five answered from the cache.
    let results = home.join("results.jsonl");
    let o = run(maslens(
        home,
        &[
            "--json",
            "batch",
            "run",
            &all_five,
            "--model",
            "openai:gpt-4o-mini",
            "--cache-mode",
            "replay",
            "-o",
            results.to_str().unwrap(),
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout_json(&o)["summary"]["cache_hits"], 5);
    let texts: Vec<String> = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for i in 0..5 {
        let expect = if i < 2 {
            format!("echo: q{i}")
        } else {
            format!("batched q{i}")
        };
        assert!(texts.contains(&expect), "{expect} missing from {texts:?}");
    }

    // Cache stats and clear.
    let o = run(maslens(home, &["--json", "cache", "stats"])).await;
    let stats = stdout_json(&o);
    assert_eq!(
        (stats["entries"].as_u64(), stats["pending"].as_u64()),
        (Some(5), Some(0))
    );
    assert_eq!(stats["by_model"][0]["model"], "openai:gpt-4o-mini");
    let o = run(maslens(
        home,
        &["--json", "cache", "clear", "--model", "openai:gpt-4o-mini"],
    ))
    .await;
    assert_eq!(stdout_json(&o)["deleted"], 5);
    let o = run(maslens(home, &["cache", "clear"])).await;
    assert!(!o.status.success(), "clear needs --model or --all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_stops_a_run_cleanly_and_local_without_feature_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let reqs = home.join("r.jsonl");
    let lines: Vec<String> = (0..10)
        .map(|i| {
            serde_json::to_string(&ChatRequest::new(vec![Message::user(format!("b{i}"))])).unwrap()
        })
        .collect();
    std::fs::write(&reqs, lines.join("\n")).unwrap();
    let server = FakeServer::echo().await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let o = run(maslens(
        home,
        &[
            "--json",
            "batch",
            "run",
            reqs.to_str().unwrap(),
            "--model",
            &spec,
            "--max-calls",
            "3",
            "--concurrency",
            "1",
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(1));
    let s = &stdout_json(&o)["summary"];
    assert_eq!(s["ok"], 3);
    assert_eq!(
        s["ok"].as_u64().unwrap()
            + s["errors"].as_u64().unwrap()
            + s["skipped_budget"].as_u64().unwrap(),
        10
    );
    assert_eq!(
        server
            .counts
            .received
            .load(std::sync::atomic::Ordering::SeqCst),
        3
    );

    if cfg!(not(feature = "local")) {
        let o = run(maslens(
            home,
            &[
                "batch",
                "run",
                reqs.to_str().unwrap(),
                "--model",
                "local:smollm2-135m",
            ],
        ))
        .await;
        assert_eq!(o.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&o.stderr).contains("without the `local` feature"));
    }
}
