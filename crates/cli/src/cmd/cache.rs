//! `maslens cache`: inspect and clear the LLM call cache.

use crate::cmd::EXIT_OK;
use crate::Global;
use maslens_llm::cache::Cache;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Cache file (SQLite); default `$MASLENS_HOME/cache.sqlite`.
    #[arg(long, env = "MASLENS_CACHE", global = true)]
    pub cache: Option<PathBuf>,
    #[command(subcommand)]
    pub command: CacheCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum CacheCommand {
    /// Entries, pending batch requests and token totals per model.
    Stats,
    /// Delete the entries of one model (`--model openai:gpt-4o-mini`) or all (`--all`).
    Clear {
        /// Model id as shown by `maslens cache stats`.
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        model: Option<String>,
        /// Delete every entry.
        #[arg(long)]
        all: bool,
    },
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let path = args.cache.unwrap_or_else(Cache::default_path);
    if !path.exists() {
        anyhow::bail!(
            "no cache at {} (it is created by the first LLM call)",
            path.display()
        );
    }
    let cache = Cache::open(&path)?;
    match args.command {
        CacheCommand::Stats => {
            let stats = cache.stats()?;
            if global.json {
                crate::outln!("{}", serde_json::to_string(&stats)?);
            } else {
                crate::outln!(
                    "{}: {} entries, {} pending batch request(s), {:.1} MB",
                    stats.path.display(),
                    stats.entries,
                    stats.pending,
                    stats.bytes as f64 / 1e6
                );
                let mut table = comfy_table::Table::new();
                table.set_header([
                    "model",
                    "entries",
                    "prompt tokens",
                    "cached tokens",
                    "completion tokens",
                ]);
                for m in &stats.by_model {
                    table.add_row([
                        m.model.clone(),
                        m.entries.to_string(),
                        m.usage.prompt_tokens.to_string(),
                        m.usage.cached_tokens.to_string(),
                        m.usage.completion_tokens.to_string(),
                    ]);
                }
                if !stats.by_model.is_empty() {
                    crate::outln!("{table}");
                }
            }
        }
        CacheCommand::Clear { model, all: _ } => {
            let n = cache.clear(model.as_deref())?;
            if global.json {
                crate::outln!("{}", serde_json::json!({"deleted": n, "model": model}));
            } else {
                match &model {
                    Some(m) => crate::outln!("deleted {n} entries of {m} from {}", path.display()),
                    None => crate::outln!("deleted all {n} entries from {}", path.display()),
                }
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
