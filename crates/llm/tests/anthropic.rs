//! `anthropic:` / `anthropic/` specs speak the native Messages API, against the fixture server:
//! headers, system blocks with `cache_control`, merged turns, structured output through a forced
//! tool, usage with prompt-cache tokens, errors and retries, Message Batches export and import.
//! Environment variables are per process; nextest runs each test in its own, and only
//! `anthropic_base_url_is_read_from_its_variable` sets one.

use maslens_llm::batch::{import_output, read_requests};
use maslens_llm::stack::{open, CacheMode, OpenOptions, Stack};
use maslens_llm::structured::complete_json;
use maslens_llm::testing::server::{FakeServer, Reply};
use maslens_llm::{ChatRequest, LlmError, Message};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

fn opts(dir: &std::path::Path) -> OpenOptions {
    let config = dir.join("llm.toml");
    std::fs::write(&config, "").unwrap();
    OpenOptions {
        cache_mode: CacheMode::Off,
        config: Some(config),
        api_key: Some("sk-ant-test".into()),
        ..Default::default()
    }
}

async fn stack(server: &FakeServer, opts: OpenOptions) -> Stack {
    open(&format!("anthropic/claude-x@{}", server.base_url()), &opts)
        .await
        .unwrap()
}

/// A 200 answer with this Messages API body.
fn answer(body: Value) -> Reply {
    Reply::Status {
        code: 200,
        body: body.to_string(),
        retry_after: None,
    }
}

fn tool_answer(input: Value, usage: Value) -> Reply {
    answer(
        json!({"type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "answer", "input": input}],
        "stop_reason": "tool_use", "usage": usage}),
    )
}

fn error(code: u16, kind: &str, message: &str) -> Reply {
    Reply::Status {
        code,
        body: json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
        retry_after: Some("0".into()),
    }
}

/// A server that records every body it receives and answers with `reply`.
async fn recording(
    reply: impl Fn(&Value, u64) -> Reply + Send + Sync + 'static,
) -> (FakeServer, Arc<Mutex<Vec<Value>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let b = bodies.clone();
    let server = FakeServer::start(Arc::new(move |body: &Value, n| {
        b.lock().unwrap().push(body.clone());
        reply(body, n)
    }))
    .await
    .unwrap();
    (server, bodies)
}

fn received(server: &FakeServer) -> u64 {
    server.counts.received.load(Ordering::SeqCst)
}

#[tokio::test]
async fn sends_messages_api_headers_system_blocks_and_merged_turns() {
    let dir = tempfile::tempdir().unwrap();
    let (server, bodies) = recording(|_, _| Reply::Text("fine".into())).await;
    let s = stack(&server, opts(dir.path())).await;
    assert_eq!(s.model.id(), "anthropic:claude-x");
    let req = ChatRequest::new(vec![
        Message::system("You judge traces."),
        Message::user("trace: ..."),
        Message::user("question: ..."),
    ])
    .max_tokens(64);
    let r = s.model.complete(&req).await.unwrap();
    assert_eq!(
        (r.text.as_str(), r.finish_reason.as_str()),
        ("fine", "stop")
    );

    let line = server.counts.last_request_line.lock().unwrap().clone();
    assert!(line.starts_with("POST /v1/messages "), "{line}");
    let headers = server.counts.last_headers.lock().unwrap().clone();
    assert_eq!(
        headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-test")
    );
    assert_eq!(
        headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert!(!headers.contains_key("authorization"), "{headers:?}");

    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You judge traces.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "trace: ...\n\nquestion: ..."}])
    );
    assert_eq!(
        (body["model"].clone(), body["max_tokens"].clone()),
        (json!("claude-x"), json!(64))
    );
    assert!(body.get("seed").is_none() && body.get("response_format").is_none());
}

#[tokio::test]
async fn anthropic_base_url_is_read_from_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::echo().await.unwrap();
    // The Anthropic SDKs' convention: the host, without `/v1`.
    // SAFETY: set before any thread of this test reads the environment; one process per test.
    unsafe { std::env::set_var("ANTHROPIC_BASE_URL", format!("http://{}", server.addr())) };
    let s = open("anthropic:claude-x", &opts(dir.path())).await.unwrap();
    let r = s
        .model
        .complete(&ChatRequest::new(vec![Message::user("ping")]))
        .await
        .unwrap();
    assert_eq!(r.text, "echo: ping");
    assert_eq!(received(&server), 1);
    let line = server.counts.last_request_line.lock().unwrap().clone();
    assert!(line.starts_with("POST /v1/messages "), "{line}");
}

