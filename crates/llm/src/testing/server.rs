//! A fixture OpenAI-compatible HTTP server for tests and benchmarks (**not a model**): it answers
//! `/v1/chat/completions` with whatever a handler decides (a text, an HTTP error with
//! `Retry-After`, a non-JSON or truncated body, a dropped connection, after a delay) and counts
//! what it received and what it answered in full. A POST to a path ending in `/messages` is
//! answered as the Anthropic Messages API would ([`Reply::Text`] as a `message` with one text
//! block). HTTP/1.1 with keep-alive, on 127.0.0.1 only.
//! Hand-written on tokio rather than axum so that faults below HTTP (truncated bodies, dropped
//! connections) can be injected.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with a chat completion whose content is this text.
    Text(String),
    /// This status and body, with an optional `Retry-After` header value.
    Status {
        code: u16,
        body: String,
        retry_after: Option<String>,
    },
    /// 200 with an HTML body.
    NotJson,
    /// 200 whose `Content-Length` promises more than is sent before the connection closes.
    Truncated,
    /// Close the connection without answering.
    Drop,
    /// Wait, then do the inner reply.
    Delay(Duration, Box<Reply>),
}

/// Decides the reply from the request body and the request's number (0-based, over the server).
pub type Handler = Arc<dyn Fn(&Value, u64) -> Reply + Send + Sync>;

/// Received / fully answered counts, in total and per last user message.
#[derive(Default)]
pub struct Counts {
    pub received: AtomicU64,
    /// 200 answers written in full.
    pub answered: AtomicU64,
    /// Requests being handled now, and the most at any time.
    pub in_flight: AtomicU64,
    pub max_in_flight: AtomicU64,
    /// The `Authorization` header of the last request, if any.
    pub last_authorization: Mutex<Option<String>>,
    /// The request line (`POST /v1/messages HTTP/1.1`) and headers (names lower-cased) of the
    /// last request.
    pub last_request_line: Mutex<String>,
    pub last_headers: Mutex<HashMap<String, String>>,
    by_prompt: Mutex<HashMap<String, (u64, u64)>>,
}

impl Counts {
    /// (received, answered) for requests whose last user message is `prompt`.
    pub fn for_prompt(&self, prompt: &str) -> (u64, u64) {
        self.by_prompt
            .lock()
            .map(|m| m.get(prompt).copied().unwrap_or((0, 0)))
            .unwrap_or((0, 0))
    }
    /// All prompts seen with their (received, answered) counts.
    pub fn all(&self) -> HashMap<String, (u64, u64)> {
        self.by_prompt.lock().map(|m| m.clone()).unwrap_or_default()
    }
    fn bump(&self, prompt: &str, answered: bool) {
        if let Ok(mut m) = self.by_prompt.lock() {
            let e = m.entry(prompt.to_string()).or_default();
            if answered {
                e.1 += 1;
            } else {
                e.0 += 1;
            }
        }
    }
}

/// The running fixture server; stops accepting when dropped.
pub struct FakeServer {
    addr: SocketAddr,
    pub counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The last user message of a chat body (its text blocks joined, when it has blocks).
pub fn last_user(body: &Value) -> String {
    let content = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| {
            m.iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content"));
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// An Anthropic Messages API response answering `text` (one text block, `end_turn`).
pub fn message(body: &Value, text: &str) -> Value {
    let prompt = crate::estimate_tokens(
        &body
            .get("messages")
            .map(Value::to_string)
            .unwrap_or_default(),
    );
    json!({
        "id": "msg_fixture", "type": "message", "role": "assistant",
        "model": body.get("model").cloned().unwrap_or(Value::Null),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": prompt, "output_tokens": crate::estimate_tokens(text),
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    })
}

/// A chat-completion JSON answering `text`.
pub fn completion(body: &Value, text: &str) -> Value {
    let prompt: usize = body
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .filter_map(|m| m.get("content").and_then(Value::as_str))
                .map(crate::estimate_tokens)
                .sum()
        })
        .unwrap_or(0);
    json!({
        "id": "chatcmpl-fixture", "object": "chat.completion",
        "model": body.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": crate::estimate_tokens(text),
                  "total_tokens": prompt + crate::estimate_tokens(text),
                  "prompt_tokens_details": {"cached_tokens": 0}}
    })
}

