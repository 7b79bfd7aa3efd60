//! The model stack every command uses: backend -> budget -> cache -> usage tracker.
//!
//! ```text
//! TrackedModel (usage per stage, cost)         <- what methods call
//!   CachedModel (SQLite; read-write | replay)  <- absent with cache mode `off`
//!     BudgetModel (max calls / tokens / cost)  <- absent without limits
//!       RetryModel (backoff, Retry-After)      <- HTTP backends only
//!         backend: OpenAiModel | AnthropicModel | local | BatchRecorder (export mode)
//! ```

use crate::anthropic::{AnthropicConfig, AnthropicModel};
use crate::batch::BatchRecorder;
use crate::budget::{Budget, BudgetModel};
use crate::cache::{Cache, CachePolicy, CachedModel};
use crate::openai::{OpenAiConfig, OpenAiModel, SchemaMode};
use crate::preflight::Endpoint;
use crate::spec::{ModelSpec, Provider};
use crate::usage::{PriceTable, TrackedModel, UsageTracker};
use crate::{ChatModel, LlmError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the cache is used by a stack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Answer from the cache when possible, record every new call.
    #[default]
    ReadWrite,
    /// No cache at all.
    Off,
    /// Answer only from the cache; a miss is [`LlmError::ReplayMiss`].
    Replay,
    /// Send nothing: write each uncached request to this batch file (OpenAI Batch JSONL;
    /// Anthropic Message Batches lines for `anthropic:` models) and answer [`LlmError::Deferred`].
    Export(PathBuf),
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read-write" | "rw" => Ok(CacheMode::ReadWrite),
            "off" => Ok(CacheMode::Off),
            "replay" => Ok(CacheMode::Replay),
            _ => match s.strip_prefix("export:") {
                Some(p) if !p.is_empty() => Ok(CacheMode::Export(PathBuf::from(p))),
                _ => Err(format!(
                    "unknown cache mode {s:?}: expected read-write, off, replay or export:FILE"
                )),
            },
        }
    }
}

/// The config file's contents (see [`crate::config`]); the old name.
pub type LlmConfig = crate::config::Config;

/// Everything `open` needs besides the spec.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Overrides the base URL of the spec (then `OPENAI_BASE_URL`, then the OpenAI API).
    pub base_url: Option<String>,
    /// API key; else the variable named by `api_key_env` (default `OPENAI_API_KEY`), else the config.
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    pub cache_mode: CacheMode,
    /// Default `$MASLENS_HOME/cache.sqlite`.
    pub cache_path: Option<PathBuf>,
    pub budget: Budget,
    pub concurrency: usize,
    pub timeout: Duration,
    pub max_retries: u32,
    pub schema_mode: SchemaMode,
    /// Price table laid over the defaults.
    pub prices: Option<PathBuf>,
    /// Config file; default: see [`crate::config::locate`].
    pub config: Option<PathBuf>,
    /// Append one JSON line per call here (see [`UsageTracker::with_log`]).
    pub usage_log: Option<PathBuf>,
    /// Embedded model: CPU threads and context size.
    pub threads: Option<usize>,
    pub context_size: Option<u32>,
    /// Check before opening that an HTTP model can be reached and takes the key
    /// ([`crate::preflight`]); skipped in `replay` and `export:` modes. Off by default (a library
    /// caller may open a model it will not call); the CLI and the Python package turn it on.
    pub preflight: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            base_url: None,
            api_key: None,
            api_key_env: None,
            cache_mode: CacheMode::ReadWrite,
            cache_path: None,
            budget: Budget::default(),
            concurrency: 8,
            timeout: Duration::from_secs(120),
            max_retries: 5,
            schema_mode: SchemaMode::Auto,
            prices: None,
            config: None,
            usage_log: None,
            threads: None,
            context_size: None,
            preflight: false,
        }
    }
}

