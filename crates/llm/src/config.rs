//! The user's configuration file: defaults for every LLM-backed command (model, key variable,
//! concurrency, timeouts, budgets, prices).
//!
//! Where it is read from, first match wins:
//! 1. `--llm-config FILE` (alias `--config`): must exist;
//! 2. `$MASLENS_CONFIG`: must exist;
//! 3. `$XDG_CONFIG_HOME/maslens/config.toml` (`~/.config/maslens/config.toml` when
//!    `XDG_CONFIG_HOME` is unset or relative), when it exists;
//! 4. `$MASLENS_HOME/llm.toml`, the old place inside the cache directory, with a warning.
//!
//! Values resolve as flag > environment variable > config file > built-in default
//! ([`Loaded::effective`]); `maslens config show` prints the result and where each value came
//! from. The cache and the models stay in `$MASLENS_HOME` (a cache directory).

use crate::usage::Price;
use crate::LlmError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Environment variable naming the config file.
pub const CONFIG_ENV: &str = "MASLENS_CONFIG";
/// Environment variable naming the default model.
pub const MODEL_ENV: &str = "MASLENS_MODEL";
/// Environment variable naming the cache file.
pub const CACHE_ENV: &str = "MASLENS_CACHE";
/// The built-in default model.
pub const DEFAULT_MODEL: &str = "local:smollm2-135m";
pub const DEFAULT_CONCURRENCY: usize = 8;
pub const DEFAULT_REQUEST_TIMEOUT: f64 = 120.0;
pub const DEFAULT_MAX_RETRIES: u32 = 5;

/// What the file may hold. Unknown keys are errors naming the file and key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Default model spec (`openai/gpt-4o-mini`, `local:smollm2-135m`, ...).
    pub model: Option<String>,
    /// Base URL overriding the one the spec's provider implies.
    pub base_url: Option<String>,
    /// API key (prefer `api_key_env`: a key in a file is easy to leak).
    pub api_key: Option<String>,
    /// Name of the environment variable holding the API key (default: the provider's usual one).
    pub api_key_env: Option<String>,
    /// Concurrent requests to the backend.
    pub concurrency: Option<usize>,
    /// Per-request timeout in seconds.
    pub request_timeout: Option<f64>,
    /// Retries on 429, 5xx, timeouts and connection errors.
    pub max_retries: Option<u32>,
    /// Budgets every run stops at cleanly (exit code 1).
    #[serde(default)]
    pub budget: BudgetConfig,
    /// Prices (USD per million tokens) laid over the built-in table; `models` is the old name.
    #[serde(default, alias = "models")]
    pub prices: BTreeMap<String, Price>,
}

/// The `[budget]` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub max_calls: Option<u64>,
    pub max_tokens_total: Option<u64>,
    pub max_cost: Option<f64>,
}

/// How the config file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Found {
    /// `--llm-config` / `--config`.
    Flag,
    /// `$MASLENS_CONFIG`.
    Env,
    /// The platform's config directory.
    ConfigDir,
    /// `$MASLENS_HOME/llm.toml` (deprecated place).
    Legacy,
}

/// A config file, where it was found, and what it holds (empty without a file).
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub file: Option<(PathBuf, Found)>,
    pub config: Config,
}

/// `$XDG_CONFIG_HOME/maslens/config.toml`, or `~/.config/maslens/config.toml`.
pub fn default_config_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home_dir().join(".config"));
    base.join("maslens").join("config.toml")
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Find the config file (see the module docs). A named file that does not exist is an error.
pub fn locate(flag: Option<&Path>) -> Result<Option<(PathBuf, Found)>, LlmError> {
    if let Some(p) = flag {
        return Ok(Some((p.to_path_buf(), Found::Flag)));
    }
    if let Some(p) = env_nonempty(CONFIG_ENV) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(LlmError::Other(format!(
                "{CONFIG_ENV} names {}, which is not a file",
                p.display()
            )));
        }
        return Ok(Some((p, Found::Env)));
    }
    let p = default_config_path();
    if p.is_file() {
        return Ok(Some((p, Found::ConfigDir)));
    }
    let legacy = crate::stack::maslens_home().join("llm.toml");
    if legacy.is_file() {
        tracing::warn!(
            "reading the LLM config from {} (inside the cache directory); move it to {}",
            legacy.display(),
            p.display()
        );
        return Ok(Some((legacy, Found::Legacy)));
    }
    Ok(None)
}

