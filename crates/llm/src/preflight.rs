//! A check, before a run does any work, that the model it names can answer: a hosted API without
//! its key is refused without a request; any other HTTP endpoint gets one cheap request
//! (`GET {base}/models`) with a short timeout and no retries, and an endpoint that cannot be
//! reached or rejects the key stops the run with one line naming the cause and the fix.
//!
//! Front ends turn it on with [`crate::OpenOptions::preflight`] (the options the config resolves
//! for the CLI and the Python package do); the cache modes that send nothing (`replay`,
//! `export:FILE`) skip it, and so does the embedded model.

use crate::spec::Provider;
use std::time::Duration;

/// How long the check waits for an answer, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(4);

/// Why a model cannot be used; each message ends with what to do.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// A hosted API and no key in the variable that should hold it.
    #[error(
        "{model} needs an API key and {var} is not set: export {var}=... (or name another \
         variable with --api-key-env), or pass --model for a model you can reach (docs/llm.md)"
    )]
    MissingKey { model: String, var: String },
    /// No answer: connection refused, unknown host, or nothing within [`TIMEOUT`].
    #[error(
        "{model}: cannot reach {url}; check the address (--base-url, or --model NAME@URL) and \
         the network, or pass another --model"
    )]
    Unreachable {
        model: String,
        url: String,
        #[source]
        source: Box<crate::LlmError>,
    },
    /// HTTP 401 or 403: the key is missing, wrong or lacks access.
    #[error("{model}: {url} refused the request (HTTP {status}): {fix}")]
    Rejected {
        model: String,
        url: String,
        status: u16,
        fix: String,
    },
}

/// Where an HTTP model is served and with which key (what [`check`] needs to know).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub provider: Provider,
    /// The model id, `openai:gpt-4o-mini`.
    pub model: String,
    pub base: String,
    pub key: Option<String>,
    /// The variable the key is read from.
    pub key_env: Option<String>,
}

impl Endpoint {
    /// Whether the endpoint is the provider's own hosted API (which always needs a key).
    fn hosted(&self) -> bool {
        matches!(
            self.provider,
            Provider::OpenAi | Provider::Gemini | Provider::Anthropic
        ) && self.base.trim_end_matches('/') == self.provider.default_base_url()
    }

    /// What to do about a refused key.
    fn key_fix(&self) -> String {
        let var = self.key_env.as_deref().unwrap_or("the key variable");
        match &self.key {
            None => format!("no API key was sent: set {var} (or --api-key-env NAME), or pass another --model"),
            Some(_) => format!("the key in {var} was refused: check it (or --api-key-env NAME), or pass another --model"),
        }
    }
}

/// The check: `Ok` when the model can be asked, else why not.
pub async fn check(ep: &Endpoint) -> Result<(), PreflightError> {
    if ep.key.is_none() && ep.hosted() {
        if let Some(var) = &ep.key_env {
            return Err(PreflightError::MissingKey {
                model: ep.model.clone(),
                var: var.clone(),
            });
        }
    }
    let url = format!("{}/models", ep.base.trim_end_matches('/'));
    let unreachable = |source: crate::LlmError| PreflightError::Unreachable {
        model: ep.model.clone(),
        url: ep.base.clone(),
        source: Box::new(source),
    };
    let client = crate::openai::http_client(TIMEOUT, 1).map_err(unreachable)?;
    let mut req = client.get(&url).timeout(TIMEOUT);
    if let Some(key) = &ep.key {
        req = match ep.provider {
            Provider::Anthropic => req
                .header("x-api-key", key)
                .header("anthropic-version", crate::anthropic::ANTHROPIC_VERSION),
            _ => req.bearer_auth(key),
        };
    }
    let resp = req
        .send()
        .await
        .map_err(|e| unreachable(crate::openai::transport_error(&url, TIMEOUT, e)))?;
    let status = resp.status().as_u16();
    match status {
        401 | 403 => Err(PreflightError::Rejected {
            model: ep.model.clone(),
            url,
            status,
            fix: ep.key_fix(),
        }),
        // Any other answer means the server is there; a server without `/models` (404) or one
        // busy for a moment (429, 5xx) is left to the run's own retries.
        _ => {
            if !(200..300).contains(&status) {
                tracing::debug!(%url, status, "preflight: the server answered; going on");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn endpoint(base: &str, key: Option<&str>) -> Endpoint {
        Endpoint {
            provider: Provider::OpenAi,
            model: "openai:gpt-4o-mini".into(),
            base: base.into(),
            key: key.map(str::to_string),
            key_env: Some("OPENAI_API_KEY".into()),
        }
    }

    /// A server answering every request with `status` (and counting them).
    async fn answering(status: u16) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = r#"{"error":{"message":"no key"}}"#;
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(format!("{head}{body}").as_bytes()).await;
            }
        });
        format!("http://{addr}/v1")
    }

    fn closed_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        format!("http://127.0.0.1:{port}/v1")
    }

    /// `(base, key, expected error kind or None, words the message must contain)`.
    type Case<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a [&'a str]);

    #[tokio::test]
    async fn each_endpoint_gets_its_cause_and_fix() {
        let ok = answering(200).await;
        let missing_models = answering(404).await;
        let refused = answering(401).await;
        let forbidden = answering(403).await;
        let closed = closed_port();
        let cases: Vec<Case> = vec![
            (
                "https://api.openai.com/v1",
                None,
                Some("MissingKey"),
                &["OPENAI_API_KEY", "--model"],
            ),
            (&ok, None, None, &[]),
            (&missing_models, Some("k"), None, &[]),
            (
                &refused,
                None,
                Some("Rejected"),
                &["HTTP 401", "no API key was sent: set OPENAI_API_KEY"],
            ),
            (
                &forbidden,
                Some("k"),
                Some("Rejected"),
                &["HTTP 403", "was refused", "OPENAI_API_KEY"],
            ),
            (
                &closed,
                None,
                Some("Unreachable"),
                &["cannot reach", "--base-url", "--model"],
            ),
        ];
        for (base, key, kind, words) in cases {
            let started = std::time::Instant::now();
            let r = check(&endpoint(base, key)).await;
            assert!(
                started.elapsed() < TIMEOUT + Duration::from_secs(1),
                "{base}"
            );
            match (kind, r) {
                (None, Ok(())) => {}
                (Some(k), Err(e)) => {
                    assert!(format!("{e:?}").starts_with(k), "{base}: {e:?}");
                    for w in words {
                        assert!(e.to_string().contains(w), "{base}: {e} lacks {w}");
                    }
                }
                (k, r) => panic!("{base}: expected {k:?}, got {r:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_server_that_never_answers_is_unreachable_within_the_timeout() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let started = std::time::Instant::now();
        let r = check(&endpoint(&format!("http://{addr}/v1"), Some("k"))).await;
        assert!(
            matches!(r, Err(PreflightError::Unreachable { .. })),
            "{r:?}"
        );
        assert!(started.elapsed() < TIMEOUT + Duration::from_secs(2));
    }
}
