//! Fault injection against the fixture HTTP server: 429 with Retry-After, 5xx, slow responses,
//! non-JSON and truncated bodies, dropped connections, servers rejecting `response_format`.
//! Bounded retries, the right error, no panic, nothing lost from the cache.

use maslens_llm::openai::{OpenAiConfig, OpenAiModel, SchemaMode};
use maslens_llm::retry::RetryModel;
use maslens_llm::stack::{wrap, CacheMode, OpenOptions};
use maslens_llm::testing::server::{last_user, FakeServer, Handler, Reply};
use maslens_llm::usage::PriceTable;
use maslens_llm::{ChatModel, ChatRequest, LlmError, Message};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn handler(f: impl Fn(&Value, u64) -> Reply + Send + Sync + 'static) -> Handler {
    Arc::new(f)
}

fn model(server: &FakeServer, tweak: impl FnOnce(&mut OpenAiConfig)) -> RetryModel<OpenAiModel> {
    let mut cfg = OpenAiConfig::new("fixture-model", server.base_url());
    cfg.retry.max_retries = 3;
    cfg.retry.initial_backoff = Duration::from_millis(10);
    cfg.retry.max_backoff = Duration::from_millis(40);
    cfg.timeout = Duration::from_secs(5);
    tweak(&mut cfg);
    OpenAiModel::retrying(cfg).unwrap()
}

fn q(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)])
}

fn ok(b: &Value) -> Reply {
    Reply::Text(format!("echo: {}", last_user(b)))
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let server = FakeServer::start(handler(|b, n| {
        if n == 0 {
            Reply::Status {
                code: 429,
                body: r#"{"error":"slow down"}"#.into(),
                retry_after: Some("1".into()),
            }
        } else {
            ok(b)
        }
    }))
    .await
    .unwrap();
    let m = model(&server, |_| {});
    let t = Instant::now();
    let r = m.complete(&q("hi")).await.unwrap();
    assert_eq!(r.text, "echo: hi");
    assert!(
        t.elapsed() >= Duration::from_millis(990),
        "Retry-After: 1 not honoured: {:?}",
        t.elapsed()
    );
    assert_eq!(m.backend().attempts(), 2);
    assert!(r.latency_ms >= 990);
}

#[tokio::test]
async fn retries_5xx_then_succeeds_and_gives_up_after_the_bound() {
    let server = FakeServer::start(handler(|b, n| {
        if last_user(b) == "always" || n < 2 {
            Reply::Status {
                code: 503,
                body: "overloaded".into(),
                retry_after: None,
            }
        } else {
            ok(b)
        }
    }))
    .await
    .unwrap();
    let m = model(&server, |_| {});
    assert_eq!(m.complete(&q("x")).await.unwrap().text, "echo: x");
    assert_eq!(m.backend().attempts(), 3);
    let e = m.complete(&q("always")).await.unwrap_err();
    assert!(
        matches!(e, LlmError::Http { status: 503, ref body, .. } if body == "overloaded"),
        "{e}"
    );
    assert_eq!(m.backend().attempts(), 3 + 4, "1 try + 3 retries");
}

#[tokio::test]
async fn no_retry_on_other_4xx_and_the_error_quotes_the_server() {
    let server = FakeServer::start(handler(|_, _| Reply::Status {
        code: 400,
        body: r#"{"error":{"message":"max_tokens is too large: 99999"}}"#.into(),
        retry_after: None,
    }))
    .await
    .unwrap();
    let m = model(&server, |_| {});
    let e = m.complete(&q("x")).await.unwrap_err();
    assert!(e.to_string().contains("max_tokens is too large"), "{e}");
    assert!(e.to_string().contains("HTTP 400"), "{e}");
    assert_eq!(m.backend().attempts(), 1);
}

