//! Usage and cost: per-call, per-stage and per-run totals of calls, cache hits, prompt / cached /
//! completion tokens, wall time and cost from a price table.
//!
//! Prices are USD per million tokens, read from a TOML file; built-in defaults cover a few
//! public models (see `default_prices.toml`) and local models cost nothing.

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Usage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input: f64,
    /// Price of prompt tokens served from the provider's prompt cache; defaults to `input`.
    #[serde(default)]
    pub cached_input: Option<f64>,
    pub output: f64,
}

impl Price {
    /// Cost in USD of one call's usage.
    pub fn cost(&self, u: &Usage) -> f64 {
        let cached = u.cached_tokens.min(u.prompt_tokens);
        let fresh = u.prompt_tokens - cached;
        (fresh as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + u.completion_tokens as f64 * self.output)
            / 1e6
    }
}

/// Model name -> price. Names are matched without the `openai:` prefix, exactly, else by the
/// longest name that prefixes the model followed by `-` (`gpt-4o-mini-2024-07-18` ->
/// `gpt-4o-mini`). `local:` models are free.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PriceTable {
    #[serde(default)]
    pub models: BTreeMap<String, Price>,
}

const DEFAULT_PRICES: &str = include_str!("default_prices.toml");

impl PriceTable {
    /// The built-in defaults.
    pub fn defaults() -> PriceTable {
        // The file is compiled in and covered by a test; fall back to empty rather than panic.
        toml::from_str(DEFAULT_PRICES).unwrap_or_default()
    }

    /// Parse a TOML price table (`[models."NAME"] input = .. cached_input = .. output = ..`).
    pub fn from_toml(text: &str, origin: &str) -> Result<PriceTable, LlmError> {
        toml::from_str(text).map_err(|e| LlmError::Other(format!("price table {origin}: {e}")))
    }

    /// Read a TOML file and lay it over the defaults (its entries win).
    pub fn load_over_defaults(path: &Path) -> Result<PriceTable, LlmError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            LlmError::Other(format!("cannot read price table {}: {e}", path.display()))
        })?;
        let user = PriceTable::from_toml(&text, &path.display().to_string())?;
        let mut table = PriceTable::defaults();
        table.models.extend(user.models);
        Ok(table)
    }

    /// The price of a model id; `Some(zero)` for local models, `None` when unknown.
    pub fn lookup(&self, model_id: &str) -> Option<Price> {
        if model_id.starts_with("local:") {
            return Some(Price::default());
        }
        if let Some(p) = self.models.get(model_id) {
            return Some(*p);
        }
        let name = model_id.strip_prefix("openai:").unwrap_or(model_id);
        let norm = |k: &str| k.strip_prefix("openai:").unwrap_or(k).to_string();
        let mut best: Option<(usize, Price)> = None;
        for (k, p) in &self.models {
            let k = norm(k);
            let hit = name == k || (name.starts_with(&k) && name[k.len()..].starts_with('-'));
            if hit && best.is_none_or(|(len, _)| k.len() > len) {
                best = Some((k.len(), *p));
            }
        }
        best.map(|(_, p)| p)
    }
}

/// Totals of one stage (or of the run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageUsage {
    /// Requests made by the method (cache hits included).
    pub calls: u64,
    /// Requests answered from the maslens cache.
    pub cache_hits: u64,
    /// Requests that ended in an error (deferred ones not included).
    pub errors: u64,
    /// Requests written to a batch file instead of being sent (export mode).
    #[serde(default)]
    pub deferred: u64,
    /// Tokens of the calls answered by the backend in this run (cache hits cost nothing).
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
    /// Wall time summed over calls, in milliseconds (cache hits included).
    pub wall_ms: u64,
    /// USD spent on backend calls in this run.
    pub cost_usd: f64,
}

impl StageUsage {
    fn add(&mut self, o: &StageUsage) {
        self.calls += o.calls;
        self.cache_hits += o.cache_hits;
        self.errors += o.errors;
        self.deferred += o.deferred;
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.completion_tokens += o.completion_tokens;
        self.wall_ms += o.wall_ms;
        self.cost_usd += o.cost_usd;
    }
}

