//! `maslens serve` over real sockets: OTLP in (JSON and gzip protobuf, repeated), a run assembled
//! and localized by the prior on one of its spans, the diagnosis written back to an OTLP logs
//! receiver, the API and its OpenAPI document, bad input answered without harm, the token.
//! The spans are an export recorded from a real OpenTelemetry SDK run (tests/otel/recorded).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use maslens_server::serve::{self, AppState, Policy, ServeConfig, WriteBack};
use prost::Message;
use serde_json::Value;

fn recorded(name: &str) -> Vec<String> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/otel/recorded")
        .join(name);
    std::fs::read_to_string(&p)
        .expect("recorded export")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

/// An OTLP logs receiver keeping every request body.
async fn logs_receiver() -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/logs",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().expect("lock").push(body.to_vec());
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

struct Server {
    base: String,
    _dir: tempfile::TempDir,
    stop: tokio::sync::watch::Sender<bool>,
}

async fn start(config: ServeConfig) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = maslens_store::Store::open(&maslens_store::default_url(dir.path()))
        .await
        .expect("store");
    let state = AppState::new(store, config).expect("state");
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(serve::background(state.clone(), rx));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, serve::router(state)).await });
    Server {
        base: format!("http://{addr}"),
        _dir: dir,
        stop,
    }
}

fn fast(config: ServeConfig) -> ServeConfig {
    ServeConfig {
        settle: Duration::from_millis(100),
        tick: Duration::from_millis(50),
        policy: Policy::Off,
        ..config
    }
}

async fn poll<F: Fn(&Value) -> bool>(client: &reqwest::Client, url: &str, ok: F) -> Value {
    poll_within(client, url, 200, ok).await
}