#[tokio::test]
async fn slow_responses_time_out_and_are_retried() {
    let server = FakeServer::start(handler(|b, n| {
        if n == 0 || last_user(b) == "always slow" {
            Reply::Delay(Duration::from_millis(1500), Box::new(ok(b)))
        } else {
            ok(b)
        }
    }))
    .await
    .unwrap();
    let m = model(&server, |c| {
        c.timeout = Duration::from_millis(300);
        c.retry.max_retries = 2;
    });
    assert_eq!(m.complete(&q("x")).await.unwrap().text, "echo: x");
    assert_eq!(m.backend().attempts(), 2);
    let t = Instant::now();
    let e = m.complete(&q("always slow")).await.unwrap_err();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e}");
    assert_eq!(m.backend().attempts(), 2 + 3);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn non_json_truncated_and_dropped_are_retried_then_reported() {
    for (fault, expect) in [
        (Reply::NotJson, "not JSON"),
        (Reply::Truncated, ""),
        (Reply::Drop, ""),
    ] {
        let f = fault.clone();
        let server = FakeServer::start(handler(move |b, n| if n == 0 { f.clone() } else { ok(b) }))
            .await
            .unwrap();
        let m = model(&server, |_| {});
        assert_eq!(
            m.complete(&q("x")).await.unwrap().text,
            "echo: x",
            "{fault:?} then ok"
        );
        assert_eq!(m.backend().attempts(), 2, "{fault:?}");

        let f = fault.clone();
        let server = FakeServer::start(handler(move |_, _| f.clone()))
            .await
            .unwrap();
        let m = model(&server, |c| c.retry.max_retries = 1);
        let e = m.complete(&q("x")).await.unwrap_err();
        match fault {
            Reply::NotJson => assert!(matches!(e, LlmError::BadResponse { .. }), "{e}"),
            _ => assert!(matches!(e, LlmError::Transport { .. }), "{fault:?}: {e}"),
        }
        assert!(e.to_string().contains(expect), "{e}");
        assert_eq!(m.backend().attempts(), 2, "{fault:?}");
    }
}