#[tokio::test]
async fn structured_output_is_a_forced_tool_call() {
    let dir = tempfile::tempdir().unwrap();
    let usage = json!({"input_tokens": 5, "output_tokens": 7});
    let (server, bodies) =
        recording(move |_, _| tool_answer(json!({"agent": "planner", "step": 3}), usage.clone()))
            .await;
    let s = stack(&server, opts(dir.path())).await;
    let schema = json!({"type": "object", "required": ["agent", "step"],
        "properties": {"agent": {"type": "string"}, "step": {"type": "integer"}}});
    let out = complete_json(
        &*s.model,
        ChatRequest::new(vec![Message::user("who failed?")]),
        &schema,
    )
    .await
    .unwrap();
    assert_eq!(out.value, Some(json!({"agent": "planner", "step": 3})));
    assert!(!out.repaired);
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(body["tools"][0]["name"], "answer");
    assert_eq!(body["tools"][0]["input_schema"], schema);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "answer"})
    );
}

#[tokio::test]
async fn a_non_object_schema_is_wrapped_and_the_answer_unwrapped() {
    let dir = tempfile::tempdir().unwrap();
    let (server, bodies) = recording(|_, _| tool_answer(json!({"value": [2, 5]}), json!({}))).await;
    let s = stack(&server, opts(dir.path())).await;
    let schema = json!({"type": "array", "items": {"type": "integer"}});
    let out = complete_json(
        &*s.model,
        ChatRequest::new(vec![Message::user("which steps?")]),
        &schema,
    )
    .await
    .unwrap();
    assert_eq!(out.value, Some(json!([2, 5])));
    assert_eq!(
        bodies.lock().unwrap()[0]["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {"value": schema}, "required": ["value"]})
    );
}

#[tokio::test]
async fn usage_counts_prompt_cache_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Arc::new(|_, _| {
        answer(
            json!({"type": "message", "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "max_tokens",
            "usage": {"input_tokens": 10, "output_tokens": 4,
                      "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}}),
        )
    }))
    .await
    .unwrap();
    let s = stack(&server, opts(dir.path())).await;
    let r = s
        .model
        .complete(&ChatRequest::new(vec![Message::user("q")]))
        .await
        .unwrap();
    assert_eq!(r.finish_reason, "length");
    assert_eq!(
        (
            r.usage.prompt_tokens,
            r.usage.cached_tokens,
            r.usage.completion_tokens
        ),
        (1110, 1000, 4)
    );
    let total = s.usage.report().total;
    assert_eq!(total.usage().prompt_tokens, 1110);
    assert_eq!(total.usage().cached_tokens, 1000);
}

#[tokio::test]
async fn a_401_names_anthropic_api_key_and_a_403_says_to_check_it() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: as above; no test sets this variable.
    unsafe { std::env::remove_var("ANTHROPIC_API_KEY") };
    let server = FakeServer::start(Arc::new(|_, n| {
        if n == 0 {
            error(401, "authentication_error", "invalid x-api-key")
        } else {
            error(403, "permission_error", "not allowed")
        }
    }))
    .await
    .unwrap();
    let q = ChatRequest::new(vec![Message::user("hi")]);
    let no_key = OpenOptions {
        api_key: None,
        ..opts(dir.path())
    };
    let err = stack(&server, no_key)
        .await
        .model
        .complete(&q)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("authentication_error: invalid x-api-key")
            && err.contains("set ANTHROPIC_API_KEY"),
        "{err}"
    );
    let err = stack(&server, opts(dir.path()))
        .await
        .model
        .complete(&q)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("permission_error: not allowed") && err.contains("ANTHROPIC_API_KEY"),
        "{err}"
    );
    assert_eq!(received(&server), 2, "401 and 403 are not retried");
}

#[tokio::test]
async fn overloaded_529_is_retried_then_answered() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Arc::new(|_, n| {
        if n < 2 {
            error(529, "overloaded_error", "Overloaded")
        } else {
            Reply::Text("after the storm".into())
        }
    }))
    .await
    .unwrap();
    let s = stack(&server, opts(dir.path())).await;
    let r = s
        .model
        .complete(&ChatRequest::new(vec![Message::user("q")]))
        .await
        .unwrap();
    assert_eq!(r.text, "after the storm");
    assert_eq!(received(&server), 3);
    let line = server.counts.last_request_line.lock().unwrap().clone();
    assert!(line.starts_with("POST /v1/messages "), "{line}");
}