/// A snapshot of the tracker.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UsageReport {
    pub model: String,
    /// False when the model has no entry in the price table (cost then reads 0).
    pub price_known: bool,
    pub stages: BTreeMap<String, StageUsage>,
    pub total: StageUsage,
    /// Wall time since the tracker was created, in milliseconds.
    pub run_wall_ms: u64,
}

/// Collects usage per stage; shared by the stack and the command that reports it.
pub struct UsageTracker {
    model: String,
    price: Option<Price>,
    stages: Mutex<BTreeMap<String, StageUsage>>,
    started: Instant,
    log: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
}

impl UsageTracker {
    pub fn new(model: impl Into<String>, prices: &PriceTable) -> Self {
        let model = model.into();
        let price = prices.lookup(&model);
        if price.is_none() {
            tracing::warn!(
                model,
                "no price for this model in the price table: cost will read 0"
            );
        }
        UsageTracker {
            model,
            price,
            stages: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
            log: None,
        }
    }

    /// Also append one JSON line per call to `path` (flushed per line, so a killed run keeps
    /// what it logged): time, model, stage, cache hit, error, tokens, wall time, cost.
    pub fn with_log(mut self, path: &Path) -> Result<Self, LlmError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                LlmError::Other(format!("cannot open usage log {}: {e}", path.display()))
            })?;
        self.log = Some(Mutex::new(std::io::BufWriter::new(file)));
        Ok(self)
    }

    pub fn price(&self) -> Option<Price> {
        self.price
    }

    /// Record one call.
    pub fn record(&self, stage: &str, result: Result<&ChatResponse, &LlmError>, wall_ms: u64) {
        let stage = if stage.is_empty() { "-" } else { stage };
        let mut s = StageUsage {
            calls: 1,
            wall_ms,
            ..Default::default()
        };
        match result {
            Ok(r) if r.from_cache => s.cache_hits = 1,
            Ok(r) => {
                s.prompt_tokens = r.usage.prompt_tokens;
                s.cached_tokens = r.usage.cached_tokens;
                s.completion_tokens = r.usage.completion_tokens;
                s.cost_usd = self.price.map(|p| p.cost(&r.usage)).unwrap_or(0.0);
            }
            Err(LlmError::Deferred { .. }) => s.deferred = 1,
            Err(_) => s.errors = 1,
        }
        tracing::debug!(
            model = %self.model, stage, from_cache = s.cache_hits == 1, error = s.errors == 1,
            prompt_tokens = s.prompt_tokens, cached_tokens = s.cached_tokens,
            completion_tokens = s.completion_tokens, wall_ms, cost_usd = s.cost_usd, "llm call"
        );
        if let Some(log) = &self.log {
            use std::io::Write;
            let ts_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            let line = serde_json::json!({
                "ts_ms": ts_ms, "model": self.model, "stage": stage,
                "from_cache": s.cache_hits == 1, "deferred": s.deferred == 1,
                "error": result.err().map(|e| e.to_string()),
                "prompt_tokens": s.prompt_tokens, "cached_tokens": s.cached_tokens,
                "completion_tokens": s.completion_tokens, "wall_ms": wall_ms, "cost_usd": s.cost_usd,
            });
            let mut w = match log.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if let Err(e) = writeln!(w, "{line}").and_then(|_| w.flush()) {
                tracing::warn!("cannot write the usage log: {e}");
            }
        }
        let mut stages = match self.stages.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        stages.entry(stage.to_string()).or_default().add(&s);
    }

    /// Per-stage and total figures so far.
    pub fn report(&self) -> UsageReport {
        let stages = match self.stages.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let mut total = StageUsage::default();
        for s in stages.values() {
            total.add(s);
        }
        UsageReport {
            model: self.model.clone(),
            price_known: self.price.is_some(),
            stages,
            total,
            run_wall_ms: self.started.elapsed().as_millis() as u64,
        }
    }
}

/// The outermost layer of the stack: times every call and records it in the tracker.
pub struct TrackedModel {
    inner: Arc<dyn ChatModel>,
    tracker: Arc<UsageTracker>,
}

impl TrackedModel {
    pub fn new(inner: Arc<dyn ChatModel>, tracker: Arc<UsageTracker>) -> Self {
        TrackedModel { inner, tracker }
    }
}

