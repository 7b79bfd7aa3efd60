//! LLM options shared by every LLM-backed command (flatten `LlmArgs` into a command's Args).
//!
//! ```ignore
//! let stack = args.llm.build().await?;          // maslens_llm::Stack
//! let verdict = method(&*stack.model, ...).await;
//! crate::llm_args::finish(&stack, global.quiet); // usage summary / batch export note on stderr
//! ```

use std::path::PathBuf;

pub use maslens_llm::{CacheMode, Stack};

#[derive(clap::Args, Debug, Clone)]
pub struct LlmArgs {
    /// Model spec, `provider:MODEL` or `provider/MODEL`: `local:smollm2-135m`,
    /// `local:/path/model.gguf`, `openai/gpt-4o-mini`, `gemini/gemini-2.0-flash`,
    /// `anthropic/claude-3-5-haiku-latest`, `ollama/llama3.2`, `vllm/NAME`, any of them with
    /// `@http://host:port/v1` (docs/llm.md).
    /// Default: `$MASLENS_MODEL`, else the config file's `model`, else `local:smollm2-135m`
    /// (`maslens config show` says which).
    #[arg(long)]
    pub model: Option<String>,
    /// Base URL of the server; overrides the one in the spec (then the config file's, then the
    /// provider's variable such as `OPENAI_BASE_URL`, then the provider's API).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Environment variable that holds the API key (default: the config file's, else the
    /// provider's usual one: `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `GEMINI_API_KEY`, ...).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Cache mode: `read-write`, `off`, `replay` (answer only from the cache, a miss is an
    /// error) or `export:FILE` (send nothing; write the uncached requests to FILE as OpenAI
    /// Batch JSONL, then `maslens batch import` the results and rerun).
    #[arg(long, default_value = "read-write", value_name = "MODE")]
    pub cache_mode: CacheMode,
    /// Same as `--cache-mode export:FILE`.
    #[arg(long, value_name = "FILE", conflicts_with = "cache_mode")]
    pub batch_export: Option<PathBuf>,
    /// Cache file (SQLite); default `$MASLENS_CACHE`, else `$MASLENS_HOME/cache.sqlite`.
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Stop cleanly after this many backend calls (cache hits are free) [default: config file].
    #[arg(long)]
    pub max_calls: Option<u64>,
    /// Stop cleanly after this many tokens (prompt + completion).
    #[arg(long)]
    pub max_tokens_total: Option<u64>,
    /// Stop cleanly after this cost in USD (priced with the price table).
    #[arg(long)]
    pub max_cost: Option<f64>,
    /// Concurrent requests to the backend [default: config file, else 8].
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Per-request timeout in seconds [default: config file, else 120].
    #[arg(long)]
    pub request_timeout: Option<f64>,
    /// Retries on 429, 5xx, timeouts and connection errors [default: config file, else 5].
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Price table (TOML, USD per million tokens) laid over the built-in defaults.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Config file (default model, key variable, budgets, prices); default `$MASLENS_CONFIG`,
    /// else `$XDG_CONFIG_HOME/maslens/config.toml` if present (docs/config.md).
    #[arg(long, visible_alias = "config", value_name = "FILE")]
    pub llm_config: Option<PathBuf>,
    /// Append one JSON line per LLM call (stage, cache hit, tokens, wall time, cost) to this file.
    #[arg(long, value_name = "FILE")]
    pub usage_log: Option<PathBuf>,
    /// CPU threads for the embedded model.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Context window in tokens: the embedded model's context size; for `openai:` models, the
    /// window methods plan long traces for (unknown by default).
    #[arg(long)]
    pub context_size: Option<u32>,
}

impl LlmArgs {
    /// What the flags set (`None` where not given), for [`maslens_llm::config::Loaded::effective`].
    pub fn overrides(&self) -> maslens_llm::config::Overrides {
        maslens_llm::config::Overrides {
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            concurrency: self.concurrency,
            request_timeout: self.request_timeout,
            max_retries: self.max_retries,
            max_calls: self.max_calls,
            max_tokens_total: self.max_tokens_total,
            max_cost: self.max_cost,
            cache: self.cache.as_ref().map(|p| p.display().to_string()),
        }
    }