impl Config {
    /// Parse and check one file; errors name the file and the key.
    pub fn load(path: &Path) -> Result<Config, LlmError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LlmError::Other(format!("cannot read config {}: {e}", path.display())))?;
        Config::parse(&text).map_err(|e| LlmError::Other(format!("config {}: {e}", path.display())))
    }

    /// Parse and check config text.
    pub fn parse(text: &str) -> Result<Config, String> {
        let c: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), String> {
        if self.concurrency == Some(0) {
            return Err("concurrency: must be at least 1".into());
        }
        if let Some(t) = self.request_timeout {
            if !(t.is_finite() && t > 0.0) {
                return Err(format!(
                    "request_timeout: must be a positive number of seconds, not {t}"
                ));
            }
        }
        if let Some(c) = self.budget.max_cost {
            if !(c.is_finite() && c >= 0.0) {
                return Err(format!(
                    "budget.max_cost: must be a non-negative number, not {c}"
                ));
            }
        }
        if let Some(m) = &self.model {
            crate::spec::ModelSpec::parse(m).map_err(|e| format!("model: {e}"))?;
        }
        Ok(())
    }
}

impl Loaded {
    /// Find and read the config file (nothing found: empty config).
    pub fn load(flag: Option<&Path>) -> Result<Loaded, LlmError> {
        match locate(flag)? {
            Some((path, found)) => Ok(Loaded {
                config: Config::load(&path)?,
                file: Some((path, found)),
            }),
            None => Ok(Loaded::default()),
        }
    }

    fn file_source(&self) -> Source {
        match &self.file {
            Some((p, _)) => Source::File(p.clone()),
            None => Source::Default,
        }
    }

    /// The settings in force, given what flags set (`None`: not given). Environment variables
    /// that clap reads for flags (`MASLENS_MODEL`, `MASLENS_CACHE`) are read here too, so the
    /// result is the same with or without clap in between.
    pub fn effective(&self, flags: &Overrides) -> Effective {
        let c = &self.config;
        let file = self.file_source();
        let pick = |flag: Option<String>, env: Option<&'static str>, cfg: Option<String>| {
            if let Some(v) = flag {
                return Some((v, Source::Flag));
            }
            if let Some((var, v)) = env.and_then(|var| env_nonempty(var).map(|v| (var, v))) {
                return Some((v, Source::Env(var)));
            }
            cfg.map(|v| (v, file.clone()))
        };
        let (model, model_src) = pick(flags.model.clone(), Some(MODEL_ENV), c.model.clone())
            .unwrap_or_else(|| (DEFAULT_MODEL.to_string(), Source::Default));
        let opt = |flag: Option<String>, cfg: Option<String>| pick(flag, None, cfg);
        let num = |flag: Option<String>, cfg: Option<String>, default: String| {
            opt(flag, cfg).unwrap_or((default, Source::Default))
        };
        let cache = pick(flags.cache.clone(), Some(CACHE_ENV), None).unwrap_or_else(|| {
            (
                crate::stack::maslens_home()
                    .join("cache.sqlite")
                    .display()
                    .to_string(),
                Source::Default,
            )
        });
        Effective {
            config_file: self.file.clone(),
            model: Setting::new(model, model_src),
            base_url: opt(flags.base_url.clone(), c.base_url.clone()).map(Setting::from),
            api_key_env: opt(flags.api_key_env.clone(), c.api_key_env.clone()).map(Setting::from),
            api_key_in_file: c.api_key.is_some(),
            concurrency: num(
                s(flags.concurrency),
                s(c.concurrency),
                DEFAULT_CONCURRENCY.to_string(),
            )
            .into(),
            request_timeout: num(
                s(flags.request_timeout),
                s(c.request_timeout),
                DEFAULT_REQUEST_TIMEOUT.to_string(),
            )
            .into(),
            max_retries: num(
                s(flags.max_retries),
                s(c.max_retries),
                DEFAULT_MAX_RETRIES.to_string(),
            )
            .into(),
            max_calls: opt(s(flags.max_calls), s(c.budget.max_calls)).map(Setting::from),
            max_tokens_total: opt(s(flags.max_tokens_total), s(c.budget.max_tokens_total))
                .map(Setting::from),
            max_cost: opt(s(flags.max_cost), s(c.budget.max_cost)).map(Setting::from),
            cache: cache.into(),
            prices: c.prices.keys().cloned().collect(),
        }
    }
}

