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
        // Table keys and ids match without their provider prefix (`gpt-4o-mini` prices
        // `openai:gpt-4o-mini`; `gemini-2.0-flash` prices `gemini:gemini-2.0-flash`).
        let name = crate::spec::without_provider(model_id);
        let mut best: Option<(usize, Price)> = None;
        for (k, p) in &self.models {
            let k = crate::spec::without_provider(k);
            let hit = name == k || (name.starts_with(k) && name[k.len()..].starts_with('-'));
            if hit && best.is_none_or(|(len, _)| k.len() > len) {
                best = Some((k.len(), *p));
            }
        }
        best.map(|(_, p)| p)
    }
}

/// Aggregate usage: of a stage, a run, a verdict, a case. The one aggregate usage type of
/// maslens (the per-call one is [`Usage`]); add with `+=` (another `Totals`, or one call's
/// [`Usage`]) or [`Totals::merge`].
///
/// Serialized field order and names are those of a locate verdict's `usage`; `cache_hits`,
/// `errors` and `deferred` are written only when non-zero, `cost_usd` only when the price is known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Tokens (of the calls answered by the backend, for a [`UsageTracker`]: cache hits cost
    /// nothing there unless it counts them, see [`UsageTracker::counting_cache_hits`]).
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Prompt tokens served from the provider's prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// Requests made (cache hits, errors and repair calls included).
    #[serde(default)]
    pub calls: u64,
    /// Requests answered from the maslens cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_hits: u64,
    /// Requests that ended in an error (deferred ones not included).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// Requests written to a batch file instead of being sent (export mode).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred: u64,
    /// Structured calls that needed the repair call.
    #[serde(default)]
    pub repairs: u64,
    /// Structured calls that ended in an abstention (no valid answer after one repair).
    #[serde(default)]
    pub abstentions: u64,
    /// Wall time in seconds (summed over calls, or of the whole unit of work).
    #[serde(default)]
    pub seconds: f64,
    /// USD spent; `None` when the price is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Totals {
    /// Add another aggregate (costs add when both are known, else the known one is kept).
    pub fn merge(&mut self, o: &Totals) {
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.completion_tokens += o.completion_tokens;
        self.calls += o.calls;
        self.cache_hits += o.cache_hits;
        self.errors += o.errors;
        self.deferred += o.deferred;
        self.repairs += o.repairs;
        self.abstentions += o.abstentions;
        self.seconds += o.seconds;
        self.cost_usd = match (self.cost_usd, o.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }

    /// The token counts as one [`Usage`].
    pub fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
        }
    }

    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// Requests that got an answer (from the backend or the cache): not errors, not deferred.
    pub fn answered(&self) -> u64 {
        self.calls.saturating_sub(self.errors + self.deferred)
    }

    /// Requests the backend answered (not from the cache, not errors, not deferred).
    pub fn backend_calls(&self) -> u64 {
        self.answered().saturating_sub(self.cache_hits)
    }
}

impl std::ops::AddAssign<&Totals> for Totals {
    fn add_assign(&mut self, o: &Totals) {
        self.merge(o);
    }
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, o: Totals) {
        self.merge(&o);
    }
}

/// Add one call's tokens (not a call: count it in `calls` yourself).
impl std::ops::AddAssign<Usage> for Totals {
    fn add_assign(&mut self, u: Usage) {
        self.prompt_tokens += u.prompt_tokens;
        self.cached_tokens += u.cached_tokens;
        self.completion_tokens += u.completion_tokens;
    }
}

impl std::iter::Sum for Totals {
    fn sum<I: Iterator<Item = Totals>>(iter: I) -> Totals {
        let mut t = Totals::default();
        for x in iter {
            t.merge(&x);
        }
        t
    }
}

impl<'a> std::iter::Sum<&'a Totals> for Totals {
    fn sum<I: Iterator<Item = &'a Totals>>(iter: I) -> Totals {
        let mut t = Totals::default();
        for x in iter {
            t.merge(x);
        }
        t
    }
}

/// A snapshot of the tracker.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UsageReport {
    pub model: String,
    /// False when the model has no entry in the price table (cost then reads 0).
    pub price_known: bool,
    pub stages: BTreeMap<String, Totals>,
    pub total: Totals,
    /// Wall time since the tracker was created, in milliseconds.
    pub run_wall_ms: u64,
}