/// [`poll`] `tries` times, 50 ms apart.
async fn poll_within<F: Fn(&Value) -> bool>(
    client: &reqwest::Client,
    url: &str,
    tries: usize,
    ok: F,
) -> Value {
    for _ in 0..tries {
        if let Ok(r) = client.get(url).send().await {
            if let Ok(v) = r.json::<Value>().await {
                if ok(&v) {
                    return v;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} never satisfied the condition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_run_is_stored_localized_on_a_span_and_written_back() {
    let (logs, got) = logs_receiver().await;
    let server = start(fast(ServeConfig {
        writeback: WriteBack {
            otlp_logs: Some(logs),
            ..WriteBack::default()
        },
        ..ServeConfig::default()
    }))
    .await;
    let client = reqwest::Client::new();
    let summary: Value =
        serde_json::from_str(&recorded("genai.summary.json").join("\n")).expect("summary");
    let lines = recorded("genai.jsonl");
    let mut span_ids = std::collections::BTreeSet::new();
    for line in &lines {
        // As OTLP/JSON...
        let r = client
            .post(format!("{}/v1/traces", server.base))
            .header("content-type", "application/json")
            .body(line.clone())
            .send()
            .await
            .expect("post json");
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.expect("body"), "{}");
        // ...and again as gzip protobuf: stored once.
        let req = maslens_otlp::decode::decode_request(
            line.as_bytes(),
            maslens_otlp::Encoding::Json,
            None,
            1 << 24,
        )
        .expect("decodes");
        for s in maslens_otlp::span::flatten(&req).spans {
            span_ids.insert(s.span_id);
        }
        let r = client
            .post(format!("{}/v1/traces", server.base))
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "gzip")
            .body(gzip(&req.encode_to_vec()))
            .send()
            .await
            .expect("post protobuf");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-type"].to_str().expect("ct"),
            "application/x-protobuf"
        );
    }
    let conv = summary["conversation_id"].as_str().expect("conversation");
    let run = poll(&client, &format!("{}/api/runs/{conv}", server.base), |v| {
        v["diagnoses"].as_array().is_some_and(|d| !d.is_empty())
    })
    .await;
    assert_eq!(run["run"]["state"], "complete");
    assert_eq!(run["run"]["n_spans"].as_u64(), Some(span_ids.len() as u64));
    assert_eq!(
        run["trace"]["steps"].as_array().map(Vec::len),
        summary["steps"].as_u64().map(|n| n as usize)
    );
    let d = &run["diagnoses"][0];
    assert_eq!(d["method"], "prior");
    let span = d["span_id"].as_str().expect("the diagnosis names a span");
    assert!(span_ids.contains(span), "{span} is one of the run's spans");
    // The step the prior chose is the one whose span it names.
    let step = d["step"].as_u64().expect("step");
    let chosen = run["trace"]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["index"].as_u64() == Some(step))
        .expect("step exists");
    assert_eq!(chosen["span"]["span_id"].as_str(), Some(span));
    assert_eq!(chosen["agent"], d["agent"]);
    // Written back as a gen_ai.evaluation.result event on that span.
    for _ in 0..100 {
        if !got.lock().expect("lock").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bodies = got.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 1, "one write-back");
    let logs = maslens_otlp::export::decode_logs(&bodies[0]).expect("logs");
    let rec = &logs.resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(rec.event_name, "gen_ai.evaluation.result");
    assert_eq!(hex::encode(&rec.span_id), span);
    // Listed, filterable.
    let list: Value = client
        .get(format!(
            "{}/api/runs?state=complete&agent=WebSurfer",
            server.base
        ))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(list["runs"].as_array().map(Vec::len), Some(1));
    let _ = server.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_answer_and_the_server_keeps_serving() {
    let server = start(fast(ServeConfig {
        max_body_bytes: 1 << 20,
        ..ServeConfig::default()
    }))
    .await;
    // A fresh connection per request: after refusing a too-large body the server closes that
    // connection without reading the rest, and a pooled client could pick it up again (a real
    // exporter retries that; the test should not depend on the race).
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let url = format!("{}/v1/traces", server.base);
    let post = |ct: &'static str, body: Vec<u8>| {
        client
            .post(url.clone())
            .header("content-type", ct)
            .body(body)
    };
    let line = recorded("genai.jsonl").remove(0);
    let req = maslens_otlp::decode::decode_request(
        line.as_bytes(),
        maslens_otlp::Encoding::Json,
        None,
        1 << 24,
    )
    .expect("decodes");
    let pb = req.encode_to_vec();
    // Truncated protobuf.
    let r = post("application/x-protobuf", pb[..pb.len() / 2].to_vec())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    // Wrong content type.
    let r = post("text/plain", b"hello".to_vec())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 415);
    // Too large.
    let r = post("application/json", vec![b' '; 2 << 20])
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 413);
    // A small gzip body that inflates past the limit (a zip bomb): refused after reading it whole.
    let r = client
        .post(url.clone())
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzip(&vec![b' '; 4 << 20]))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 413);
    assert!(r.text().await.expect("text").contains("larger than"));
    // Spans without ids: accepted with a partial-success count and its reason.
    let body =
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","traceId":"","spanId":""}]}]}]}"#;
    let r = post("application/json", body.as_bytes().to_vec())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["partialSuccess"]["rejectedSpans"], "1");
    assert!(v["partialSuccess"]["errorMessage"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    // A NUL in a span's name and agent name (issue 35): stored with U+FFFD, named in the
    // partial-success message, and the good span beside it is kept; no retryable 503.
    let body = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/redteam/otlp/nul-bytes.json"),
    )
    .expect("red-team request");
    let r = post("application/json", body).send().await.expect("send");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    let msg = v["partialSuccess"]["errorMessage"].as_str().unwrap_or("");
    assert!(
        msg.contains("0af7651916cd43dd8448eb211c80319c/b7ad6b7169203331"),
        "{v}"
    );
    for id in [
        "0af7651916cd43dd8448eb211c80319c",
        "1af7651916cd43dd8448eb211c80319c",
    ] {
        poll(&client, &format!("{}/api/runs/{id}", server.base), |v| {
            v["trace"].is_object()
        })
        .await;
    }
    // The red-team rerun's requests (tests/redteam/otlp/): ids that do not parse are rejected
    // span by span; ids and names too long for an index are stored (bounded) without a 503.
    let redteam = |name: &str| {
        std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/redteam/otlp")
                .join(name),
        )
        .expect("red-team request")
    };
    let r = post("application/json", redteam("bad-span-ids.json"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["partialSuccess"]["rejectedSpans"], "2", "{v}");
    // Text that is not UTF-8 (a lone surrogate escape, a raw 0xFF byte): repaired, not a 400.
    let r = post("application/json", redteam("not-utf8.json"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    let msg = v["partialSuccess"]["errorMessage"].as_str().unwrap_or("");
    assert!(msg.contains("2 strings held text that is not UTF-8"), "{v}");
    let run = poll(
        &client,
        &format!("{}/api/runs/2af7651916cd43dd8448eb211c80319c", server.base),
        |v| v["trace"].is_object(),
    )
    .await;
    assert!(
        run["trace"].to_string().contains("Plan\u{fffd}ner"),
        "{run}"
    );
    let r = post("application/json", redteam("long-ids.json"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    // 20,000 empty spans: 60 KB that would be 2.5 MB decoded.
    let bomb = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        vec!["{}"; 20_000].join(",")
    );
    let r = post("application/json", bomb.into_bytes())
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .expect("text")
        .contains("empty or tiny messages"));
    // Still serving.
    let r = post("application/x-protobuf", pb)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    // API errors are JSON with a reason.
    let r = client
        .post(format!("{}/api/jobs", server.base))
        .json(&serde_json::json!({"method": "nope", "run": "x"}))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 422);
    assert!(r.json::<Value>().await.expect("json")["error"]
        .as_str()
        .is_some_and(|e| e.contains("nope")));
    let r = client
        .get(format!("{}/api/runs?before=garbage", server.base))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    let _ = server.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_openapi_and_jobs_on_imported_traces() {
    let server = start(fast(ServeConfig {
        token: Some("s3cret".into()),
        ..ServeConfig::default()
    }))
    .await;
    let client = reqwest::Client::new();
    let r = client
        .get(format!("{}/api/status", server.base))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
    let r = client
        .get(format!("{}/api/status", server.base))
        .bearer_auth("wrong!")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
    let r = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    // Every GET route of the OpenAPI document answers (no 404/405), with the token.
    let spec: Value = client
        .get(format!("{}/openapi.json", server.base))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(spec["openapi"], "3.1.0");
    let paths = spec["paths"].as_object().expect("paths");
    for (method, path, _) in serve::openapi::ROUTES {
        assert!(paths.contains_key(*path), "{path} documented");
        let url = format!("{}{}", server.base, path.replace("{id}", "missing"));
        let r = client
            .request(method.to_uppercase().parse().expect("method"), url)
            .bearer_auth("s3cret")
            .send()
            .await
            .expect("send");
        assert_ne!(r.status(), 405, "{method} {path}");
        if !path.contains("{id}") {
            assert_ne!(r.status(), 404, "{method} {path}");
        }
    }
    // Import a trace, queue the prior on it, poll the job to a diagnosis.
    let trace = maslens_trace::TraceBuilder::new("imported-1")
        .task("q")
        .step("Planner", "plan")
        .step("Coder", "code")
        .build();
    let r = client
        .post(format!("{}/api/runs", server.base))
        .bearer_auth("s3cret")
        .json(&trace)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 201);
    let r: Value = client
        .post(format!("{}/api/jobs", server.base))
        .bearer_auth("s3cret")
        .json(&serde_json::json!({"method": "prior", "filter": {"source": "import"}}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let job = r["jobs"][0]["id"].as_str().expect("job id").to_string();
    let authed = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                "Bearer s3cret".parse().expect("header"),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .expect("client");
    let done = poll(&authed, &format!("{}/api/jobs/{job}", server.base), |v| {
        v["state"] == "done"
    })
    .await;
    let run: Value = authed
        .get(format!("{}/api/runs/imported-1", server.base))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(run["diagnoses"][0]["id"], done["diagnosis_id"]);
    assert_eq!(run["run"]["located_agent"], run["diagnoses"][0]["agent"]);
    let _ = server.stop.send(true);
}

/// Issue 35: no simple cross-origin request writes, no foreign Host name reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_origin_writes_and_foreign_hosts_are_refused() {
    let server = start(fast(ServeConfig::default())).await;
    let client = reqwest::Client::new();
    let trace = r#"{"id":"t1","task":"q","steps":[{"index":0,"agent":"A","content":"x"}]}"#;
    let send = |path: &str, headers: &[(&str, &str)], body: &str| {
        let mut r = client
            .post(format!("{}{path}", server.base))
            .body(body.to_string());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    // A text/plain (simple) POST to the API, an OTLP POST with no content type: 415.
    let r = send("/api/runs", &[("content-type", "text/plain")], trace)
        .await
        .expect("post");
    assert_eq!(r.status(), 415);
    let r = send("/v1/traces", &[], "{}").await.expect("post");
    assert_eq!(r.status(), 415);
    // A page on another origin (another port of 127.0.0.1 included): 403, whatever the type.
    let host = server.base.trim_start_matches("http://").to_string();
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let r = send(
            "/v1/traces",
            &[("content-type", "application/json"), ("origin", origin)],
            "{}",
        )
        .await
        .expect("post");
        assert_eq!(r.status(), 403, "{origin}");
    }
    // A foreign Host name (DNS rebinding) reads nothing.
    let r = client
        .get(format!("{}/api/runs", server.base))
        .header("host", "rebind.evil.example")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 421);
    // The same origin, with JSON: accepted.
    let origin = format!("http://{host}");
    let r = send(
        "/v1/traces",
        &[("content-type", "application/json"), ("origin", &origin)],
        "{}",
    )
    .await
    .expect("post");
    assert_eq!(r.status(), 200);
    let r = client
        .get(format!("{}/api/runs", server.base))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
}

/// Issue 35: `POST /api/runs` with an OTLP run's id is a 409 (it answered 201 with a hash that
/// was never stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_over_an_otlp_run_is_a_conflict() {
    let server = start(fast(ServeConfig::default())).await;
    let client = reqwest::Client::new();
    let id = "2af7651916cd43dd8448eb211c80319c";
    let body = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"name":"chat","traceId":"{id}","spanId":"d7ad6b7169203331"}}]}}]}}]}}"#
    );
    let r = client
        .post(format!("{}/v1/traces", server.base))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 200);
    poll(&client, &format!("{}/api/runs/{id}", server.base), |v| {
        v["trace"].is_object()
    })
    .await;
    let trace = serde_json::json!({"id": id, "task": "q",
        "steps": [{"index": 0, "agent": "A", "content": "x"}]});
    let r = client
        .post(format!("{}/api/runs", server.base))
        .json(&trace)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 409);
    // Ids the store does not take are the request's fault (422 with the reason), never a
    // retryable 503; a NUL in the text is replaced and the trace stored (201).
    for (id, status) in [("", 422), ("otlp:x", 422), ("nul\u{0}id", 422), ("ok", 201)] {
        let trace = serde_json::json!({"id": id, "task": "t\u{0}",
            "steps": [{"index": 0, "agent": "A\u{0}", "content": "x"}]});
        let r = client
            .post(format!("{}/api/runs", server.base))
            .json(&trace)
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), status, "{id:?}");
    }
}