#[tokio::test]
async fn a_400_is_not_retried_and_its_message_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Arc::new(|_, _| {
        error(
            400,
            "invalid_request_error",
            "max_tokens: must be at most 8192",
        )
    }))
    .await
    .unwrap();
    let s = stack(&server, opts(dir.path())).await;
    let err = s
        .model
        .complete(&ChatRequest::new(vec![Message::user("q")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LlmError::Http { status: 400, body, url, .. }
            if body == "invalid_request_error: max_tokens: must be at most 8192"
                && url.ends_with("/v1/messages")),
        "{err}"
    );
    assert_eq!(received(&server), 1);
}

#[tokio::test]
async fn batches_export_message_batches_lines_and_import_their_results() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("batch.jsonl");
    let base = OpenOptions {
        cache_path: Some(dir.path().join("c.sqlite")),
        ..opts(dir.path())
    };
    // Nothing listens on port 9: export and replay send nothing.
    let spec = "anthropic/claude-x@http://127.0.0.1:9/v1";
    let plain = ChatRequest::new(vec![Message::system("sys"), Message::user("plain")]);
    let list_schema = json!({"type": "array", "items": {"type": "integer"}});
    let listed = ChatRequest::new(vec![Message::user("list")]).json_schema(list_schema.clone());
    let export = open(
        spec,
        &OpenOptions {
            cache_mode: CacheMode::Export(file.clone()),
            ..base.clone()
        },
    )
    .await
    .unwrap();
    for r in [&plain, &listed] {
        assert!(matches!(
            export.model.complete(r).await,
            Err(LlmError::Deferred { .. })
        ));
    }
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let id = |i: usize| lines[i]["custom_id"].as_str().unwrap().to_string();
    for (i, l) in lines.iter().enumerate() {
        let keys: Vec<&String> = l.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["custom_id", "params"], "line {i}");
        let ok = id(i).len() <= 64
            && id(i)
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        assert!(ok, "custom_id {}", id(i));
        assert_eq!(l["params"]["model"], "claude-x");
    }
    assert_eq!(
        lines[0]["params"]["system"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(lines[1]["params"]["tool_choice"]["name"], "answer");
    drop(export);
    // `batch run` reads the lines back as the requests they came from.
    let (reqs, bad) = read_requests(&file).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(
        reqs.into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
        [plain.clone(), listed.clone()]
    );

    // Results in another order, one of each failure kind, and an OpenAI Batch line beside them.
    let message = |content: Value| {
        json!({"type": "message", "role": "assistant", "model": "claude-x", "content": content,
               "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 2}})
    };
    let results = [
        json!({"custom_id": id(1), "result": {"type": "succeeded", "message": message(
            json!([{"type": "tool_use", "id": "t", "name": "answer", "input": {"value": [1, 4]}}]))}}),
        json!({"custom_id": "k-errored", "result": {"type": "errored", "error": {"type": "error",
            "error": {"type": "invalid_request_error", "message": "bad params"}}}}),
        json!({"custom_id": "k-canceled", "result": {"type": "canceled"}}),
        json!({"custom_id": "k-expired", "result": {"type": "expired"}}),
        json!({"custom_id": id(0), "result": {"type": "succeeded",
            "message": message(json!([{"type": "text", "text": "from the batch"}]))}}),
        json!({"custom_id": "k-openai", "response": {"status_code": 200, "body": {"model": "gpt-4o-mini",
            "choices": [{"message": {"role": "assistant", "content": "o"}, "finish_reason": "stop"}]}}}),
    ];
    let out = dir.path().join("results.jsonl");
    let text: String = results.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&out, text).unwrap();
    let cache = maslens_llm::cache::Cache::open(dir.path().join("c.sqlite")).unwrap();
    let rep = import_output(&cache, &out).unwrap();
    assert_eq!((rep.imported, rep.unknown_keys), (3, 1));
    let errs: Vec<(usize, &str)> = rep
        .errors
        .iter()
        .map(|e| (e.line, e.message.as_str()))
        .collect();
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert_eq!(errs[0].0, 2);
    assert!(
        errs[0].1.contains("invalid_request_error: bad params"),
        "{errs:?}"
    );
    assert!(
        errs[1].1.contains("canceled") && errs[2].1.contains("expired"),
        "{errs:?}"
    );

    // Rerun offline: the answers come from the cache, the wrapped one unwrapped.
    let replay = open(
        spec,
        &OpenOptions {
            cache_mode: CacheMode::Replay,
            ..base
        },
    )
    .await
    .unwrap();
    let r = replay.model.complete(&plain).await.unwrap();
    assert_eq!((r.text.as_str(), r.from_cache), ("from the batch", true));
    let out = complete_json(&*replay.model, listed.clone(), &list_schema)
        .await
        .unwrap();
    assert_eq!(out.value, Some(json!([1, 4])));
}
