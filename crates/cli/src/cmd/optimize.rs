//! `maslens optimize`: credit-guided prompt optimization of a multi-role debate (verbalized block
//! coordinate descent), compared with the unoptimized prompts and a black-box baseline at the
//! same LLM call budget, on a held-out split. Writes JSON, Markdown and HTML reports and the
//! held-out runs as maslens traces.

use crate::cmd::{block_on, EXIT_OK};
use crate::debate_args::{debate_models, load_questions};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::{bail, Context};
use maslens_core::optimize::{
    optimize_settings, summary_json, sweep_configs, sweep_report, write_outputs, write_sweep,
    Overrides, SplitSpec, SweepAxis,
};
use maslens_credit::config::{Blocks, DebateConfig};
use maslens_credit::data::Mcq;
use maslens_credit::experiment::{Experiment, ExperimentOptions};
use maslens_credit::simulation;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlocksArg {
    Both,
    RolesOnly,
    AggregatorsOnly,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Debate configuration (TOML: roles, prompts, rounds, aggregators, models, decoding,
    /// [optimizer], [data]). Optional with --simulation.
    pub config: Option<PathBuf>,
    /// Dataset: `mmlu:PATH` (CSV file or folder), `aqua:PATH`, `jsonl:PATH`, `medmcqa:PATH`,
    /// `medmcqa-hf:PATH`, `gpqa:PATH` (docs/credit.md); overrides [data].
    #[arg(long)]
    pub dataset: Option<String>,
    /// Optimization examples (default: [data] or 100).
    #[arg(long)]
    pub opt_size: Option<usize>,
    /// Held-out test examples (default: [data] or all the rest).
    #[arg(long)]
    pub test_size: Option<usize>,
    /// Seed of the optimization / test split (fixed across runs).
    #[arg(long)]
    pub split_seed: Option<u64>,
    /// Run seeds (decoding seed and optimizer randomness), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub seeds: Vec<u64>,
    /// Outer BCD iterations at most.
    #[arg(long)]
    pub iterations: Option<usize>,
    /// Ablation: which prompt blocks may change.
    #[arg(long, value_enum)]
    pub blocks: Option<BlocksArg>,
    /// Phase A: rewrite the K lowest-credit roles.
    #[arg(long)]
    pub bottom_k: Option<usize>,
    /// Fusion weight lambda (c = lambda*q + (1-lambda)*p).
    #[arg(long)]
    pub lambda: Option<f64>,
    /// EMA threshold tau.
    #[arg(long)]
    pub tau: Option<f64>,
    /// EMA buffer m (informative failures needed).
    #[arg(long)]
    pub buffer_m: Option<usize>,
    /// The one-round-at-a-time ablation: Phase B may rewrite only this round's aggregator
    /// (1-based).
    #[arg(long, value_name = "ROUND")]
    pub only_round: Option<usize>,
    /// Run a grid of settings, one experiment each, on the same split and models: `KEY=V1,V2,...`
    /// with KEY tau, buffer_m (m), only_round (round) or lambda; repeat for more axes (their
    /// product). With --out, each setting writes OUT/<setting>/ and the table goes to
    /// OUT/sweep.md and OUT/sweep.json.
    #[arg(long, value_name = "KEY=V1,V2,...", value_parser = |s: &str| s.parse::<SweepAxis>())]
    pub sweep: Vec<SweepAxis>,
    /// LLM call budget of the optimizer (the black box gets what the optimizer used).
    #[arg(long)]
    pub optimizer_calls: Option<u64>,
    /// Token budget of the optimizer (prompt + completion tokens).
    #[arg(long)]
    pub optimizer_tokens: Option<u64>,
    /// Skip the black-box baseline.
    #[arg(long)]
    pub no_black_box: bool,
    /// Do not score every iterate on the test set (no accuracy curves).
    #[arg(long)]
    pub no_curves: bool,
    /// Skip the final-answer critic on the test runs (label tables show correctness only).
    #[arg(long)]
    pub no_final_critic: bool,
    /// Output folder: report.json, report.md, report.html, prompts.json, traces/*.jsonl.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Also store the experiment (accuracy, optimizer history with each iteration's credit
    /// table and rewrites) in this store, where `maslens serve`'s web UI shows it under Credit:
    /// a `postgres://` URL, a `sqlite:` URL or a SQLite file.
    #[arg(long, value_name = "DB")]
    pub db: Option<String>,
    /// Run the SIMULATED multi-agent system (a deterministic test environment, not a model)
    /// on synthetic questions instead of an LLM.
    #[arg(long)]
    pub simulation: bool,
    /// Synthetic questions for --simulation.
    #[arg(long, default_value_t = 240)]
    pub sim_questions: usize,
    #[command(flatten)]
    pub llm: LlmArgs,
}

fn overrides(a: &Args) -> Overrides {
    Overrides {
        iterations: a.iterations,
        blocks: a.blocks.map(|b| match b {
            BlocksArg::Both => Blocks::Both,
            BlocksArg::RolesOnly => Blocks::RolesOnly,
            BlocksArg::AggregatorsOnly => Blocks::AggregatorsOnly,
        }),
        bottom_k: a.bottom_k,
        lambda: a.lambda,
        tau: a.tau,
        buffer_m: a.buffer_m,
        max_calls: a.optimizer_calls,
        max_tokens: a.optimizer_tokens,
        only_round: a.only_round,
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let mut cfg: DebateConfig = match (&args.config, args.simulation) {
        (Some(p), _) => DebateConfig::from_path(p)?,
        (None, true) => simulation::config(2, 0, 0)?,
        (None, false) => bail!("a debate configuration file is required (or --simulation)"),
    };
    overrides(&args).apply(&mut cfg)?;
    if !args.sweep.is_empty() && args.db.is_some() {
        bail!("--db stores one experiment: run the settings of --sweep one by one to store them");
    }
    let sp = SplitSpec::resolve(
        cfg.data.as_ref(),
        args.split_seed,
        args.opt_size,
        args.test_size,
    );
    let (questions, dataset): (Vec<Mcq>, String) = if args.simulation && args.dataset.is_none() {
        (
            simulation::questions(args.sim_questions, sp.seed),
            format!("simulation ({} synthetic questions)", args.sim_questions),
        )
    } else {
        load_questions(args.dataset.as_deref(), &cfg, args.config.as_deref())?
    };
    let split = sp.split(&questions)?;
    // One experiment per sweep setting (one, the configuration's, without --sweep).
    let configs = sweep_configs(&cfg, &args.sweep)?;
    let cfg = Arc::new(cfg);
    let options = ExperimentOptions {
        seeds: if args.seeds.is_empty() {
            vec![0]
        } else {
            args.seeds.clone()
        },
        black_box: !args.no_black_box,
        curves: !args.no_curves,
        final_critic: !args.no_final_critic,
    };
    let runs: Vec<(String, Experiment)> = block_on(async {
        let (models, stacks) =
            debate_models(&args.llm, &cfg, args.simulation.then_some(&questions[..])).await?;
        let say = |label: &str| {
            if !label.is_empty() && !global.quiet {
                eprintln!("sweep: {label}");
            }
        };
        let runs = optimize_settings(&models, &configs, &split, &dataset, &options, &say).await?;
        crate::debate_args::finish(&stacks, global.quiet);
        anyhow::Ok(runs)
    })??;
    if !args.sweep.is_empty() {
        let (table, json) = sweep_report(&runs, args.out.as_deref());
        if let Some(dir) = &args.out {
            write_sweep(dir, &runs, &configs, (&table, &json))?;
        }
        let mut out = std::io::stdout().lock();
        if global.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        } else {
            writeln!(out, "{table}")?;
        }
        return Ok(ExitCode::from(EXIT_OK));
    }
    let Some((_, x)) = runs.into_iter().next() else {
        bail!("no experiment ran");
    };
    if let Some(dir) = &args.out {
        write_outputs(dir, &x, &cfg).with_context(|| format!("writing {}", dir.display()))?;
    }
    if let Some(db) = &args.db {
        let id = crate::db::add_report(
            db,
            maslens_store::diagnosis::ReportKind::Credit,
            &format!("optimize: {}", x.name),
            None,
            &x,
        )?;
        eprintln!("experiment stored in {db} as {id}");
    }
    let mut out = std::io::stdout().lock();
    if global.json {
        let summary = summary_json(&x, args.out.as_deref());
        writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        writeln!(out, "{}", maslens_credit::report::markdown(&x))?;
    }
    Ok(ExitCode::from(EXIT_OK))
}
