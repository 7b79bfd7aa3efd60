//! Retries as a layer: [`RetryModel`] wraps any [`ChatModel`] and sends a request again when it
//! fails with an error worth retrying ([`LlmError::is_retryable`]: 408, 409, 429, 5xx, timeouts,
//! connection errors, unreadable bodies), waiting by [`Backoff`] (the server's `Retry-After` when
//! the error carries one). Both HTTP backends (OpenAI-compatible, Anthropic) make one attempt per
//! call and sit under this layer; `maslens_llm::open` puts it there. The budget layer sits above
//! it, so a retried call counts once.

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};
use rand::{Rng, SeedableRng};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Cap on a wait the server asks for with `Retry-After`.
    pub max_retry_after: Duration,
    /// Seed of the backoff jitter.
    pub jitter_seed: u64,
}

impl Default for RetryPolicy {
    /// 5 retries, backoff from 0.5 s to 30 s, `Retry-After` honoured up to 2 minutes.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
            jitter_seed: 0,
        }
    }
}

/// A model whose retryable failures are retried with backoff.
pub struct RetryModel<M> {
    inner: M,
    max_retries: u32,
    backoff: Backoff,
}

impl<M: ChatModel> RetryModel<M> {
    pub fn new(inner: M, policy: RetryPolicy) -> RetryModel<M> {
        RetryModel {
            inner,
            max_retries: policy.max_retries,
            backoff: Backoff::new(
                policy.initial_backoff,
                policy.max_backoff,
                policy.max_retry_after,
                policy.jitter_seed,
            ),
        }
    }

    /// The model it retries (for its own counters, such as an HTTP backend's attempts).
    pub fn backend(&self) -> &M {
        &self.inner
    }
}

#[async_trait::async_trait]
impl<M: ChatModel> crate::wrap::ModelWrapper for RetryModel<M> {
    fn inner(&self) -> &dyn ChatModel {
        &self.inner
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let start = Instant::now();
        let mut retries = 0u32;
        loop {
            match self.inner.complete(request).await {
                Ok(mut resp) => {
                    // The latency of the call, retries and waits included.
                    resp.latency_ms = start.elapsed().as_millis() as u64;
                    return Ok(resp);
                }
                Err(e) if e.is_retryable() && retries < self.max_retries => {
                    let wait = self.backoff.wait(retries, e.retry_after());
                    tracing::debug!(model = %self.inner.id(), retry = retries + 1,
                        wait_ms = wait.as_millis() as u64, "retrying after: {e}");
                    retries += 1;
                    tokio::time::sleep(wait).await;
                }
                Err(e) => {
                    if retries > 0 {
                        tracing::warn!(model = %self.inner.id(), retries, "giving up: {e}");
                    }
                    return Err(e);
                }
            }
        }
    }
}

/// Waits between retries: exponential with "equal jitter" from a seeded generator, or the
/// server's `Retry-After` (capped) plus up to 10%.
pub struct Backoff {
    initial: Duration,
    max: Duration,
    max_retry_after: Duration,
    rng: Mutex<rand_chacha::ChaCha8Rng>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, max_retry_after: Duration, seed: u64) -> Self {
        Backoff {
            initial,
            max,
            max_retry_after,
            rng: Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(seed)),
        }
    }

    /// The wait before retry number `retry` (0-based).
    pub fn wait(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let mut rng = match self.rng.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(wait) = retry_after {
            let wait = wait.min(self.max_retry_after);
            // Up to 10% extra so that many clients told the same instant do not return together.
            let extra = rng.gen_range(0.0..=0.1) * wait.as_secs_f64();
            return wait + Duration::from_secs_f64(extra);
        }
        let exp = self.initial.as_secs_f64() * 2f64.powi(retry.min(30) as i32);
        let cap = exp.min(self.max.as_secs_f64());
        // "Equal jitter": half fixed, half random.
        Duration::from_secs_f64(cap / 2.0 + rng.gen_range(0.0..=1.0) * cap / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedModel;
    use crate::Message;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(1000),
            Duration::from_secs(5),
            0,
        );
        let b0 = b.wait(0, None);
        assert!(
            b0 >= Duration::from_millis(50) && b0 <= Duration::from_millis(100),
            "{b0:?}"
        );
        let b3 = b.wait(3, None);
        assert!(
            b3 >= Duration::from_millis(400) && b3 <= Duration::from_millis(800),
            "{b3:?}"
        );
        let b9 = b.wait(9, None);
        assert!(b9 <= Duration::from_millis(1000), "{b9:?}");
        let ra = b.wait(0, Some(Duration::from_secs(60)));
        assert!(
            ra >= Duration::from_secs(5) && ra <= Duration::from_millis(5500),
            "{ra:?}"
        );
    }

    /// Fails with `error()` the first `failures` times, then answers.
    struct Flaky {
        failures: u32,
        calls: AtomicU32,
        error: fn() -> LlmError,
        ok: ScriptedModel,
    }

    #[async_trait::async_trait]
    impl ChatModel for Flaky {
        fn id(&self) -> &str {
            "flaky"
        }
        async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.failures {
                return Err((self.error)());
            }
            self.ok.complete(request).await
        }
    }

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            max_retry_after: Duration::from_millis(50),
            jitter_seed: 0,
        }
    }

    fn flaky(failures: u32, error: fn() -> LlmError) -> Flaky {
        Flaky {
            failures,
            calls: AtomicU32::new(0),
            error,
            ok: ScriptedModel::new("ok").then("fine"),
        }
    }

    fn overloaded() -> LlmError {
        LlmError::Http {
            status: 503,
            url: "u".into(),
            body: "busy".into(),
            retry_after: Some(Duration::from_millis(20)),
        }
    }

    #[tokio::test]
    async fn retries_what_is_retryable_up_to_the_bound_honouring_retry_after() {
        let q = ChatRequest::new(vec![Message::user("q")]);
        let m = RetryModel::new(flaky(2, overloaded), policy(2));
        let started = Instant::now();
        let r = m.complete(&q).await.unwrap();
        assert_eq!(r.text, "fine");
        assert_eq!(m.backend().calls.load(Ordering::SeqCst), 3);
        assert!(
            started.elapsed() >= Duration::from_millis(40),
            "two waits of Retry-After"
        );

        let m = RetryModel::new(flaky(3, overloaded), policy(2));
        let e = m.complete(&q).await.unwrap_err();
        assert!(matches!(e, LlmError::Http { status: 503, .. }), "{e}");
        assert_eq!(
            m.backend().calls.load(Ordering::SeqCst),
            3,
            "1 try + 2 retries"
        );
    }

    #[tokio::test]
    async fn other_errors_are_not_retried() {
        let q = ChatRequest::new(vec![Message::user("q")]);
        let bad_request = || LlmError::Http {
            status: 400,
            url: "u".into(),
            body: "no".into(),
            retry_after: None,
        };
        for error in [bad_request as fn() -> LlmError, || {
            LlmError::Budget("spent".into())
        }] {
            let m = RetryModel::new(flaky(1, error), policy(5));
            assert!(m.complete(&q).await.is_err());
            assert_eq!(m.backend().calls.load(Ordering::SeqCst), 1);
        }
    }
}