/// What flags set; `None` where the flag was not given.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub concurrency: Option<usize>,
    pub request_timeout: Option<f64>,
    pub max_retries: Option<u32>,
    pub max_calls: Option<u64>,
    pub max_tokens_total: Option<u64>,
    pub max_cost: Option<f64>,
    pub cache: Option<String>,
}

/// Choices of one run that are not settings of the config file (the rest of
/// [`crate::OpenOptions`]; see [`Effective::open_options`]).
#[derive(Debug, Clone, Default)]
pub struct RunChoices {
    /// Given explicitly (a flag); the spec's `@URL`, the config file and the provider's
    /// variable are consulted when the stack opens.
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub cache_mode: crate::CacheMode,
    pub prices: Option<PathBuf>,
    pub usage_log: Option<PathBuf>,
    pub threads: Option<usize>,
    pub context_size: Option<u32>,
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env(&'static str),
    File(PathBuf),
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(v) => write!(f, "env {v}"),
            Source::File(p) => write!(f, "config {}", p.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

impl Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One resolved value (kept as text: it is shown, and parsed back by [`Effective`]'s getters).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    pub value: String,
    pub source: Source,
}

impl Setting {
    fn new(value: String, source: Source) -> Setting {
        Setting { value, source }
    }
}

impl From<(String, Source)> for Setting {
    fn from((value, source): (String, Source)) -> Setting {
        Setting { value, source }
    }
}

/// Every setting in force, with its source.
#[derive(Debug, Clone, Serialize)]
pub struct Effective {
    pub config_file: Option<(PathBuf, Found)>,
    pub model: Setting,
    pub base_url: Option<Setting>,
    pub api_key_env: Option<Setting>,
    /// The file holds an `api_key` (never printed).
    pub api_key_in_file: bool,
    pub concurrency: Setting,
    pub request_timeout: Setting,
    pub max_retries: Setting,
    pub max_calls: Option<Setting>,
    pub max_tokens_total: Option<Setting>,
    pub max_cost: Option<Setting>,
    pub cache: Setting,
    /// Models the file prices.
    pub prices: Vec<String>,
}

fn s<T: ToString>(v: Option<T>) -> Option<String> {
    v.map(|v| v.to_string())
}

fn parse_opt<T: std::str::FromStr>(name: &str, s: &Option<Setting>) -> Result<Option<T>, LlmError> {
    s.as_ref().map(|s| parse_setting(name, s)).transpose()
}

fn parse_setting<T: std::str::FromStr>(name: &str, s: &Setting) -> Result<T, LlmError> {
    s.value
        .parse()
        .map_err(|_| LlmError::Other(format!("{name} {:?} ({}) is not valid", s.value, s.source)))
}

impl Effective {
    pub fn concurrency(&self) -> Result<usize, LlmError> {
        Ok(parse_setting::<usize>("concurrency", &self.concurrency)?.max(1))
    }
    pub fn request_timeout(&self) -> Result<std::time::Duration, LlmError> {
        let t: f64 = parse_setting("request_timeout", &self.request_timeout)?;
        std::time::Duration::try_from_secs_f64(t).map_err(|_| {
            LlmError::Other(format!(
                "request_timeout {t} ({}) must be a positive number of seconds",
                self.request_timeout.source
            ))
        })
    }
    pub fn max_retries(&self) -> Result<u32, LlmError> {
        parse_setting("max_retries", &self.max_retries)
    }
    pub fn budget(&self) -> Result<crate::budget::Budget, LlmError> {
        let max_cost: Option<f64> = parse_opt("max_cost", &self.max_cost)?;
        if max_cost.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
            return Err(LlmError::Other(
                "max_cost must be a non-negative number".into(),
            ));
        }
        Ok(crate::budget::Budget {
            max_calls: parse_opt("max_calls", &self.max_calls)?,
            max_tokens: parse_opt("max_tokens_total", &self.max_tokens_total)?,
            max_cost,
        })
    }

    /// The options a model stack opens with: these settings, and the choices of one run that
    /// the config file does not hold. The CLI's flags and the Python package's keyword
    /// arguments both come here, so a setting means the same in each front end.
    pub fn open_options(&self, run: RunChoices) -> Result<crate::OpenOptions, LlmError> {
        Ok(crate::OpenOptions {
            base_url: run.base_url,
            api_key: None,
            api_key_env: run.api_key_env,
            cache_mode: run.cache_mode,
            cache_path: match self.cache.source {
                Source::Default => None,
                _ => Some(PathBuf::from(&self.cache.value)),
            },
            budget: self.budget()?,
            concurrency: self.concurrency()?,
            timeout: self.request_timeout()?,
            max_retries: self.max_retries()?,
            schema_mode: Default::default(),
            prices: run.prices,
            config: self.config_file.as_ref().map(|(p, _)| p.clone()),
            usage_log: run.usage_log,
            threads: run.threads,
            context_size: run.context_size,
            preflight: true,
        })
    }

    /// Rows for `config show`: setting, value, source.
    pub fn rows(&self) -> Vec<(&'static str, String, String)> {
        let mut rows = vec![(
            "config file",
            match &self.config_file {
                Some((p, _)) => p.display().to_string(),
                None => format!(
                    "(none; would be read from {})",
                    default_config_path().display()
                ),
            },
            match &self.config_file {
                Some((_, Found::Flag)) => "flag".to_string(),
                Some((_, Found::Env)) => format!("env {CONFIG_ENV}"),
                Some((_, Found::ConfigDir)) => "config directory".to_string(),
                Some((_, Found::Legacy)) => {
                    format!("{}: llm.toml (deprecated place)", home_source())
                }
                None => "-".to_string(),
            },
        )];
        let mut put = |name: &'static str, s: &Option<Setting>, unset: &str| {
            rows.push(match s {
                Some(s) => (name, s.value.clone(), s.source.to_string()),
                None => (name, unset.to_string(), "default".to_string()),
            })
        };
        put("model", &Some(self.model.clone()), "");
        put("base_url", &self.base_url, "(the provider's)");
        put(
            "api_key_env",
            &self.api_key_env,
            "(the provider's usual variable)",
        );
        put("concurrency", &Some(self.concurrency.clone()), "");
        put("request_timeout", &Some(self.request_timeout.clone()), "");
        put("max_retries", &Some(self.max_retries.clone()), "");
        put("budget.max_calls", &self.max_calls, "unlimited");
        put(
            "budget.max_tokens_total",
            &self.max_tokens_total,
            "unlimited",
        );
        put("budget.max_cost", &self.max_cost, "unlimited");
        put("cache", &Some(self.cache.clone()), "");
        let file = match &self.config_file {
            Some((p, _)) => format!("config {}", p.display()),
            None => "default".into(),
        };
        if self.api_key_in_file {
            rows.push(("api_key", "(set, hidden)".into(), file.clone()));
        }
        rows.push((
            "prices",
            if self.prices.is_empty() {
                "built-in table".into()
            } else {
                format!("built-in table + {}", self.prices.join(", "))
            },
            if self.prices.is_empty() {
                "default".into()
            } else {
                file
            },
        ));
        rows.push((
            "models dir",
            crate::local::store::ModelStore::default()
                .root()
                .display()
                .to_string(),
            home_source(),
        ));
        rows
    }
}

/// Where the maslens home (cache directory: models, cache, the old config place) comes from,
/// for `config show`: `env MASLENS_HOME` when that is set, else `default` (`~/.cache/maslens`).
fn home_source() -> String {
    match std::env::var_os("MASLENS_HOME").is_some_and(|h| !h.is_empty()) {
        true => "env MASLENS_HOME".into(),
        false => "default (~/.cache/maslens)".into(),
    }
}

/// A commented starting file for `maslens config init`.
pub const TEMPLATE: &str = r#"# maslens configuration (docs/config.md). Every key is optional; flags and environment
# variables win over this file.

# Default model for every LLM-backed command (docs/llm.md lists the forms).
# model = "openai/gpt-4o-mini"

# Environment variable that holds the API key (default: the provider's usual one,
# OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY, ...).
# api_key_env = "OPENAI_API_KEY"

# concurrency = 8
# request_timeout = 120   # seconds
# max_retries = 5

# Every run stops cleanly at these (exit code 1; rerun to resume from the cache).
[budget]
# max_calls = 1000
# max_tokens_total = 2000000
# max_cost = 5.0          # USD

# Prices in USD per million tokens, laid over the built-in table.
[prices]
# "openai:my-finetune" = { input = 0.30, cached_input = 0.15, output = 1.20 }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_and_is_empty() {
        assert_eq!(Config::parse(TEMPLATE).unwrap(), Config::default());
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::parse("concurency = 4\n").unwrap_err();
        assert!(e.contains("concurency"), "{e}");
        let e = Config::parse("concurrency = 0\n").unwrap_err();
        assert!(e.starts_with("concurrency"), "{e}");
        let e = Config::parse("[budget]\nmax_cost = -1.0\n").unwrap_err();
        assert!(e.contains("budget.max_cost"), "{e}");
        let e = Config::parse("model = \"nosuch:thing\"\n").unwrap_err();
        assert!(e.starts_with("model:"), "{e}");
        let e = Config::parse("request_timeout = \"soon\"\n").unwrap_err();
        assert!(e.contains("request_timeout"), "{e}");
    }

    #[test]
    fn old_models_table_is_read_as_prices() {
        let c = Config::parse("[models.\"m\"]\ninput = 1.0\noutput = 2.0\n").unwrap();
        assert_eq!(c.prices["m"].output, 2.0);
    }

    #[test]
    fn flag_beats_file_beats_default() {
        let loaded = Loaded {
            file: Some((PathBuf::from("/etc/m.toml"), Found::Flag)),
            config: Config::parse(
                "model = \"openai/gpt-4o-mini\"\nconcurrency = 3\n[budget]\nmax_cost = 2.5\n",
            )
            .unwrap(),
        };
        let none = Overrides::default();
        let e = loaded.effective(&none);
        // MASLENS_MODEL may be set by whoever runs the tests; the model row is checked only
        // when it is not.
        if std::env::var_os(MODEL_ENV).is_none() {
            assert_eq!(e.model.value, "openai/gpt-4o-mini");
            assert_eq!(e.model.source, Source::File("/etc/m.toml".into()));
        }
        assert_eq!(e.concurrency().unwrap(), 3);
        assert_eq!(e.max_retries().unwrap(), DEFAULT_MAX_RETRIES);
        assert_eq!(e.max_retries.source, Source::Default);
        assert_eq!(e.budget().unwrap().max_cost, Some(2.5));
        assert_eq!(e.budget().unwrap().max_calls, None);
        let flags = Overrides {
            model: Some("local:smollm2-135m".into()),
            concurrency: Some(1),
            ..Default::default()
        };
        let e = loaded.effective(&flags);
        assert_eq!(e.model.value, "local:smollm2-135m");
        assert_eq!(e.model.source, Source::Flag);
        assert_eq!(
            (e.concurrency().unwrap(), &e.concurrency.source),
            (1, &Source::Flag)
        );
        let rows = e.rows();
        assert!(rows
            .iter()
            .any(|r| r.0 == "budget.max_cost" && r.1 == "2.5" && r.2 == "config /etc/m.toml"));
    }
}