/// Issue 36 item 5: stopping returns within 5 s while a job waits on a model that never
/// answers (it waited for the job), and the job goes back to the queue for the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_interrupts_a_running_job_and_queues_it_again() {
    let (model_addr, store, hash, _dir) = hanging_model_and_one_run().await;
    let config = fast(ServeConfig {
        model: format!("openai:m@http://{model_addr}/v1/"),
        llm: maslens_llm::OpenOptions {
            cache_mode: maslens_llm::CacheMode::Off,
            ..maslens_llm::OpenOptions::default()
        },
        ..ServeConfig::default()
    });
    let state = AppState::new(store.clone(), config).expect("state");
    let job = serve::pipeline::enqueue(&store, "r1", serve::JobMethod::Llm, &hash, &Value::Null)
        .await
        .expect("enqueue");
    let (stop, rx) = tokio::sync::watch::channel(false);
    let background = tokio::spawn(serve::background(state, rx));
    for _ in 0..100 {
        let j = store.job(&job.id).await.expect("job").expect("exists");
        if j.state == maslens_store::JobState::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = std::time::Instant::now();
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(5), background)
        .await
        .expect("stopped within 5 s")
        .expect("joined");
    assert!(t.elapsed() < Duration::from_secs(5));
    let j = store.job(&job.id).await.expect("job").expect("exists");
    assert_eq!(j.state, maslens_store::JobState::Queued, "{j:?}");
}