#[async_trait::async_trait]
impl ChatModel for TrackedModel {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn context_size(&self) -> Option<usize> {
        self.inner.context_size()
    }
    fn count_tokens(&self, text: &str) -> usize {
        self.inner.count_tokens(text)
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let start = Instant::now();
        let result = self.inner.complete(request).await;
        self.tracker.record(
            &request.stage,
            result.as_ref(),
            start.elapsed().as_millis() as u64,
        );
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedModel;
    use crate::Message;

    #[test]
    fn defaults_parse_and_lookup_rules() {
        let t = PriceTable::defaults();
        assert!(t.models.len() >= 4, "default price table did not parse");
        let mini = t.lookup("openai:gpt-4o-mini").unwrap();
        assert_eq!(t.lookup("openai:gpt-4o-mini-2024-07-18"), Some(mini));
        assert_ne!(
            t.lookup("openai:gpt-4o").unwrap(),
            mini,
            "gpt-4o must not take gpt-4o-mini's price"
        );
        assert_eq!(t.lookup("local:smollm2-135m"), Some(Price::default()));
        assert_eq!(t.lookup("openai:Qwen2.5-7B-Instruct"), None);
        assert_eq!(
            t.lookup("openai:gpt-4ox"),
            None,
            "a prefix must end at a `-`"
        );
    }

    #[test]
    fn cost_counts_cached_tokens_at_their_price() {
        let p = Price {
            input: 2.0,
            cached_input: Some(1.0),
            output: 10.0,
        };
        let u = Usage {
            prompt_tokens: 1_000_000,
            cached_tokens: 500_000,
            completion_tokens: 100_000,
        };
        assert!((p.cost(&u) - (1.0 + 0.5 + 1.0)).abs() < 1e-12);
        let user = PriceTable::from_toml("[models.\"my-model\"]\ninput = 1.0\noutput = 2.0\n", "t")
            .unwrap();
        assert_eq!(user.lookup("openai:my-model").unwrap().cached_input, None);
        assert!(
            PriceTable::from_toml("[models.x]\ninput = \"cheap\"", "bad.toml")
                .unwrap_err()
                .to_string()
                .contains("bad.toml")
        );
    }

    #[tokio::test]
    async fn tracks_per_stage() {
        let fixture = Arc::new(
            ScriptedModel::new("openai:gpt-4o-mini")
                .then("a")
                .then("bb"),
        );
        let tracker = Arc::new(UsageTracker::new(
            "openai:gpt-4o-mini",
            &PriceTable::defaults(),
        ));
        let m = TrackedModel::new(fixture, tracker.clone());
        let q = |s: &str| ChatRequest::new(vec![Message::user("hello world")]).stage(s);
        m.complete(&q("judge")).await.unwrap();
        m.complete(&q("evaluator")).await.unwrap();
        assert!(
            m.complete(&q("evaluator")).await.is_err(),
            "script exhausted"
        );
        let r = tracker.report();
        assert_eq!(r.total.calls, 3);
        assert_eq!(r.total.errors, 1);
        assert_eq!(r.stages["evaluator"].calls, 2);
        assert_eq!(r.stages["judge"].prompt_tokens, 3);
        assert!(r.total.cost_usd > 0.0 && r.price_known);
    }

    #[tokio::test]
    async fn per_call_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("usage.jsonl");
        let fixture = Arc::new(ScriptedModel::new("local:x").then("a"));
        let tracker = Arc::new(
            UsageTracker::new("local:x", &PriceTable::defaults())
                .with_log(&path)
                .unwrap(),
        );
        let m = TrackedModel::new(fixture, tracker);
        m.complete(&ChatRequest::new(vec![Message::user("hello")]).stage("judge"))
            .await
            .unwrap();
        assert!(m
            .complete(&ChatRequest::new(vec![Message::user("again")]))
            .await
            .is_err());
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (
                lines[0]["stage"].as_str(),
                lines[0]["prompt_tokens"].as_u64()
            ),
            (Some("judge"), Some(2))
        );
        assert!(lines[0]["error"].is_null());
        assert!(lines[1]["error"].as_str().unwrap().contains("exhausted"));
    }
}
