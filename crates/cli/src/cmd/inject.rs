//! `maslens inject`: fault injection into a debate's successful runs, writing the runs the fault
//! turned wrong as labelled failure traces (training data for `maslens prior train`; docs/inject.md).

use crate::cmd::{block_on, EXIT_OK};
use crate::debate_args::debate_models;
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::bail;
use maslens_core::inject;
use maslens_credit::config::DebateConfig;
use maslens_credit::inject::{FaultKind, InjectOptions};
use maslens_credit::simulation;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Debate configuration (TOML, as for `maslens optimize`). Optional with --simulation.
    pub config: Option<PathBuf>,
    /// Dataset: `mmlu:PATH` (CSV file or folder), `aqua:PATH`, `jsonl:PATH`, `medmcqa:PATH`,
    /// `medmcqa-hf:PATH`, `gpqa:PATH` (docs/credit.md); overrides [data].
    #[arg(long)]
    pub dataset: Option<String>,
    /// Questions to run (the dataset's first N in a seeded order).
    #[arg(long, default_value_t = 20)]
    pub questions: usize,
    /// Fault kinds, comma-separated: wrong-fact, dropped-instruction.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wrong-fact,dropped-instruction"
    )]
    pub kinds: Vec<FaultKind>,
    /// Injected runs per successful clean run at most (positions in a seeded order).
    #[arg(long, default_value_t = 4)]
    pub per_run: usize,
    /// Seed of the question order, the positions, the wrong options and every run's decoding.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output folder: traces.jsonl (the labelled failure traces, native JSONL) and
    /// summary.json (every question: the clean answer, each injection and whether it flipped).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Run the SIMULATED multi-agent system (a deterministic test environment, not a model)
    /// on synthetic questions instead of an LLM.
    #[arg(long)]
    pub simulation: bool,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    if args.kinds.is_empty() {
        bail!("--kinds needs at least one fault kind");
    }
    let cfg: DebateConfig = match (&args.config, args.simulation) {
        (Some(p), _) => DebateConfig::from_path(p)?,
        (None, true) => simulation::config(2, 0, 0)?,
        (None, false) => bail!("a debate configuration file is required (or --simulation)"),
    };
    let picked = inject::questions(
        args.dataset.as_deref(),
        &cfg,
        args.config.as_deref(),
        args.simulation,
        args.questions,
        args.seed,
    )?;
    crate::debate_args::warn_skipped(&picked.skipped);
    let (questions, dataset) = (picked.items, picked.dataset);
    let opts = InjectOptions {
        kinds: args.kinds.clone(),
        per_run: args.per_run,
        seed: args.seed,
    };
    let bar = crate::progress::Bar::new("inject", global.quiet);
    let run = block_on(async {
        let (models, stacks) =
            debate_models(&args.llm, &cfg, args.simulation.then_some(&questions[..])).await?;
        let run =
            inject::inject_to(&args.out, &models, &cfg, &questions, &opts, &dataset, &bar).await;
        crate::debate_args::finish(&stacks, global.quiet);
        anyhow::Ok(run?)
    })??;
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&run.to_json()["summary"])?
        )?;
    } else {
        write!(out, "{}", run.text())?;
    }
    Ok(ExitCode::from(EXIT_OK))
}
