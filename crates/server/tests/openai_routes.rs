//! The OpenAI-compatible routes over a hand-written fixture (`ScriptedModel`, not a model):
//! response shapes, errors, SSE. The real-model test is `crates/cli/tests/serve_model_e2e.rs`.

use maslens_llm::testing::ScriptedModel;
use serde_json::{json, Value};
use std::sync::Arc;

async fn start(
    fixture: ScriptedModel,
) -> (String, Arc<ScriptedModel>, tokio::sync::oneshot::Sender<()>) {
    let fixture = Arc::new(fixture);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let router = maslens_server::router(fixture.clone(), "fixture-model");
    tokio::spawn(maslens_server::serve(listener, router, async move {
        let _ = rx.await;
    }));
    (format!("http://{addr}/v1"), fixture, tx)
}

#[tokio::test]
async fn chat_completion_has_the_openai_shape_and_passes_the_request_on() {
    let (base, fixture, _stop) = start(ScriptedModel::new("fixture").then(r#"{"ok":true}"#)).await;
    let client = reqwest::Client::new();
    let body = json!({
        "model": "fixture-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 9,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
    });
    let resp = client
        .post(format!("{base}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "fixture-model");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], r#"{"ok":true}"#);
    let usage = &v["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    assert!(usage["prompt_tokens_details"]["cached_tokens"].is_u64());
    let seen = fixture.calls.lock().unwrap()[0].clone();
    assert_eq!(seen.max_tokens, 9);
    assert_eq!(seen.json_schema, Some(json!({"type": "object"})));
}

#[tokio::test]
async fn models_bad_requests_backend_errors_and_streams() {
    // The fixture's script has one answer: the second completion fails in the "backend".
    let (base, _fixture, _stop) = start(ScriptedModel::new("fixture").then("hello")).await;
    let client = reqwest::Client::new();

    let v: Value = client
        .get(format!("{base}/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][0]["id"], "fixture-model");

    let resp = client
        .post(format!("{base}/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("not JSON"),
        "{v}"
    );

    let resp = client
        .post(format!("{base}/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x"}], "temperature": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("temperature"),
        "{v}"
    );

    let resp = client
        .post(format!("{base}/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x"}], "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 3, "{text}");
    let first: Value = serde_json::from_str(events[0].trim_start_matches("data: ")).unwrap();
    assert_eq!(first["choices"][0]["delta"]["content"], "hello");
    assert_eq!(events[2], "data: [DONE]");

    let resp = client
        .post(format!("{base}/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 500);
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("script exhausted"),
        "{v}"
    );

    let resp = client.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
}

/// Hand-written fixture (not a model): hands out a fixed answer in three pieces.
struct PiecesFixture;

impl maslens_server::StreamingModel for PiecesFixture {
    fn complete_streaming_blocking(
        &self,
        _request: &maslens_llm::ChatRequest,
        on_text: &mut dyn FnMut(&str),
        _cancelled: &dyn Fn() -> bool,
    ) -> Result<maslens_llm::ChatResponse, maslens_llm::LlmError> {
        for p in ["{\"a\":", " 1", "}"] {
            on_text(p);
        }
        Ok(maslens_llm::ChatResponse {
            text: "{\"a\": 1}".into(),
            finish_reason: "stop".into(),
            usage: maslens_llm::Usage {
                prompt_tokens: 5,
                completion_tokens: 3,
                cached_tokens: 2,
            },
            latency_ms: 1,
            from_cache: false,
            queue: maslens_llm::QueueWait {
                waited_us: 2_500,
                holder_last_step_us: Some(1_250),
            },
        })
    }
}

#[tokio::test]
async fn stream_true_sends_each_piece_as_it_comes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = maslens_server::router_with_streaming(
        Arc::new(ScriptedModel::new("fixture")),
        Some(Arc::new(PiecesFixture)),
        "fixture-model",
    );
    tokio::spawn(maslens_server::serve(
        listener,
        router,
        std::future::pending(),
    ));
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x"}], "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    // role, three pieces, finish + usage, [DONE]
    assert_eq!(events.len(), 6, "{text}");
    let chunks: Vec<Value> = events[..5]
        .iter()
        .map(|e| serde_json::from_str(e.trim_start_matches("data: ")).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks[1..4]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(content, "{\"a\": 1}");
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        chunks[4]["usage"]["prompt_tokens_details"]["cached_tokens"],
        2
    );
    assert_eq!(events[5], "data: [DONE]");

    // Answered whole, the reply says how long the request waited for the model.
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()[maslens_server::QUEUE_HEADER], "2.500");
    assert_eq!(
        resp.headers()[maslens_server::QUEUE_HOLDER_STEP_HEADER],
        "1.250"
    );
}

/// Hand-written fixture (not a model): hands out a piece every 5 ms for up to 20 s, and notes
/// when the server told it to stop.
#[derive(Default)]
struct EndlessFixture {
    cancelled_after_pieces: std::sync::Mutex<Option<usize>>,
}

impl maslens_server::StreamingModel for EndlessFixture {
    fn complete_streaming_blocking(
        &self,
        _request: &maslens_llm::ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<maslens_llm::ChatResponse, maslens_llm::LlmError> {
        for n in 0..4000 {
            if cancelled() {
                *self.cancelled_after_pieces.lock().unwrap() = Some(n);
                return Err(maslens_llm::LlmError::Cancelled("client gone".into()));
            }
            on_text("x");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Err(maslens_llm::LlmError::Other("never cancelled".into()))
    }
}

async fn wait_cancelled(fixture: &EndlessFixture) -> Option<usize> {
    for _ in 0..400 {
        if let Some(n) = *fixture.cancelled_after_pieces.lock().unwrap() {
            return Some(n);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_generation_streamed_or_not() {
    for stream in [true, false] {
        let fixture = Arc::new(EndlessFixture::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = maslens_server::router_with_streaming(
            Arc::new(ScriptedModel::new("fixture")),
            Some(fixture.clone()),
            "fixture-model",
        );
        tokio::spawn(maslens_server::serve(
            listener,
            router,
            std::future::pending(),
        ));
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(300))
            .build()
            .unwrap();
        let sent = client
            .post(format!("http://{addr}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "x"}], "stream": stream}))
            .send()
            .await;
        if stream {
            // Read the first bytes, then hang up.
            let mut resp = sent.unwrap();
            assert!(resp.chunk().await.unwrap().is_some());
            drop(resp);
        } else {
            assert!(
                sent.is_err(),
                "a 20 s answer cannot arrive within the 300 ms timeout"
            );
        }
        drop(client);
        let n = wait_cancelled(&fixture).await;
        // Without cancellation the fixture runs its full 20 s (4,000 pieces).
        assert!(
            n.is_some_and(|n| n < 1000),
            "stream={stream}: generation not cancelled within 4 s of the client leaving ({n:?})"
        );
    }
}

/// Issue 16 item 10: every error `serve-model` answers is OpenAI-shaped JSON (`error.message`),
/// the 413 for a body over the limit included (it was axum's plain text), and a `max_tokens`
/// that is too large says so (it was called "not a positive integer").
#[tokio::test]
async fn errors_are_openai_shaped_even_before_the_body_is_parsed() {
    let (base, fixture, _stop) = start(ScriptedModel::new("fixture")).await;
    let client = reqwest::Client::new();
    let big = format!(
        r#"{{"messages": [{{"role": "user", "content": "{}"}}]}}"#,
        "a".repeat(maslens_server::MAX_BODY_BYTES)
    );
    let resp = client
        .post(format!("{base}/chat/completions"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let v: Value = resp.json().await.expect("a JSON body");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larger than this server's limit of 2097152 bytes"),
        "{v}"
    );
    let resp = client
        .get(format!("{base}/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    let v: Value = resp.json().await.expect("a JSON body");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("POST"),
        "{v}"
    );
    let resp = client
        .post(format!("{base}/chat/completions"))
        .json(
            &json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999999u64}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("99999999999 is too large") && !m.contains("positive"),
        "{m}"
    );
    assert_eq!(fixture.n_calls(), 0, "nothing reached the model");
}