    /// Every setting in force: flags, then environment, then the config file, then defaults.
    pub fn effective(&self) -> anyhow::Result<maslens_llm::config::Effective> {
        let loaded = maslens_llm::config::Loaded::load(self.llm_config.as_deref())?;
        Ok(loaded.effective(&self.overrides()))
    }

    /// The model spec in force (flag, `MASLENS_MODEL`, config file, default).
    pub fn model(&self) -> anyhow::Result<String> {
        Ok(self.effective()?.model.value)
    }

    /// Concurrent requests in force.
    pub fn concurrency(&self) -> anyhow::Result<usize> {
        Ok(self.effective()?.concurrency()?)
    }

    /// The library options these flags describe, with the config file's values where a flag
    /// was not given.
    pub fn options(&self) -> anyhow::Result<maslens_llm::OpenOptions> {
        self.options_with(&self.effective()?)
    }

    /// [`LlmArgs::options`] from settings already resolved (the config file is read once).
    fn options_with(
        &self,
        eff: &maslens_llm::config::Effective,
    ) -> anyhow::Result<maslens_llm::OpenOptions> {
        if self
            .request_timeout
            .is_some_and(|t| !(t.is_finite() && t > 0.0))
        {
            anyhow::bail!("--request-timeout must be a positive number of seconds");
        }
        if self.max_cost.is_some_and(|c| !(c.is_finite() && c >= 0.0)) {
            anyhow::bail!("--max-cost must be a non-negative number");
        }
        let cache_mode = match &self.batch_export {
            Some(p) => CacheMode::Export(p.clone()),
            None => self.cache_mode.clone(),
        };
        Ok(eff.open_options(maslens_llm::config::RunChoices {
            base_url: self.base_url.clone(),
            api_key_env: self.api_key_env.clone(),
            cache_mode,
            prices: self.prices.clone(),
            usage_log: self.usage_log.clone(),
            threads: self.threads,
            context_size: self.context_size,
        })?)
    }

    /// Build the model stack (backend, budget, cache, usage tracker) these options describe.
    /// Call it inside the tokio runtime (`cmd::block_on`).
    pub async fn build(&self) -> anyhow::Result<Stack> {
        let eff = self.effective()?;
        let opts = self.options_with(&eff)?;
        Ok(maslens_llm::open(&eff.model.value, &opts).await?)
    }
}

/// Print what the LLM stack did to stderr: usage totals or, in export mode, the one line saying
/// how many calls were written and what to do next. Commands call it at the end of a run.
pub fn finish(stack: &Stack, quiet: bool) {
    finish_export(stack, quiet, None);
}

/// [`finish`], with what is left after this export round when the method needs several (the
/// Evaluators' calls need the Judge's answers): `more` is added to the export line.
pub fn finish_export(stack: &Stack, quiet: bool, more: Option<String>) {
    if let Some(rec) = &stack.exporter {
        // Printed even with --quiet: without it the run looks like it did nothing.
        eprintln!(
            "{}",
            export_line(rec.exported(), rec.path(), more.as_deref())
        );
        return;
    }
    if quiet {
        return;
    }
    let r = stack.usage.report();
    if r.total.calls == 0 {
        return;
    }
    let cost = if r.price_known {
        format!("${:.4}", r.total.cost_usd.unwrap_or(0.0))
    } else {
        "unknown (no price)".into()
    };
    eprintln!(
        "llm {}: {} calls ({} cached, {} errors), {} prompt tokens ({} provider-cached), {} completion tokens, cost {}",
        r.model,
        r.total.calls,
        r.total.cache_hits,
        r.total.errors,
        r.total.prompt_tokens,
        r.total.cached_tokens,
        r.total.completion_tokens,
        cost
    );
    if let Some(note) = embedded_note_after(&r.model, &r.total) {
        eprintln!("{note}");
    }
}

/// The line that ends a run in export mode: `N calls exported to FILE; run ...`, with `more`
/// (the rounds left) in brackets.
pub fn export_line(n: usize, file: &std::path::Path, more: Option<&str>) -> String {
    let more = more.map(|m| format!("; {m}")).unwrap_or_default();
    format!(
        "{n} call{} exported to {}; run `maslens batch import OUTPUT.jsonl` then rerun this command \
         (OUTPUT.jsonl: the results of that file from the OpenAI Batch API, the Anthropic Message \
         Batches API or `vllm run-batch`{more})",
        if n == 1 { "" } else { "s" },
        file.display()
    )
}