/// A ready model stack (a clone shares the model, usage, cache and exporter).
#[derive(Clone)]
pub struct Stack {
    /// What methods call.
    pub model: Arc<dyn ChatModel>,
    /// Usage per stage and run totals.
    pub usage: Arc<UsageTracker>,
    /// The cache, unless the mode is `off`.
    pub cache: Option<Arc<Cache>>,
    /// The batch file writer in export mode.
    pub exporter: Option<Arc<BatchRecorder>>,
}

/// `$MASLENS_HOME`, default `~/.cache/maslens`.
pub fn maslens_home() -> PathBuf {
    if let Some(h) = std::env::var_os("MASLENS_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("maslens")
}

fn load_config(opts: &OpenOptions) -> Result<LlmConfig, LlmError> {
    Ok(crate::config::Loaded::load(opts.config.as_deref())?.config)
}

/// Open the backend a spec names, without any wrapping.
pub fn open_backend(
    spec: &ModelSpec,
    opts: &OpenOptions,
    cfg: &LlmConfig,
) -> Result<Arc<dyn ChatModel>, LlmError> {
    match spec {
        ModelSpec::OpenAi {
            provider, model, ..
        } => {
            let Endpoint {
                base,
                key: api_key,
                key_env,
                ..
            } = endpoint(spec, opts, cfg)
                .ok_or_else(|| LlmError::Other("not an HTTP model".into()))?;
            // Named on purpose but empty: say so now (a provider's usual variable left unset is
            // normal for local servers; the preflight names it for a hosted API).
            let explicit = opts.api_key_env.is_some() || cfg.api_key_env.is_some();
            if let (true, Some(var), None) = (explicit, &key_env, &api_key) {
                tracing::warn!("the API key variable {var} is not set");
            }
            if *provider == Provider::Anthropic {
                return open_anthropic(spec, model, base, api_key, key_env, opts);
            }
            let mut c = OpenAiConfig::new(model.clone(), base);
            c.api_key = api_key;
            c.key_env = key_env;
            c.id = spec.id();
            c.concurrency = opts.concurrency.max(1);
            c.timeout = opts.timeout;
            c.retry.max_retries = opts.max_retries;
            c.schema_mode = opts.schema_mode;
            c.context_size = opts.context_size.map(|n| n as usize);
            Ok(Arc::new(OpenAiModel::retrying(c)?))
        }
        ModelSpec::Local { spec: local } => open_local_backend(local, opts),
    }
}

/// Where an HTTP model is served and with which key: `--base-url`, then the spec's `@URL`, then
/// the config's, then the provider's variable, then its default; the key from `--api-key-env` /
/// the config's `api_key_env`, else the provider's usual variable, else the config's `api_key`.
/// `None` for the embedded model.
pub fn endpoint(spec: &ModelSpec, opts: &OpenOptions, cfg: &LlmConfig) -> Option<Endpoint> {
    let ModelSpec::OpenAi {
        provider, base_url, ..
    } = spec
    else {
        return None;
    };
    let base = opts
        .base_url
        .clone()
        .or_else(|| base_url.clone())
        .or_else(|| cfg.base_url.clone())
        .or_else(|| {
            let var = provider.base_url_env()?;
            provider.base_url_from_env_value(&std::env::var(var).ok()?)
        })
        .unwrap_or_else(|| provider.default_base_url().to_string());
    let key_env = opts
        .api_key_env
        .clone()
        .or_else(|| cfg.api_key_env.clone())
        .or_else(|| provider.key_env().map(str::to_string));
    let key = opts
        .api_key
        .clone()
        .or_else(|| key_env.as_deref().and_then(|v| std::env::var(v).ok()))
        .or_else(|| cfg.api_key.clone())
        .filter(|k| !k.is_empty());
    Some(Endpoint {
        provider: *provider,
        model: spec.id(),
        base,
        key,
        key_env,
    })
}

/// The native Messages API backend of an `anthropic:` spec.
fn open_anthropic(
    spec: &ModelSpec,
    model: &str,
    base: String,
    api_key: Option<String>,
    key_env: Option<String>,
    opts: &OpenOptions,
) -> Result<Arc<dyn ChatModel>, LlmError> {
    let mut c = AnthropicConfig::new(model, base);
    c.api_key = api_key;
    c.key_env = key_env;
    c.id = spec.id();
    c.concurrency = opts.concurrency.max(1);
    c.timeout = opts.timeout;
    c.retry.max_retries = opts.max_retries;
    c.context_size = opts.context_size.map(|n| n as usize);
    Ok(Arc::new(AnthropicModel::retrying(c)?))
}

#[cfg(feature = "local")]
fn open_local_backend(local: &str, opts: &OpenOptions) -> Result<Arc<dyn ChatModel>, LlmError> {
    let lo = crate::local::LocalOptions {
        threads: opts.threads,
        context_size: opts.context_size,
        // Two cached prefixes: methods alternate two prompt families (credit's agent critic and
        // segment judge; locate's Judge and its repairs), and one slot let each evict the other
        // (docs/local-models.md, Concurrency).
        slots: 2,
        ..Default::default()
    };
    crate::local::open_local(local, &lo)
}

#[cfg(not(feature = "local"))]
fn open_local_backend(local: &str, _opts: &OpenOptions) -> Result<Arc<dyn ChatModel>, LlmError> {
    Err(LlmError::ModelUnavailable(format!(
        "`local:{local}` needs the embedded llama.cpp backend, but this binary was built without the \
         `local` feature; rebuild with it (`cargo build -p maslens --features local`, needs cmake, clang \
         and libclang-dev) or use an OpenAI-compatible server (`--model openai:NAME@http://HOST:PORT/v1`)"
    )))
}

/// Parse the spec, open its backend and wrap it.
pub async fn open(spec: &str, opts: &OpenOptions) -> Result<Stack, LlmError> {
    let parsed = ModelSpec::parse(spec)?;
    let cfg = load_config(opts)?;
    let mut prices = match &opts.prices {
        Some(p) => PriceTable::load_over_defaults(p)?,
        None => PriceTable::defaults(),
    };
    prices.models.extend(cfg.prices.clone());
    if let CacheMode::Export(path) = &opts.cache_mode {
        // Nothing is sent in export mode, but methods must build the same requests as in the
        // real run: the recorder answers context size and token counts as the real backend does
        // (opened only for that; for `openai:` this needs no network and no key).
        let cache = Arc::new(open_cache(opts)?);
        let model_name = match &parsed {
            ModelSpec::OpenAi { model, .. } => model.clone(),
            ModelSpec::Local { spec } => spec.clone(),
        };
        let mut rec = BatchRecorder::create(
            path,
            parsed.id(),
            model_name,
            opts.schema_mode,
            Some(cache.clone()),
        )?;
        match open_backend(&parsed, opts, &cfg) {
            Ok(real) => rec = rec.with_meta(real),
            Err(e) => tracing::warn!(
                "export mode: cannot open {} for its context size and tokenizer ({e}); using estimates, \
                 so the rerun may build different requests",
                parsed.id()
            ),
        }
        let rec = Arc::new(rec);
        let cached: Arc<dyn ChatModel> = Arc::new(CachedModel::new(
            rec.clone(),
            cache.clone(),
            CachePolicy::ReadWrite,
        ));
        let usage = Arc::new(tracker(parsed.id(), &prices, opts)?);
        return Ok(Stack {
            model: Arc::new(TrackedModel::new(cached, usage.clone())),
            usage,
            cache: Some(cache),
            exporter: Some(rec),
        });
    }
    let backend = if opts.cache_mode == CacheMode::Replay {
        // Replay never calls the backend, but it is opened when possible so that context size
        // and token counts (which shape the requests methods build) match the original run.
        match open_backend(&parsed, opts, &cfg) {
            Ok(real) => real,
            Err(e) => {
                tracing::warn!(
                    "replay: cannot open {} for its context size and tokenizer ({e}); using estimates",
                    parsed.id()
                );
                Arc::new(Unreachable(
                    parsed.id(),
                    opts.context_size.map(|c| c as usize),
                )) as Arc<dyn ChatModel>
            }
        }
    } else {
        if opts.preflight {
            if let Some(ep) = endpoint(&parsed, opts, &cfg) {
                crate::preflight::check(&ep).await?;
            }
        }
        open_backend(&parsed, opts, &cfg)?
    };
    wrap(backend, opts, &prices)
}

/// Wrap any backend (a custom one, a test fixture) in budget, cache and usage layers.
pub fn wrap(
    backend: Arc<dyn ChatModel>,
    opts: &OpenOptions,
    prices: &PriceTable,
) -> Result<Stack, LlmError> {
    let id = backend.id().to_string();
    let usage = Arc::new(tracker(id.clone(), prices, opts)?);
    let mut model = backend;
    if !opts.budget.is_unlimited() {
        model = Arc::new(BudgetModel::new(model, opts.budget, usage.price())?);
    }
    let cache = match &opts.cache_mode {
        CacheMode::Off => None,
        CacheMode::ReadWrite | CacheMode::Replay => Some(Arc::new(open_cache(opts)?)),
        CacheMode::Export(_) => {
            return Err(LlmError::Other(
                "export mode is set up by `open`, not `wrap`".into(),
            ));
        }
    };
    if let Some(c) = &cache {
        let policy = if opts.cache_mode == CacheMode::Replay {
            CachePolicy::Replay
        } else {
            CachePolicy::ReadWrite
        };
        model = Arc::new(CachedModel::new(model, c.clone(), policy));
    }
    Ok(Stack {
        model: Arc::new(TrackedModel::new(model, usage.clone())),
        usage,
        cache,
        exporter: None,
    })
}

fn tracker(id: String, prices: &PriceTable, opts: &OpenOptions) -> Result<UsageTracker, LlmError> {
    let t = UsageTracker::new(id, prices);
    match &opts.usage_log {
        Some(p) => t.with_log(p),
        None => Ok(t),
    }
}

fn open_cache(opts: &OpenOptions) -> Result<Cache, LlmError> {
    let path = opts.cache_path.clone().unwrap_or_else(Cache::default_path);
    Cache::open(path)
}

/// The backend of replay mode: the cache answers everything or reports a miss first.
struct Unreachable(String, Option<usize>);

#[async_trait::async_trait]
impl ChatModel for Unreachable {
    fn id(&self) -> &str {
        &self.0
    }
    fn context_size(&self) -> Option<usize> {
        self.1
    }
    async fn complete(
        &self,
        _request: &crate::ChatRequest,
    ) -> Result<crate::ChatResponse, LlmError> {
        Err(LlmError::Other(
            "replay mode: the backend is never called".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::server::FakeServer;
    use crate::{ChatRequest, Message};

    #[test]
    fn cache_mode_parses() {
        assert_eq!("replay".parse::<CacheMode>().unwrap(), CacheMode::Replay);
        assert_eq!(
            "export:/tmp/x.jsonl".parse::<CacheMode>().unwrap(),
            CacheMode::Export("/tmp/x.jsonl".into())
        );
        assert!("export:".parse::<CacheMode>().is_err());
        assert!("sometimes".parse::<CacheMode>().is_err());
    }

    #[cfg(not(feature = "local"))]
    #[tokio::test]
    async fn local_without_feature_says_how_to_rebuild() {
        let err = open(
            "local:smollm2-135m",
            &OpenOptions {
                cache_mode: CacheMode::Off,
                ..Default::default()
            },
        )
        .await
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("without the `local` feature") && err.contains("--features local"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn full_stack_over_http_then_replay_offline() {
        let server = FakeServer::echo().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("llm.toml");
        std::fs::write(&config, "").unwrap();
        let opts = OpenOptions {
            cache_path: Some(dir.path().join("c.sqlite")),
            config: Some(config),
            ..Default::default()
        };
        let spec = format!("openai:gpt-4o-mini@{}", server.base_url());
        let stack = open(&spec, &opts).await.unwrap();
        let q = ChatRequest::new(vec![Message::user("hello")]).stage("judge");
        assert_eq!(stack.model.complete(&q).await.unwrap().text, "echo: hello");
        assert!(stack.model.complete(&q).await.unwrap().from_cache);
        let r = stack.usage.report();
        assert_eq!((r.total.calls, r.total.cache_hits), (2, 1));
        assert!(r.total.cost_usd.unwrap() > 0.0);
        assert_eq!(
            server
                .counts
                .received
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        drop(server);
        // Offline: the server is gone, replay answers from the cache.
        let replay = open(
            &spec,
            &OpenOptions {
                cache_mode: CacheMode::Replay,
                ..opts.clone()
            },
        )
        .await
        .unwrap();
        assert_eq!(replay.model.complete(&q).await.unwrap().text, "echo: hello");
        let other = ChatRequest::new(vec![Message::user("other")]);
        assert!(matches!(
            replay.model.complete(&other).await,
            Err(LlmError::ReplayMiss { .. })
        ));
    }

    #[tokio::test]
    async fn export_and_replay_answer_metadata_like_the_real_backend() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("llm.toml");
        std::fs::write(&config, "").unwrap();
        let base = OpenOptions {
            cache_path: Some(dir.path().join("c.sqlite")),
            config: Some(config),
            context_size: Some(4096),
            ..Default::default()
        };
        let spec = "openai:gpt-4o-mini@http://127.0.0.1:9/v1";
        for mode in [
            CacheMode::ReadWrite,
            CacheMode::Replay,
            CacheMode::Export(dir.path().join("b.jsonl")),
        ] {
            let s = open(
                spec,
                &OpenOptions {
                    cache_mode: mode.clone(),
                    ..base.clone()
                },
            )
            .await
            .unwrap();
            assert_eq!(s.model.context_size(), Some(4096), "{mode:?}");
            assert_eq!(s.model.id(), "openai:gpt-4o-mini");
        }
    }

    #[tokio::test]
    async fn config_file_gives_api_key_and_prices() {
        let server = FakeServer::echo().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("llm.toml");
        std::fs::write(
            &config,
            "api_key = \"sk-from-config\"\napi_key_env = \"MASLENS_TEST_UNSET_KEY_VAR\"\n\
             [models.\"my-model\"]\ninput = 1000000.0\noutput = 0.0\n",
        )
        .unwrap();
        let opts = OpenOptions {
            cache_mode: CacheMode::Off,
            config: Some(config.clone()),
            ..Default::default()
        };
        let spec = format!("openai:my-model@{}", server.base_url());
        let stack = open(&spec, &opts).await.unwrap();
        let r = stack
            .model
            .complete(&ChatRequest::new(vec![Message::user("abcd")]))
            .await
            .unwrap();
        assert_eq!(
            server.counts.last_authorization.lock().unwrap().as_deref(),
            Some("Bearer sk-from-config")
        );
        // 1 prompt token at $1 per token.
        assert_eq!(r.usage.prompt_tokens, 1);
        assert!((stack.usage.report().total.cost_usd.unwrap() - 1.0).abs() < 1e-9);
        // An explicit key wins over the config.
        let explicit = OpenOptions {
            api_key: Some("sk-explicit".into()),
            ..opts.clone()
        };
        let stack = open(&spec, &explicit).await.unwrap();
        stack
            .model
            .complete(&ChatRequest::new(vec![Message::user("x")]))
            .await
            .unwrap();
        assert_eq!(
            server.counts.last_authorization.lock().unwrap().as_deref(),
            Some("Bearer sk-explicit")
        );
        // Unknown keys in the config are errors naming the file.
        std::fs::write(&config, "api_kee = \"typo\"\n").unwrap();
        let e = open(&spec, &opts).await.err().unwrap().to_string();
        assert!(e.contains("llm.toml") && e.contains("api_kee"), "{e}");
    }
}
