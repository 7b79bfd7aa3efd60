//! Helpers shared by the CLI integration tests that drive the built `maslens` binary.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A file under the shared data folder beside the repository (`../shared/data/...`).
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/"
    ))
    .join(rel)
}

/// The built binary with an isolated home and cache, and no model or endpoint from the environment.
pub fn maslens(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_maslens"));
    c.env("MASLENS_HOME", home)
        .env("MASLENS_CACHE", home.join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MASLENS_MODEL")
        // No config file of the user's: an empty config directory inside the test's home.
        .env_remove("MASLENS_CONFIG")
        .env("XDG_CONFIG_HOME", home.join("xdg-config"))
        .args(args);
    c
}

/// Run a command off the async runtime (the fixture server lives on it).
pub async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Stdout parsed as JSON; panics with stdout and stderr when it is not.
pub fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}
/// A model server stub on a free loopback port: it answers the preflight's `GET .../models` with
/// 200 and every other request with HTTP 500, counting those. Returns the base URL (`.../v1`) and
/// the count of model calls that reached it, so a test can show a command never called the model.
pub fn stub_model_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    stub_model_server_with(std::time::Duration::ZERO, None)
}

/// [`stub_model_server`] that waits `delay` before each model call and, given `answer`, answers
/// it with that text (HTTP 200, OpenAI chat-completion shape) instead of HTTP 500.
pub fn stub_model_server_with(
    delay: std::time::Duration,
    answer: Option<&'static str>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = l.local_addr().expect("local address");
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 65536];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let (status, body) = if head.starts_with("GET ") && head.contains("/models") {
                let list = r#"{"object":"list","data":[{"id":"x","object":"model"}]}"#;
                ("200 OK", list.to_string())
            } else {
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(delay);
                match answer {
                    Some(text) => ("200 OK", chat_completion(text)),
                    None => (
                        "500 Internal Server Error",
                        r#"{"error":{"message":"stub: no model here"}}"#.to_string(),
                    ),
                }
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (format!("http://{addr}/v1"), calls)
}

/// An OpenAI chat completion answering `text`.
fn chat_completion(text: &str) -> String {
    serde_json::json!({
        "id": "stub", "object": "chat.completion", "model": "x",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
    .to_string()
}

pub mod browser;
pub mod serve;
pub mod tour;
