//! Options from Python: a dict per call, read field by field into the same typed options the CLI
//! builds from its flags. An unknown key or a wrong value raises `OptionsError` naming the key.

use crate::OptionsError;
use maslens_core::locate::{ErrorModes, LocateOptions, Method};
use maslens_credit::config::Decoding;
use maslens_credit::trace_credit::{Segmenting, TraceCreditOptions};
use maslens_implicit::settings::Counting;
use maslens_implicit::{ScanOptions, ScanSettings};
use maslens_locate::{Protocol, Style, Variant};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::path::PathBuf;

/// Read `dict` (absent: every default) as `T`; errors name the option (`locate option
/// `protocol`: unknown variant ...`).
pub(crate) fn from_dict<T: DeserializeOwned + Default>(
    what: &str,
    dict: Option<&Bound<'_, PyDict>>,
) -> PyResult<T> {
    let Some(d) = dict else {
        return Ok(T::default());
    };
    let value: serde_json::Value = pythonize::depythonize(d.as_any())
        .map_err(|e| OptionsError::new_err(format!("{what} options: {e}")))?;
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            OptionsError::new_err(format!("{what} options: {inner}"))
        } else {
            OptionsError::new_err(format!("{what} option `{path}`: {inner}"))
        }
    })
}

/// How a model is opened: the LLM options of every model-backed command (`maslens --help`'s
/// LLM flags), `None` where the config file or the default decides.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct LlmOptions {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    /// `read-write`, `off`, `replay` or `export:FILE`.
    pub cache: Option<String>,
    pub cache_path: Option<String>,
    pub max_calls: Option<u64>,
    pub max_tokens_total: Option<u64>,
    pub max_cost: Option<f64>,
    pub concurrency: Option<usize>,
    pub request_timeout: Option<f64>,
    pub max_retries: Option<u32>,
    pub prices: Option<String>,
    pub config: Option<String>,
    pub usage_log: Option<String>,
    pub threads: Option<usize>,
    pub context_size: Option<u32>,
}

impl LlmOptions {
    /// The model spec in force and the options to open it with (flags > environment > config
    /// file > defaults, exactly as the CLI resolves them).
    pub(crate) fn resolve(
        &self,
        spec: Option<String>,
    ) -> Result<(String, maslens_llm::OpenOptions), String> {
        if self
            .request_timeout
            .is_some_and(|t| !(t.is_finite() && t > 0.0))
        {
            return Err("request_timeout must be a positive number of seconds".into());
        }
        if self.max_cost.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
            return Err("max_cost must be a non-negative number".into());
        }
        let cache_mode: maslens_llm::CacheMode = match &self.cache {
            Some(m) => m.parse().map_err(|e| format!("cache: {e}"))?,
            None => Default::default(),
        };
        let config = self.config.as_ref().map(PathBuf::from);
        let loaded =
            maslens_llm::config::Loaded::load(config.as_deref()).map_err(|e| e.to_string())?;
        let eff = loaded.effective(&maslens_llm::config::Overrides {
            model: spec,
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            concurrency: self.concurrency,
            request_timeout: self.request_timeout,
            max_retries: self.max_retries,
            max_calls: self.max_calls,
            max_tokens_total: self.max_tokens_total,
            max_cost: self.max_cost,
            cache: self.cache_path.clone(),
        });
        let mut opts = eff
            .open_options(maslens_llm::config::RunChoices {
                base_url: self.base_url.clone(),
                api_key_env: self.api_key_env.clone(),
                cache_mode,
                prices: self.prices.as_ref().map(PathBuf::from),
                usage_log: self.usage_log.as_ref().map(PathBuf::from),
                threads: self.threads,
                context_size: self.context_size,
            })
            .map_err(|e| e.to_string())?;
        opts.api_key = self.api_key.clone();
        Ok((eff.model.value, opts))
    }
}

/// `locate` / `eval_locate`'s method options (the CLI's method flags).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct LocateOpts {
    pub method: Method,
    pub protocol: Protocol,
    pub variant: Variant,
    pub evaluators: Vec<Style>,
    pub with_ground_truth: bool,
    pub error_modes: ErrorModes,
    pub max_answer_tokens: u32,
    pub prior: Option<String>,
    pub prior_weight: f64,
    pub prior_narrowing: bool,
    /// Stack weights of `method="stacked"`: `builtin`, `generic`, or a weights file.
    pub stack: Option<String>,
    /// Allow a tool, terminal or human as the primary agent.
    pub allow_non_acting: bool,
    /// Which pair `eval_locate` scores: `coherent` or `independent`.
    pub pair_rule: maslens_trace::ScoringRule,
    /// `fallback="prior"`: a stacked verdict may be the prior's alone when the LLM fails.
    pub fallback: Option<String>,
}

impl Default for LocateOpts {
    fn default() -> Self {
        let d = LocateOptions::default();
        LocateOpts {
            method: d.method,
            protocol: d.protocol,
            variant: d.variant,
            evaluators: d.evaluators,
            with_ground_truth: d.with_ground_truth,
            error_modes: d.error_modes,
            max_answer_tokens: d.max_answer_tokens,
            prior: d.prior,
            prior_weight: d.prior_weight,
            prior_narrowing: d.prior_narrowing,
            stack: d.stack,
            allow_non_acting: d.allow_non_acting,
            pair_rule: d.pair_rule,
            fallback: None,
        }
    }
}

