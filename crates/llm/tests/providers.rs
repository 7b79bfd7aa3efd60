//! Each `provider/MODEL` form reaches its server with the provider's usual key variable, against
//! the fixture server (OpenAI chat completions, Gemini through its OpenAI-compatible endpoint;
//! Anthropic speaks its Messages API, which the fixture answers too: `tests/anthropic.rs`).
//! Environment variables are per process; nextest runs each test in its own.

use maslens_llm::stack::{open, CacheMode, OpenOptions};
use maslens_llm::testing::server::{FakeServer, Reply};
use maslens_llm::{ChatRequest, ChatResponse, LlmError, Message};

fn opts(dir: &std::path::Path) -> OpenOptions {
    let config = dir.join("llm.toml");
    std::fs::write(&config, "").unwrap();
    OpenOptions {
        cache_mode: CacheMode::Off,
        config: Some(config),
        ..Default::default()
    }
}

/// Opens `spec` (cache off) and sends it one user message: the model id and the answer.
async fn ask(
    dir: &std::path::Path,
    spec: &str,
    text: &str,
) -> (String, Result<ChatResponse, LlmError>) {
    let stack = open(spec, &opts(dir)).await.unwrap();
    let answer = stack
        .model
        .complete(&ChatRequest::new(vec![Message::user(text)]))
        .await;
    (stack.model.id().to_string(), answer)
}

fn set(var: &str, value: &str) {
    // SAFETY: set before any thread of this test reads the environment; one process per test.
    unsafe { std::env::set_var(var, value) }
}

#[tokio::test]
async fn every_provider_form_sends_its_key_to_its_server_and_names_its_model_id() {
    let dir = tempfile::tempdir().unwrap();
    for (provider, key_var) in [
        ("openai", Some("OPENAI_API_KEY")),
        ("gemini", Some("GEMINI_API_KEY")),
        ("anthropic", Some("ANTHROPIC_API_KEY")),
        ("ollama", None),
        ("vllm", Some("VLLM_API_KEY")),
    ] {
        if let Some(var) = key_var {
            set(var, &format!("key-of-{provider}"));
        }
        let server = FakeServer::echo().await.unwrap();
        for spec in [
            format!("{provider}/fixture-model@{}", server.base_url()),
            format!("{provider}:fixture-model@{}", server.base_url()),
        ] {
            let (id, r) = ask(dir.path(), &spec, "hi").await;
            assert_eq!(id, format!("{provider}:fixture-model"), "{spec}");
            let r = r.unwrap();
            assert!(r.text.contains("hi"), "{spec}: {r:?}");
            let auth = server.counts.last_authorization.lock().unwrap().clone();
            let x_api_key = server
                .counts
                .last_headers
                .lock()
                .unwrap()
                .get("x-api-key")
                .cloned();
            let key = key_var.map(|_| format!("key-of-{provider}"));
            if provider == "anthropic" {
                assert_eq!((auth, x_api_key), (None, key), "{spec}");
            } else {
                assert_eq!(
                    (auth, x_api_key),
                    (key.map(|k| format!("Bearer {k}")), None),
                    "{spec}"
                );
            }
        }
    }
}

#[tokio::test]
async fn ollama_and_vllm_find_their_server_in_their_variables() {
    let dir = tempfile::tempdir().unwrap();
    let ollama = FakeServer::echo().await.unwrap();
    let vllm = FakeServer::echo().await.unwrap();
    // Ollama's own convention is host:port; vLLM's a URL.
    set("OLLAMA_HOST", &ollama.addr().to_string());
    set("VLLM_BASE_URL", &vllm.base_url());
    for (spec, server) in [
        ("ollama/llama3.2:3b", &ollama),
        ("vllm/Qwen/Qwen2.5-7B-Instruct", &vllm),
    ] {
        let r = ask(dir.path(), spec, "ping").await.1.unwrap();
        assert!(r.text.contains("ping"), "{spec}: {r:?}");
        assert_eq!(
            server
                .counts
                .received
                .load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{spec}"
        );
    }
}

#[tokio::test]
async fn a_missing_key_is_named_after_the_provider_variable() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(std::sync::Arc::new(|_, _| Reply::Status {
        code: 401,
        body: r#"{"error": {"message": "no key"}}"#.into(),
        retry_after: None,
    }))
    .await
    .unwrap();
    let spec = format!("gemini/gemini-2.0-flash@{}", server.base_url());
    let err = ask(dir.path(), &spec, "hi")
        .await
        .1
        .unwrap_err()
        .to_string();
    assert!(err.contains("GEMINI_API_KEY"), "{err}");
}