/// Collects usage per stage; shared by the stack and the command that reports it.
pub struct UsageTracker {
    model: String,
    price: Option<Price>,
    stages: Mutex<BTreeMap<String, Totals>>,
    count_cache_hits: bool,
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
            price,
            ..UsageTracker::unpriced(model)
        }
    }

    /// A tracker without a price (cost stays unknown, no warning): for counting calls and tokens
    /// of several models together, e.g. against a call budget.
    pub fn unpriced(label: impl Into<String>) -> Self {
        UsageTracker {
            model: label.into(),
            price: None,
            stages: Mutex::new(BTreeMap::new()),
            count_cache_hits: false,
            started: Instant::now(),
            log: None,
        }
    }

    /// Also count the tokens of cache hits (the tokens the original call used), so that the
    /// figures do not depend on the cache state (a budget in tokens then stops a replayed run
    /// where it stopped the first time). Cost stays that of the backend calls.
    pub fn counting_cache_hits(mut self) -> Self {
        self.count_cache_hits = true;
        self
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
        let mut s = Totals {
            calls: 1,
            seconds: wall_ms as f64 / 1000.0,
            ..Default::default()
        };
        let mut billed = Usage::default();
        match result {
            Ok(r) => {
                if r.from_cache {
                    s.cache_hits = 1;
                } else {
                    billed = r.usage;
                }
                if !r.from_cache || self.count_cache_hits {
                    s += r.usage;
                }
            }
            Err(LlmError::Deferred { .. }) => s.deferred = 1,
            Err(_) => s.errors = 1,
        }
        s.cost_usd = self.price.map(|p| p.cost(&billed));
        tracing::debug!(
            model = %self.model, stage, from_cache = s.cache_hits == 1, error = s.errors == 1,
            prompt_tokens = s.prompt_tokens, cached_tokens = s.cached_tokens,
            completion_tokens = s.completion_tokens, wall_ms, cost_usd = s.cost_usd.unwrap_or(0.0), "llm call"
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
                "completion_tokens": s.completion_tokens, "wall_ms": wall_ms, "cost_usd": s.cost_usd.unwrap_or(0.0),
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
        *stages.entry(stage.to_string()).or_default() += s;
    }

    /// The total so far (all stages).
    pub fn total(&self) -> Totals {
        match self.stages.lock() {
            Ok(g) => g.values().sum(),
            Err(p) => p.into_inner().values().sum(),
        }
    }

    /// Per-stage and total figures so far.
    pub fn report(&self) -> UsageReport {
        let stages = match self.stages.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let total = stages.values().sum();
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
impl crate::wrap::ModelWrapper for TrackedModel {
    fn inner(&self) -> &dyn ChatModel {
        &*self.inner
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
        // Keys and ids match without their provider prefix, whichever provider.
        let mut t = t;
        let flash = Price {
            input: 0.1,
            cached_input: None,
            output: 0.4,
        };
        t.models.insert("gemini-2.0-flash".into(), flash);
        assert_eq!(t.lookup("gemini:gemini-2.0-flash-001"), Some(flash));
        assert_eq!(t.lookup("vllm:gpt-4o-mini"), Some(mini));
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
        assert!(r.total.cost_usd.unwrap() > 0.0 && r.price_known);
    }

    #[test]
    fn totals_add_and_keep_the_verdict_keys() {
        let mut a = Totals {
            calls: 2,
            prompt_tokens: 10,
            repairs: 1,
            seconds: 0.5,
            cost_usd: Some(0.25),
            ..Default::default()
        };
        a += Usage {
            prompt_tokens: 1,
            completion_tokens: 2,
            cached_tokens: 3,
        };
        a += &Totals {
            calls: 1,
            cache_hits: 1,
            abstentions: 1,
            seconds: 0.25,
            ..Default::default()
        };
        assert_eq!((a.calls, a.cache_hits, a.prompt_tokens), (3, 1, 11));
        assert_eq!((a.tokens(), a.answered(), a.backend_calls()), (13, 3, 2));
        assert_eq!((a.seconds, a.cost_usd), (0.75, Some(0.25)));
        // The keys (in order) of a locate verdict's `usage` before `Totals`.
        assert_eq!(
            serde_json::to_string(&Totals::default()).unwrap(),
            r#"{"prompt_tokens":0,"cached_tokens":0,"completion_tokens":0,"calls":0,"repairs":0,"abstentions":0,"seconds":0.0}"#
        );
        let full = serde_json::to_string(&a).unwrap();
        assert!(full.contains(r#""cache_hits":1"#) && full.contains(r#""cost_usd":0.25"#));
        let back: Totals = serde_json::from_value(serde_json::to_value(a).unwrap()).unwrap();
        assert_eq!(back, a);
        let old: Totals = serde_json::from_str(r#"{"calls": 4, "seconds": 1.5}"#).unwrap();
        assert_eq!((old.calls, old.cost_usd), (4, None));
        assert_eq!([a, old].iter().sum::<Totals>().calls, 7);
    }

    #[tokio::test]
    async fn cache_hits_cost_nothing_unless_counted() {
        let hit = ChatResponse {
            text: "x".into(),
            finish_reason: "stop".into(),
            usage: Usage {
                prompt_tokens: 5,
                completion_tokens: 1,
                cached_tokens: 0,
            },
            latency_ms: 0,
            from_cache: true,
            queue: Default::default(),
        };
        let plain = UsageTracker::new("openai:gpt-4o-mini", &PriceTable::defaults());
        plain.record("s", Ok(&hit), 3);
        let t = plain.total();
        assert_eq!((t.calls, t.cache_hits, t.tokens()), (1, 1, 0));
        assert_eq!(t.cost_usd, Some(0.0));
        let counting = UsageTracker::unpriced("credit").counting_cache_hits();
        counting.record("debate/a", Ok(&hit), 3);
        counting.record("debate/a", Err(&LlmError::Other("x".into())), 3);
        let t = counting.total();
        assert_eq!(
            (t.calls, t.answered(), t.tokens(), t.cost_usd),
            (2, 1, 6, None)
        );
        assert!((t.seconds - 0.006).abs() < 1e-12);
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