/// Issue 36 item 3: a run maslens cannot understand (Google ADK with its default, no message
/// content; recorded from a real run) says so on the API, the list and the trace page, and gets
/// no diagnosis presented as one: none on arrival, and a job asked for it fails saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_content_says_so_and_gets_no_diagnosis() {
    let server = start(fast(ServeConfig::default())).await;
    let client = reqwest::Client::new();
    send_recording(&client, &server.base, "adk_no_content.jsonl").await;
    let list = poll(&client, &format!("{}/api/runs", server.base), |v| {
        v["runs"][0]["state"] == "complete"
    })
    .await;
    let row = &list["runs"][0];
    let codes: Vec<&str> = row["warnings"]
        .as_array()
        .expect("warnings in the list")
        .iter()
        .filter_map(|w| w["code"].as_str())
        .collect();
    assert!(codes.contains(&"no_content"), "{row}");
    let id = row["id"].as_str().expect("id");
    let one = client
        .get(format!("{}/api/runs/{id}", server.base))
        .send()
        .await
        .expect("get")
        .json::<Value>()
        .await
        .expect("json");
    assert_eq!(one["run"]["warnings"], row["warnings"]);
    let fix = one["run"]["warnings"][0]["fix"]
        .as_str()
        .unwrap_or_default();
    assert!(fix.contains("CAPTURE_MESSAGE_CONTENT"), "{fix}");
    // Nothing was diagnosed on arrival; a job asked for fails and says why.
    assert_eq!(one["diagnoses"].as_array().map(Vec::len), Some(0), "{one}");
    let r = client
        .post(format!("{}/api/jobs", server.base))
        .json(&serde_json::json!({"run": id, "method": "prior"}))
        .send()
        .await
        .expect("job");
    assert_eq!(r.status(), 202);
    let jobs = r.json::<Value>().await.expect("json");
    let job = jobs["jobs"][0]["id"].as_str().expect("job id").to_string();
    let done = poll(&client, &format!("{}/api/jobs/{job}", server.base), |v| {
        v["state"] == "failed"
    })
    .await;
    let error = done["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("not understood") && error.contains("no_content"),
        "{done}"
    );
    // The UI says it on the trace page and in the list.
    let page = client
        .get(format!("{}/ui/traces/{id}", server.base))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(page.contains("id=\"run-warnings\"") && page.contains("id=\"not-diagnosed\""));
    let list = client
        .get(format!("{}/ui/traces", server.base))
        .send()
        .await
        .expect("list")
        .text()
        .await
        .expect("html");
    assert!(list.contains("not understood"), "the list marks the run");

    // A warning that leaves steps to read (LlamaIndex's own exporter on streamed calls: the last
    // answer is in no span) is shown, and the run is still diagnosed.
    send_recording(&client, &server.base, "llamaindex_native.jsonl").await;
    let list = poll(&client, &format!("{}/api/runs", server.base), |v| {
        v["runs"].as_array().is_some_and(|runs| {
            runs.iter().any(|r| {
                r["id"] != id && r["state"] == "complete" && r["warnings"][0]["code"] == "no_output"
            })
        })
    })
    .await;
    let streamed = list["runs"]
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["id"] != id))
        .and_then(|r| r["id"].as_str())
        .expect("the LlamaIndex run")
        .to_string();
    let run = poll(
        &client,
        &format!("{}/api/runs/{streamed}", server.base),
        |v| v["diagnoses"].as_array().is_some_and(|d| !d.is_empty()),
    )
    .await;
    assert_eq!(run["diagnoses"][0]["method"], "prior");
}