impl FakeServer {
    /// Bind 127.0.0.1 on a free port and serve on the current tokio runtime.
    pub async fn start(handler: Handler) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (h, c) = (handler.clone(), c.clone());
                tokio::spawn(async move {
                    let _ = serve_conn(sock, h, c).await;
                });
            }
        });
        Ok(FakeServer { addr, counts, task })
    }

    /// A server that answers every request at once with `echo: <last user message>`.
    pub async fn echo() -> std::io::Result<FakeServer> {
        FakeServer::start(Arc::new(|b: &Value, _| {
            Reply::Text(format!("echo: {}", last_user(b)))
        }))
        .await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

async fn serve_conn(
    mut sock: TcpStream,
    handler: Handler,
    counts: Arc<Counts>,
) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    loop {
        // Read the head.
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 1 << 20 {
                return Ok(());
            }
            let mut chunk = [0u8; 8192];
            let n = sock.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or("").to_string();
        let mut content_length = 0usize;
        let mut close = false;
        let mut authorization = None;
        let mut headers = HashMap::new();
        for l in lines {
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                headers.insert(k.clone(), v.trim().to_string());
                if k == "content-length" {
                    content_length = v.trim().parse().unwrap_or(0);
                } else if k == "authorization" {
                    authorization = Some(v.trim().to_string());
                } else if k == "connection" && v.trim().eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        }
        while buf.len() < head_end + content_length {
            let mut chunk = [0u8; 8192];
            let n = sock.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body_bytes: Vec<u8> = buf[head_end..head_end + content_length].to_vec();
        buf.drain(..head_end + content_length);

        if request_line.starts_with("GET /v1/models") {
            let b = json!({"object": "list", "data": [{"id": "fixture", "object": "model"}]})
                .to_string();
            write_response(&mut sock, 200, &b, None).await?;
            continue;
        }
        let body: Value = match serde_json::from_slice(&body_bytes) {
            Ok(v) => v,
            Err(e) => {
                write_response(
                    &mut sock,
                    400,
                    &json!({"error": {"message": e.to_string()}}).to_string(),
                    None,
                )
                .await?;
                continue;
            }
        };
        if let Ok(mut a) = counts.last_authorization.lock() {
            *a = authorization;
        }
        if let Ok(mut r) = counts.last_request_line.lock() {
            r.clone_from(&request_line);
        }
        if let Ok(mut h) = counts.last_headers.lock() {
            *h = headers;
        }
        let anthropic = request_line
            .split_whitespace()
            .nth(1)
            .is_some_and(|path| path.ends_with("/messages"));
        let n = counts.received.fetch_add(1, Ordering::SeqCst);
        let _gauge = Gauge::enter(&counts);
        let prompt = last_user(&body);
        counts.bump(&prompt, false);
        let mut reply = handler(&body, n);
        loop {
            match reply {
                Reply::Delay(d, inner) => {
                    tokio::time::sleep(d).await;
                    reply = *inner;
                }
                Reply::Text(t) => {
                    let answer = if anthropic {
                        message(&body, &t)
                    } else {
                        completion(&body, &t)
                    };
                    write_response(&mut sock, 200, &answer.to_string(), None).await?;
                    counts.answered.fetch_add(1, Ordering::SeqCst);
                    counts.bump(&prompt, true);
                    break;
                }
                Reply::Status {
                    code,
                    body,
                    retry_after,
                } => {
                    write_response(&mut sock, code, &body, retry_after.as_deref()).await?;
                    break;
                }
                Reply::NotJson => {
                    write_response(&mut sock, 200, "<html>502 Bad Gateway</html>", None).await?;
                    break;
                }
                Reply::Truncated => {
                    let full = completion(&body, "this answer is cut").to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        full.len()
                    );
                    sock.write_all(head.as_bytes()).await?;
                    sock.write_all(&full.as_bytes()[..full.len() / 2]).await?;
                    sock.flush().await?;
                    return Ok(());
                }
                Reply::Drop => return Ok(()),
            }
        }
        if close {
            return Ok(());
        }
    }
}

/// Counts a request in flight until dropped.
struct Gauge<'a>(&'a Counts);

impl<'a> Gauge<'a> {
    fn enter(c: &'a Counts) -> Self {
        let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Gauge(c)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn write_response(
    sock: &mut TcpStream,
    code: u16,
    body: &str,
    retry_after: Option<&str>,
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(r) = retry_after {
        head.push_str(&format!("retry-after: {r}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    sock.write_all(&out).await
}