/// [`embedded_note`], only when the model answered something: a run whose calls all went to a
/// batch file or failed has no answers to warn about.
pub fn embedded_note_after(model: &str, total: &maslens_llm::Totals) -> Option<&'static str> {
    let answered = total.calls > total.deferred + total.errors;
    embedded_note(model).filter(|_| answered)
}

/// The one-line note printed after a run answered by the embedded default model.
pub const EMBEDDED_NOTE: &str = "note: these answers came from the embedded SmolLM2-135M, which shows that \
the pipeline runs but is far too small to judge well; pass --model (e.g. openai:gpt-4o-mini, or any \
OpenAI-compatible server: docs/llm.md) for diagnoses you can act on";

/// [`EMBEDDED_NOTE`] when `model` (a model id) is the embedded 135M default.
pub fn embedded_note(model: &str) -> Option<&'static str> {
    model
        .starts_with("local:smollm2-135m")
        .then_some(EMBEDDED_NOTE)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_default_gets_the_note_other_models_do_not() {
        assert!(super::embedded_note("local:smollm2-135m").is_some());
        assert!(super::embedded_note("openai:gpt-4o-mini").is_none());
        assert!(super::embedded_note("local:/models/qwen2.5-7b.gguf").is_none());
    }

    #[test]
    fn no_note_when_nothing_was_answered() {
        let m = "local:smollm2-135m";
        let totals = |calls, deferred, errors| maslens_llm::Totals {
            calls,
            deferred,
            errors,
            ..Default::default()
        };
        assert!(super::embedded_note_after(m, &totals(2, 0, 0)).is_some());
        assert!(super::embedded_note_after(m, &totals(3, 2, 0)).is_some());
        // All deferred to a batch file (export mode), or all failed.
        assert!(super::embedded_note_after(m, &totals(2, 2, 0)).is_none());
        assert!(super::embedded_note_after(m, &totals(2, 0, 2)).is_none());
    }
}

/// `maslens model bench`'s flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// An embedded model name or a GGUF path (what follows `local:`).
    #[arg(default_value = "smollm2-135m")]
    pub name: String,
    /// Prompt length in tokens (templated prompt, at most this many).
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens to generate per run (the model may stop earlier; the report says how many).
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: u32,
    /// Measured repetitions (after one warm-up run).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// CPU threads (default: all available cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Which runs: `raw`, `schema` or `both`.
    #[arg(long, default_value = "both", value_parser = ["raw", "schema", "both"])]
    pub mode: String,
}

impl BenchArgs {
    /// Bench (the library's `bench_spec`) and print the report.
    #[cfg(not(feature = "local"))]
    pub fn run(&self, _global: &crate::Global) -> anyhow::Result<()> {
        anyhow::bail!(
            "model bench measures the embedded llama.cpp backend, and this maslens was built \
             without the `local` feature; rebuild with default features"
        )
    }

    /// Bench (the library's `bench_spec`) and print the report.
    #[cfg(feature = "local")]
    pub fn run(&self, global: &crate::Global) -> anyhow::Result<()> {
        let schema = (self.mode != "raw").then(|| {
            (
                "schema:locate".to_string(),
                maslens_locate::judge::location_schema(&[]),
            )
        });
        let opts = maslens_llm::local::BenchOptions {
            prompt_tokens: self.prompt_tokens,
            gen_tokens: self.gen_tokens,
            reps: self.reps,
        };
        let (quiet, reps) = (global.quiet, self.reps);
        let report = maslens_llm::local::bench_spec(
            &self.name,
            self.threads,
            self.mode != "schema",
            schema,
            &opts,
            |case, rep| {
                if !quiet {
                    eprintln!("bench {case}: run {rep} of {reps} (0: warm-up)");
                }
            },
        )?;
        if global.json {
            crate::outln!("{}", serde_json::to_string(&report)?);
        } else {
            crate::outln!("{}", report.text());
        }
        Ok(())
    }
}