/// A red-team finding: a model endpoint that never answers kept a job `running` with no error
/// for the model's timeout times its retries (12 minutes by default), holding the LLM lane. The
/// job fails after `job_timeout` with the reason now, and the lane is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_a_model_that_never_answers_fails_after_the_job_timeout() {
    let (model_addr, store, hash, _dir) = hanging_model_and_one_run().await;
    let config = fast(ServeConfig {
        model: format!("openai:m@http://{model_addr}/v1/"),
        llm: maslens_llm::OpenOptions {
            cache_mode: maslens_llm::CacheMode::Off,
            ..maslens_llm::OpenOptions::default()
        },
        job_timeout: Duration::from_millis(500),
        max_attempts: 1,
        ..ServeConfig::default()
    });
    let state = AppState::new(store.clone(), config).expect("state");
    let job = serve::pipeline::enqueue(&store, "r1", serve::JobMethod::Llm, &hash, &Value::Null)
        .await
        .expect("enqueue");
    let (_stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(serve::background(state, rx));
    let mut last = None;
    for _ in 0..100 {
        let j = store.job(&job.id).await.expect("job").expect("exists");
        if j.state == maslens_store::JobState::Failed {
            last = Some(j);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let j = last.expect("the job failed within 5 s");
    let error = j.error.unwrap_or_default();
    assert!(
        error.contains("timed out after 0.5 s") && error.contains(&model_addr.to_string()),
        "{error}"
    );
    // The job timeout must be shorter than the lease.
    let long = ServeConfig {
        job_timeout: Duration::from_secs(900),
        ..ServeConfig::default()
    };
    assert!(AppState::new(store.clone(), long).is_err());
}

/// A red-team finding: with its SQLite file deleted, `serve` acknowledged spans (200) into a
/// file no path named, lost at exit, with no warning. Writes are refused with 503 now (the
/// exporter keeps them and retries), and `/health` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_store_file_refuses_writes_and_says_so() {
    let server = start(fast(ServeConfig::default())).await;
    let client = reqwest::Client::new();
    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200);
    let db = server._dir.path().join("maslens.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let line = recorded("genai.jsonl").remove(0);
    let r = client
        .post(format!("{}/v1/traces", server.base))
        .header("content-type", "application/json")
        .body(line)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 503);
    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 503);
    let why = health.text().await.expect("text");
    assert!(why.contains("deleted or replaced"), "{why}");
}