impl LocateOpts {
    /// The core options, with the Evaluator model specs (opened by the caller).
    pub(crate) fn options(self, evaluator_models: Vec<String>) -> LocateOptions {
        LocateOptions {
            method: self.method,
            protocol: self.protocol,
            variant: self.variant,
            evaluators: self.evaluators,
            evaluator_models,
            with_ground_truth: self.with_ground_truth,
            error_modes: self.error_modes,
            max_answer_tokens: self.max_answer_tokens,
            prior: self.prior,
            prior_weight: self.prior_weight,
            prior_narrowing: self.prior_narrowing,
            stack: self.stack,
            allow_non_acting: self.allow_non_acting,
            pair_rule: self.pair_rule,
            fallback_prior: self.fallback.as_deref() == Some("prior"),
        }
    }
}

/// `scan`'s options (the CLI's scan flags).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ScanOpts {
    pub weights: Option<String>,
    pub min_judges: Option<usize>,
    pub absorption: bool,
    pub count_unsupported: bool,
    pub counting: Counting,
    pub window_tokens: Option<usize>,
    pub overlap: usize,
    pub detect_max_tokens: u32,
    pub max_events: usize,
    pub absorb_max_tokens: u32,
    pub seed: u64,
}

impl Default for ScanOpts {
    fn default() -> Self {
        let d = ScanSettings::default();
        ScanOpts {
            weights: None,
            min_judges: d.min_judges,
            absorption: d.classify_absorption,
            count_unsupported: d.count_unsupported,
            counting: d.counting,
            window_tokens: d.window_tokens,
            overlap: d.overlap_steps,
            detect_max_tokens: d.detect_max_tokens,
            max_events: d.max_events,
            absorb_max_tokens: d.absorb_max_tokens,
            seed: d.seed,
        }
    }
}

impl ScanOpts {
    pub(crate) fn options(self) -> Result<ScanOptions, String> {
        let weights = maslens_implicit::settings::weights_or_default(
            self.weights.as_ref().map(PathBuf::from).as_deref(),
        )
        .map_err(|e| format!("weights: {e}"))?;
        Ok(ScanOptions {
            weights,
            settings: ScanSettings {
                classify_absorption: self.absorption,
                count_unsupported: self.count_unsupported,
                counting: self.counting,
                min_judges: self.min_judges,
                window_tokens: self.window_tokens,
                overlap_steps: self.overlap,
                detect_max_tokens: self.detect_max_tokens,
                max_events: self.max_events,
                absorb_max_tokens: self.absorb_max_tokens,
                seed: self.seed,
            },
        })
    }
}

/// `credit`'s options (the CLI's credit flags).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct CreditOpts {
    pub segment: Segmenting,
    pub window: usize,
    pub lambda: f64,
    pub critic_max_tokens: u32,
    pub max_step_chars: usize,
}

impl Default for CreditOpts {
    fn default() -> Self {
        let d = TraceCreditOptions::default();
        CreditOpts {
            segment: d.segmenting,
            window: d.window,
            lambda: d.lambda,
            critic_max_tokens: d.decoding.max_tokens,
            max_step_chars: d.max_step_chars,
        }
    }
}

impl CreditOpts {
    pub(crate) fn options(self) -> Result<TraceCreditOptions, String> {
        if !(0.0..=1.0).contains(&self.lambda) {
            return Err(format!("lambda {} must be in [0, 1]", self.lambda));
        }
        Ok(TraceCreditOptions {
            lambda: self.lambda,
            segmenting: self.segment,
            window: self.window.max(1),
            decoding: Decoding {
                temperature: 0.0,
                max_tokens: self.critic_max_tokens,
                top_p: None,
            },
            repair: true,
            max_step_chars: self.max_step_chars,
        })
    }
}

/// `eval_locate`'s own options (the CLI's `eval locate` flags besides the method's).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct EvalOpts {
    pub compat_substring: bool,
    pub split: Option<f64>,
    pub seed: u64,
    pub predictions: Option<String>,
    pub limit: Option<usize>,
    pub subset: Option<String>,
    pub tolerances: Vec<usize>,
    pub out: Option<String>,
    pub export_refinement: Option<String>,
    /// `verified` or `gold`.
    pub refine_targets: maslens_core::eval_locate::RefineTargets,
    pub round: u32,
    pub base_model: String,
}

impl Default for EvalOpts {
    fn default() -> Self {
        EvalOpts {
            compat_substring: false,
            split: None,
            seed: 0,
            predictions: None,
            limit: None,
            subset: None,
            tolerances: vec![0, 1, 2, 3, 5, 10, 20],
            out: None,
            export_refinement: None,
            refine_targets: Default::default(),
            round: 1,
            base_model: "HuggingFaceTB/SmolLM2-135M-Instruct".into(),
        }
    }
}

/// `modes`' options (the CLI's modes flags).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ModesOpts {
    pub system: Option<String>,
    pub outcome: String,
    pub gold: bool,
    pub similarity: f64,
    pub examples: usize,
    pub summarize_top: usize,
}

impl Default for ModesOpts {
    fn default() -> Self {
        let d = maslens_core::modes::ModesOptions::default();
        ModesOpts {
            system: None,
            outcome: "failure".into(),
            gold: false,
            similarity: d.similarity,
            examples: d.examples,
            summarize_top: 10,
        }
    }
}

impl ModesOpts {
    pub(crate) fn grouping(&self) -> Result<maslens_core::modes::ModesOptions, String> {
        maslens_core::modes::ModesOptions {
            similarity: self.similarity,
            examples: self.examples,
            ..Default::default()
        }
        .checked()
        .map_err(|e| e.to_string())
    }
}
