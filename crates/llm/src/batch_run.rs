//! `batch run`: a file of requests through a model (the stack: cache, budget, backend) with a bounded
//! number of calls in flight, and the results file it writes.
//!
//! Results file: JSONL, one line per request in completion order, `{"line", "custom_id" (the
//! cache key), "text", "finish_reason", "usage", "from_cache"}` or `{"line", "custom_id", "error"}`.
//! A budget error stops starting new requests; the ones not started are counted.

use crate::batch::NumberedRequests;
use crate::cache::cache_key;
use crate::{ChatModel, ChatResponse, LlmError};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    pub requests: usize,
    pub ok: usize,
    pub errors: usize,
    pub bad_lines: usize,
    pub deferred: usize,
    /// Requests not started because the budget ran out.
    pub skipped_budget: usize,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_writes: u64,
    pub backend_calls: u64,
}

impl RunSummary {
    /// Cache counters of the run (hits, misses, writes) from the stack's cache.
    pub fn add_cache(&mut self, cache: &crate::cache::Cache) {
        let k = cache.counters();
        (self.cache_hits, self.cache_misses, self.cache_writes) = (k.hits, k.misses, k.writes);
    }

    /// Requests that were not answered: errors, bad lines and those the budget did not start.
    pub fn problems(&self) -> usize {
        self.errors + self.bad_lines + self.skipped_budget
    }

    /// The line `batch run` ends with.
    pub fn line(&self) -> String {
        format!(
            "{} requests: {} ok ({} from cache), {} errors, {} deferred, {} not started, {} bad lines",
            self.requests,
            self.ok,
            self.cache_hits,
            self.errors,
            self.deferred,
            self.skipped_budget,
            self.bad_lines
        )
    }
}

/// One line of the results file.
pub fn result_line(line: usize, key: &str, result: &Result<ChatResponse, LlmError>) -> Value {
    match result {
        Ok(r) => json!({"line": line, "custom_id": key, "text": r.text,
            "finish_reason": r.finish_reason, "usage": r.usage, "from_cache": r.from_cache}),
        Err(e) => json!({"line": line, "custom_id": key, "error": e.to_string()}),
    }
}

/// Run `reqs` through `model` with at most `concurrency` calls in flight (stage `batch` where a
/// request has none). `on_line` gets each results-file line as it completes; an error from it
/// ends the run. Fills `requests`, `ok`, `errors`, `deferred` and `skipped_budget` of the
/// summary (the caller adds bad lines and cache counters).
pub async fn run_requests<E>(
    model: Arc<dyn ChatModel>,
    reqs: NumberedRequests,
    concurrency: usize,
    mut on_line: impl FnMut(&Value) -> Result<(), E>,
) -> Result<RunSummary, E> {
    let total = reqs.len();
    let mut summary = RunSummary {
        requests: total,
        ..RunSummary::default()
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let producer = {
        let (limit, stop) = (limit.clone(), stop.clone());
        tokio::spawn(async move {
            let mut started = 0usize;
            for (line, mut req) in reqs {
                let Ok(permit) = limit.clone().acquire_owned().await else {
                    break;
                };
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                if req.stage.is_empty() {
                    req.stage = "batch".into();
                }
                started += 1;
                let (tx, model, stop) = (tx.clone(), model.clone(), stop.clone());
                tokio::spawn(async move {
                    let key = cache_key(model.id(), &req);
                    let result = model.complete(&req).await;
                    // Before the permit goes: the next request must see the stop, or with one
                    // call in flight it starts before the receiver has read this result.
                    if matches!(result, Err(LlmError::Budget(_))) {
                        stop.store(true, Ordering::SeqCst);
                    }
                    drop(permit);
                    let _ = tx.send((line, key, result));
                });
            }
            started
        })
    };
    while let Some((line, key, result)) = rx.recv().await {
        match &result {
            Ok(_) => summary.ok += 1,
            Err(LlmError::Deferred { .. }) => summary.deferred += 1,
            Err(e) => {
                summary.errors += 1;
                if matches!(e, LlmError::Budget(_)) {
                    stop.store(true, Ordering::SeqCst);
                } else {
                    tracing::warn!("line {line}: {e}");
                }
            }
        }
        if let Err(e) = on_line(&result_line(line, &key, &result)) {
            stop.store(true, Ordering::SeqCst);
            limit.close();
            return Err(e);
        }
    }
    let started = producer.await.unwrap_or(0);
    summary.skipped_budget = total - started;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedModel;
    use crate::{ChatRequest, Message};

    #[tokio::test]
    async fn every_request_gets_one_result_line() {
        let model: Arc<dyn ChatModel> =
            Arc::new(ScriptedModel::new("m").then("a").then("b").then("c"));
        let reqs: NumberedRequests = (1..=3)
            .map(|i| (i, ChatRequest::new(vec![Message::user(format!("q{i}"))])))
            .collect();
        let mut lines = Vec::new();
        let s = run_requests(model, reqs, 2, |v| {
            lines.push(v.clone());
            Ok::<(), std::io::Error>(())
        })
        .await
        .unwrap();
        assert_eq!((s.requests, s.ok, s.errors, s.skipped_budget), (3, 3, 0, 0));
        let mut nums: Vec<u64> = lines.iter().map(|v| v["line"].as_u64().unwrap()).collect();
        nums.sort();
        assert_eq!(nums, [1, 2, 3]);
        assert!(lines
            .iter()
            .all(|v| v["custom_id"].is_string() && v["text"].is_string()));
        let err = result_line(4, "k", &Err(LlmError::Other("boom".into())));
        assert_eq!(err, json!({"line": 4, "custom_id": "k", "error": "boom"}));
    }
}