/// A model endpoint that accepts connections and never answers, and a store holding one run
/// (`r1`, two steps): its address, the store, the run's trace hash and the store's folder.
async fn hanging_model_and_one_run() -> (
    std::net::SocketAddr,
    maslens_store::Store,
    String,
    tempfile::TempDir,
) {
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let model_addr = hang.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = hang.accept().await {
            held.push(c);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let store = maslens_store::Store::open(&maslens_store::default_url(dir.path()))
        .await
        .expect("store");
    let trace = maslens_trace::TraceBuilder::new("r1")
        .task("q")
        .step("A", "x")
        .step("B", "y")
        .build();
    let hash = store.put_trace(&trace).await.expect("put");
    (model_addr, store, hash, dir)
}

/// Every request of a recorded OTLP/JSON export (tests/otel/recorded), each answered 200.
async fn send_recording(client: &reqwest::Client, base: &str, name: &str) {
    for line in recorded(name) {
        let r = client
            .post(format!("{base}/v1/traces"))
            .header("content-type", "application/json")
            .body(line)
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 200, "{name}");
    }
}

/// A chat-completions endpoint that answers every call with one location (step 1, agent B)
/// and, for the taxonomy Judge's prompt, its modes first; it counts the taxonomy prompts seen.
async fn taxonomy_model() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let counter = counter.clone();
            async move {
                let last = body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or_default();
                let mut answer = serde_json::json!({
                    "reason": "\"The capital of Australia is Sydney\": it is Canberra.",
                    "agent": "B", "step": 1, "confidence": 0.8});
                if last.contains("1. Modes:") {
                    counter.fetch_add(1, Ordering::SeqCst);
                    answer["modes_seen"] = serde_json::json!([{"code": "FM-2.4", "step": 1}]);
                    answer["error_mode"] = "FM-2.4".into();
                }
                axum::Json(serde_json::json!({
                    "id": "c", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": answer.to_string()}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// Issue 40: a job runs any Judge protocol the CLI has (`"protocol"` on `POST /api/jobs`, the
/// "Judge protocol" menu in the UI), and a protocol that is unknown, or given to a method
/// without a Judge, is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_the_judge_protocol_it_names() {
    let (model_addr, seen) = taxonomy_model().await;
    let server = start(fast(ServeConfig {
        model: format!("openai:m@http://{model_addr}/v1/"),
        llm: maslens_llm::OpenOptions {
            cache_mode: maslens_llm::CacheMode::Off,
            ..maslens_llm::OpenOptions::default()
        },
        ..ServeConfig::default()
    }))
    .await;
    let client = reqwest::Client::new();
    let trace = serde_json::json!({"id": "capital", "task": "Name the capital of Australia.",
        "outcome": "failure", "steps": [
            {"index": 0, "agent": "A", "content": "Let me look up the capital of Australia."},
            {"index": 1, "agent": "B", "content": "The capital of Australia is Sydney."}]});
    let r = client
        .post(format!("{}/api/runs", server.base))
        .json(&trace)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 201);
    let job = |body: Value| {
        client
            .post(format!("{}/api/jobs", server.base))
            .json(&body)
            .send()
    };
    for (body, says) in [
        (
            serde_json::json!({"method": "llm", "protocol": "nope", "run": "capital"}),
            "taxonomy",
        ),
        (
            serde_json::json!({"method": "prior", "protocol": "a2p", "run": "capital"}),
            "not prior",
        ),
    ] {
        let r = job(body).await.expect("send");
        assert_eq!(r.status(), 422);
        let e = r.json::<Value>().await.expect("json");
        assert!(e["error"].as_str().is_some_and(|e| e.contains(says)), "{e}");
    }
    let r = job(serde_json::json!({"method": "llm", "protocol": "taxonomy", "run": "capital"}))
        .await
        .expect("send");
    assert_eq!(r.status(), 202);
    let jobs = r.json::<Value>().await.expect("json");
    assert_eq!(jobs["jobs"][0]["params"]["protocol"], "taxonomy", "{jobs}");
    let id = jobs["jobs"][0]["id"].as_str().expect("id").to_string();
    let done = poll(&client, &format!("{}/api/jobs/{id}", server.base), |v| {
        v["state"] == "done" || v["state"] == "failed"
    })
    .await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
    let run = client
        .get(format!("{}/api/runs/capital", server.base))
        .send()
        .await
        .expect("get")
        .json::<Value>()
        .await
        .expect("json");
    // The prior's diagnosis on arrival may be there too: the job's is the LLM one.
    let d = run["diagnoses"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["method"] != "prior"))
        .unwrap_or_else(|| panic!("no diagnosis of the job: {run}"));
    assert_eq!((&d["agent"], &d["step"]), (&"B".into(), &1.into()), "{d}");
    assert_eq!(d["params"]["options"]["protocol"], "taxonomy", "{d}");
}

/// One OTLP/JSON request of `spans` chat spans, all of one trace, numbered from `first`.
fn chat_batch(first: usize, spans: usize) -> String {
    let out: Vec<Value> = (first..first + spans)
        .map(|n| {
            let msg = serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": format!("turn {n}")}]}]);
            let start = 1_767_225_600_000_000_000u64 + n as u64 * 1_000_000;
            let agent = if n % 2 == 0 { "Planner" } else { "Coder" };
            serde_json::json!({
                "traceId": "6c1a0e2b9d8f4a3b8e7d6c5b4a392817",
                "spanId": format!("{:016x}", n + 1),
                "name": "chat gpt-4o-mini",
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": (start + 900_000).to_string(),
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                    {"key": "gen_ai.agent.name", "value": {"stringValue": agent}},
                    {"key": "gen_ai.output.messages", "value": {"stringValue": msg.to_string()}},
                ],
            })
        })
        .collect();
    serde_json::json!({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": out}]}]})
        .to_string()
}

/// Issue 35 F18: a run sent in many batches is assembled at a pace (a multiple of its last
/// assembly's time) rather than on every batch, and its stored trace still ends with every span
/// once the batches stop (`bench/serve_growing_run.py` measures the CPU it saves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_sent_in_many_batches_ends_whole_under_the_assembly_pace() {
    let server = start(fast(ServeConfig {
        assembly_pace: 8.0,
        ..ServeConfig::default()
    }))
    .await;
    let client = reqwest::Client::new();
    let (batches, per) = (12, 300);
    for b in 0..batches {
        let r = client
            .post(format!("{}/v1/traces", server.base))
            .header("content-type", "application/json")
            .body(chat_batch(b * per, per))
            .send()
            .await
            .expect("post");
        assert_eq!(r.status(), 200);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = (batches * per) as u64;
    let list = poll_within(&client, &format!("{}/api/runs", server.base), 600, |v| {
        v["runs"][0]["n_spans"].as_u64() == Some(total) && v["runs"][0]["state"] == "complete"
    })
    .await;
    let last = &list["runs"][0];
    assert_eq!(last["n_spans"].as_u64(), Some(total), "{last}");
    assert_eq!(last["n_steps"].as_u64(), Some(total), "{last}");
    assert_eq!(last["state"], "complete", "{last}");
    let _ = server.stop.send(true);
}
