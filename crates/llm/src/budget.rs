//! Run budgets: stop cleanly after a number of backend calls, tokens or dollars.
//!
//! The budget sits directly above the backend, below the cache, so cache hits are free. Once a
//! limit is reached every further call fails fast with [`LlmError::Budget`]. Limits are checked
//! before each call against what has been spent so far, so calls already in flight when the
//! limit is crossed still finish (the overshoot is bounded by the concurrency).

use crate::usage::Price;
use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Limits of a run; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    pub max_calls: Option<u64>,
    /// Prompt + completion tokens.
    pub max_tokens: Option<u64>,
    /// USD, priced with the model's entry in the price table.
    pub max_cost: Option<f64>,
}

impl Budget {
    pub fn is_unlimited(&self) -> bool {
        self.max_calls.is_none() && self.max_tokens.is_none() && self.max_cost.is_none()
    }
}

/// What a budget layer has spent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub calls: u64,
    pub tokens: u64,
    pub cost_usd: f64,
}

/// A backend under a budget.
pub struct BudgetModel {
    inner: Arc<dyn ChatModel>,
    limits: Budget,
    price: Option<Price>,
    calls: AtomicU64,
    tokens: AtomicU64,
    cost: Mutex<f64>,
    exhausted: AtomicBool,
}

impl BudgetModel {
    /// `price` prices the calls for `max_cost`; with a cost limit and no price, an error.
    pub fn new(
        inner: Arc<dyn ChatModel>,
        limits: Budget,
        price: Option<Price>,
    ) -> Result<Self, LlmError> {
        if limits.max_cost.is_some() && price.is_none() {
            return Err(LlmError::Budget(format!(
                "--max-cost needs a price for {}; add it to a price table (--prices FILE)",
                inner.id()
            )));
        }
        Ok(BudgetModel {
            inner,
            limits,
            price,
            calls: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            cost: Mutex::new(0.0),
            exhausted: AtomicBool::new(false),
        })
    }

    pub fn spent(&self) -> Spent {
        Spent {
            calls: self.calls.load(Ordering::SeqCst),
            tokens: self.tokens.load(Ordering::SeqCst),
            cost_usd: self.cost(),
        }
    }

    fn cost(&self) -> f64 {
        match self.cost.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }

    fn refuse(&self, why: String) -> LlmError {
        if !self.exhausted.swap(true, Ordering::SeqCst) {
            tracing::warn!("budget exhausted: {why}; no further backend calls in this run");
        }
        LlmError::Budget(why)
    }
}

#[async_trait::async_trait]
impl crate::wrap::ModelWrapper for BudgetModel {
    fn inner(&self) -> &dyn ChatModel {
        &*self.inner
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if let Some(max) = self.limits.max_tokens {
            let used = self.tokens.load(Ordering::SeqCst);
            if used >= max {
                return Err(self.refuse(format!(
                    "{used} tokens used, limit {max} (--max-tokens-total)"
                )));
            }
        }
        if let Some(max) = self.limits.max_cost {
            let spent = self.cost();
            if spent >= max {
                return Err(self.refuse(format!("${spent:.4} spent, limit ${max:.4} (--max-cost)")));
            }
        }
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(max) = self.limits.max_calls {
            if n > max {
                self.calls.fetch_sub(1, Ordering::SeqCst);
                return Err(self.refuse(format!(
                    "{max} backend calls made, limit {max} (--max-calls)"
                )));
            }
        }
        let result = self.inner.complete(request).await;
        if let Ok(r) = &result {
            self.tokens.fetch_add(
                r.usage.prompt_tokens + r.usage.completion_tokens,
                Ordering::SeqCst,
            );
            if let Some(p) = self.price {
                let mut c = match self.cost.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                *c += p.cost(&r.usage);
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedModel;
    use crate::Message;

    fn q() -> ChatRequest {
        ChatRequest::new(vec![Message::user("four token prompt.")])
    }

    #[tokio::test]
    async fn max_calls_stops_cleanly() {
        let fixture = Arc::new(ScriptedModel::new("fixture").rule("", "ok"));
        let m = BudgetModel::new(
            fixture.clone(),
            Budget {
                max_calls: Some(2),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert!(m.complete(&q()).await.is_ok());
        assert!(m.complete(&q()).await.is_ok());
        for _ in 0..3 {
            let e = m.complete(&q()).await.unwrap_err();
            assert!(
                matches!(e, LlmError::Budget(ref s) if s.contains("--max-calls")),
                "{e}"
            );
        }
        assert_eq!(fixture.n_calls(), 2);
        assert_eq!(m.spent().calls, 2);
    }

    #[tokio::test]
    async fn token_and_cost_limits() {
        let fixture = Arc::new(ScriptedModel::new("fixture").rule("", "ok"));
        // Each call: 5 prompt + 1 completion tokens (fixture estimate).
        let m = BudgetModel::new(
            fixture.clone(),
            Budget {
                max_tokens: Some(10),
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert!(m.complete(&q()).await.is_ok());
        assert!(m.complete(&q()).await.is_ok());
        assert!(matches!(m.complete(&q()).await, Err(LlmError::Budget(_))));
        assert_eq!(m.spent().tokens, 12);

        let price = Price {
            input: 1e5,
            cached_input: None,
            output: 0.0,
        }; // 5 tokens = $0.5
        let m = BudgetModel::new(
            fixture.clone(),
            Budget {
                max_cost: Some(0.9),
                ..Default::default()
            },
            Some(price),
        )
        .unwrap();
        assert!(m.complete(&q()).await.is_ok());
        assert!(m.complete(&q()).await.is_ok());
        assert!(
            matches!(m.complete(&q()).await, Err(LlmError::Budget(ref s)) if s.contains("--max-cost"))
        );
        assert!(BudgetModel::new(
            fixture,
            Budget {
                max_cost: Some(1.0),
                ..Default::default()
            },
            None
        )
        .is_err());
    }
}