#[tokio::test]
async fn falls_back_when_the_server_rejects_json_schema() {
    let server = FakeServer::start(handler(|b, _| {
        match b.pointer("/response_format/type").and_then(Value::as_str) {
            Some("json_schema") => Reply::Status {
                code: 400,
                body: r#"{"error":"response_format json_schema is not supported"}"#.into(),
                retry_after: None,
            },
            Some("json_object") => Reply::Text("{\"ok\": true}".into()),
            _ => Reply::Text("plain".into()),
        }
    }))
    .await
    .unwrap();
    let m = model(&server, |_| {});
    let req = q("x").json_schema(json!({"type": "object"}));
    assert_eq!(m.complete(&req).await.unwrap().text, "{\"ok\": true}");
    assert_eq!(m.backend().attempts(), 2);
    // Remembered: the next request goes out as json_object directly.
    assert_eq!(m.complete(&req).await.unwrap().text, "{\"ok\": true}");
    assert_eq!(m.backend().attempts(), 3);
    // With fallback disabled, the rejection is an error.
    let strict = model(&server, |c| c.schema_mode = SchemaMode::JsonSchema);
    assert!(matches!(
        strict.complete(&req).await,
        Err(LlmError::Http { status: 400, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_bounded() {
    let server = FakeServer::start(handler(|b, _| {
        Reply::Delay(Duration::from_millis(40), Box::new(ok(b)))
    }))
    .await
    .unwrap();
    let m = Arc::new(model(&server, |c| c.concurrency = 4));
    let mut tasks = Vec::new();
    for i in 0..24 {
        let m = m.clone();
        tasks.push(tokio::spawn(async move {
            m.complete(&q(&format!("q{i}"))).await.map(|r| r.text)
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap(), format!("echo: q{i}"));
    }
    let max = server.counts.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=4).contains(&max), "max in flight {max}");
}

/// Through the whole stack with a cache: every call that succeeded is in the cache even though
/// others failed around it, and a replay run answers exactly those without the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_lost_from_the_cache_under_faults() {
    // Each prompt's first attempt fails in a way that depends on its number; retries succeed,
    // except for the 400s, which are final.
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    let server = FakeServer::start(handler(move |b, _| {
        let p = last_user(b);
        let first = seen.lock().unwrap().insert(p.clone());
        let i: u64 = p.trim_start_matches('q').parse().unwrap_or(0);
        match (i % 5, first) {
            (0, _) => Reply::Status {
                code: 400,
                body: "bad request".into(),
                retry_after: None,
            },
            (1, true) => Reply::Drop,
            (2, true) => Reply::Truncated,
            (3, true) => Reply::Status {
                code: 500,
                body: "oops".into(),
                retry_after: Some("0".into()),
            },
            (4, true) => Reply::NotJson,
            _ => ok(b),
        }
    }))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(model(&server, |c| {
        c.concurrency = 4;
        c.retry.max_retries = 4;
    }));
    let opts = OpenOptions {
        cache_path: Some(dir.path().join("c.sqlite")),
        ..Default::default()
    };
    let stack = wrap(backend.clone(), &opts, &PriceTable::defaults()).unwrap();
    let model = stack.model.clone();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let m = model.clone();
        tasks.push(tokio::spawn(async move {
            (i, m.complete(&q(&format!("q{i}"))).await)
        }));
    }
    let mut succeeded = Vec::new();
    for t in tasks {
        let (i, r) = t.await.unwrap();
        match r {
            Ok(resp) => {
                assert_eq!(resp.text, format!("echo: q{i}"));
                succeeded.push(i);
            }
            Err(e) => {
                assert_eq!(i % 5, 0, "only the 400s may fail, q{i} failed: {e}");
                assert!(matches!(e, LlmError::Http { status: 400, .. }));
            }
        }
    }
    assert_eq!(succeeded.len(), 32);
    let cache = stack.cache.clone().unwrap();
    assert_eq!(cache.len().unwrap(), 32);
    let report = stack.usage.report();
    assert_eq!((report.total.calls, report.total.errors), (40, 8));
    drop(server);

    let replay_opts = OpenOptions {
        cache_mode: CacheMode::Replay,
        ..opts
    };
    let replay = wrap(backend, &replay_opts, &PriceTable::defaults()).unwrap();
    for i in 0..40 {
        let r = replay.model.complete(&q(&format!("q{i}"))).await;
        if succeeded.contains(&i) {
            assert_eq!(r.unwrap().text, format!("echo: q{i}"));
        } else {
            assert!(matches!(r, Err(LlmError::ReplayMiss { .. })));
        }
    }
}

/// OpenAI reasoning models reject `max_tokens` and any non-default temperature with a 400; the
/// backend adapts once (not counted as a retry) and remembers it.
#[tokio::test]
async fn adapts_to_reasoning_model_parameter_rules() {
    let server = FakeServer::start(handler(|b, _| {
        if b.get("max_tokens").is_some() {
            Reply::Status {
                code: 400,
                body: r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."}}"#.into(),
                retry_after: None,
            }
        } else if b.get("temperature").is_some() {
            Reply::Status {
                code: 400,
                body: r#"{"error":{"message":"Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported."}}"#.into(),
                retry_after: None,
            }
        } else if b.get("max_completion_tokens").is_some() {
            ok(b)
        } else {
            Reply::Status { code: 400, body: "unexpected".into(), retry_after: None }
        }
    }))
    .await
    .unwrap();
    let m = model(&server, |c| c.retry.max_retries = 0);
    assert_eq!(m.complete(&q("x")).await.unwrap().text, "echo: x");
    assert_eq!(m.backend().attempts(), 3);
    assert_eq!(m.complete(&q("y")).await.unwrap().text, "echo: y");
    assert_eq!(m.backend().attempts(), 4, "remembered for the run");
    // A 400 that asks for nothing we can change is final.
    let other = FakeServer::start(handler(|_, _| Reply::Status {
        code: 400,
        body: r#"{"error":{"message":"'temperature' must be at most 2"}}"#.into(),
        retry_after: None,
    }))
    .await
    .unwrap();
    let m = model(&other, |_| {});
    assert!(matches!(
        m.complete(&q("x")).await,
        Err(LlmError::Http { status: 400, .. })
    ));
    assert_eq!(m.backend().attempts(), 1);
}
