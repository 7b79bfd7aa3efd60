//! `maslens prior`: the learned localizer without an LLM (train, eval, rank).

use crate::inputs::{read_all, Inputs};
use crate::Global;
use anyhow::Context;
use maslens_core::prior;
use maslens_prior::run::{parse_objective, parse_pair_rule};
use maslens_trace::Trace;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// The frozen protocol on labelled traces: nested cross-validation grouped by task question
    /// (selection inside), leave-one-group-out, then select on all traces and write the model.
    Train(TrainArgs),
    /// Evaluate a model (default: the shipped one) on labelled traces, next to the baselines.
    Eval(EvalArgs),
    /// Ranked (agent, step) candidates for each trace.
    Rank(RankArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Seed for fold split, bootstrap and the random baseline.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Bootstrap resamples for the 95% intervals.
    #[arg(long, default_value_t = 2000)]
    pub bootstrap: usize,
}

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Labelled traces (files, directories, `-`; any supported format).
    #[command(flatten)]
    pub input: Inputs,
    /// Where to write the trained model.
    #[arg(long, short, default_value = "prior-model.json", value_name = "FILE")]
    pub out: PathBuf,
    /// Outer cross-validation folds, grouped by task question (0: skip cross-validation).
    #[arg(long, default_value_t = 10)]
    pub folds: usize,
    /// Folds of the selection among configurations (inside each outer fold, and on all traces
    /// for the written model).
    #[arg(long, default_value_t = 5)]
    pub inner_folds: usize,
    /// L2 penalty of the step head. Giving --alpha, --agent-alpha or --objective fixes the
    /// configuration (nothing is selected; unset ones take the built-in defaults); without them
    /// the protocol chooses among its 18 configurations (docs/prior.md).
    #[arg(long)]
    pub alpha: Option<f64>,
    /// L2 penalty of the agent head (see --alpha).
    #[arg(long)]
    pub agent_alpha: Option<f64>,
    /// Objective of the step head: `pointwise` (logistic regression over steps) or `listwise`
    /// (conditional logit: a softmax over each trace's steps); see --alpha.
    #[arg(long, value_parser = ["pointwise", "listwise"])]
    pub objective: Option<String>,
    /// How `predict` pairs the heads: `independent` (agent head's agent, step head's step; the
    /// two are scored separately on Who&When) or `agent-first` (the step is the agent's own).
    #[arg(long, default_value = "independent", value_parser = ["independent", "agent-first"])]
    pub pair_rule: String,
    /// Rank agents by summed step probability instead of the learned agent head.
    #[arg(long)]
    pub no_agent_head: bool,
    /// Write the full evaluation report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the out-of-fold step distributions of the pooled cross-validation here, as the
    /// JSONL that `--prior FILE` of `maslens locate` / `maslens eval locate` reads
    /// (`{"trace", "probs"}`): LLM + prior experiments on the training traces stay honest.
    #[arg(long)]
    pub oof_probs: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// Labelled traces (files, directories, `-`).
    #[command(flatten)]
    pub input: Inputs,
    /// Model file (default: the shipped model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    /// Traces (files, directories, `-`).
    #[command(flatten)]
    pub input: Inputs,
    /// Model file (default: the shipped model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Candidates shown per trace.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    match args.command {
        Sub::Train(a) => train(a, global),
        Sub::Eval(a) => eval(a, global),
        Sub::Rank(a) => rank(a, global),
    }
}

/// Read every trace; unreadable records are reported on stderr and counted.
fn load(input: &Inputs, global: &Global) -> anyhow::Result<(Vec<Trace>, usize)> {
    let (traces, errors) = read_all(input, global, "reading traces", None)?;
    Ok((traces, errors.len()))
}

fn exit(skipped: usize) -> ExitCode {
    crate::ui::exit_code(skipped)
}

fn print_report(report: &prior::EvalReport, global: &Global) -> anyhow::Result<()> {
    if global.json {
        crate::outln!("{}", serde_json::to_string_pretty(report)?);
    } else {
        let text = prior::render_text(report);
        crate::outln!("{}", text.strip_suffix('\n').unwrap_or(&text));
    }
    if let Some(note) = &report.in_sample {
        eprintln!("warning: {note}");
    }
    Ok(())
}

fn train(args: TrainArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let (traces, skipped) = load(&args.input, global)?;
    let request = prior::TrainRequest {
        folds: args.folds,
        inner_folds: args.inner_folds,
        alpha: args.alpha,
        agent_alpha: args.agent_alpha,
        // clap accepts only the names these parse
        objective: args.objective.as_deref().and_then(parse_objective),
        pair_rule: parse_pair_rule(&args.pair_rule).unwrap_or_default(),
        agent_head: !args.no_agent_head,
        seed: args.common.seed,
        bootstrap: args.common.bootstrap,
        oof_probs: args.oof_probs.is_some(),
        inputs: args
            .input
            .inputs
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    };
    let refs: Vec<&Trace> = traces.iter().collect();
    let trained = prior::train(&refs, skipped, &request)?;
    if let (Some(path), Some(lines)) = (&args.oof_probs, &trained.oof_probs) {
        maslens_prior::probs::write(path, lines)?;
        eprintln!(
            "out-of-fold step distributions of {} written to {}",
            crate::words::count(lines.len(), "trace"),
            path.display()
        );
    }
    trained
        .model
        .save(&args.out)
        .with_context(|| format!("writing the model to {}", args.out.display()))?;
    if let Some(path) = &args.report {
        let text = serde_json::to_string_pretty(&trained.report)? + "\n";
        crate::ui::write_atomic(path, text.as_bytes())?;
    }
    print_report(&trained.report, global)?;
    if !global.json {
        crate::outln!("\nmodel written to {}", args.out.display());
    }
    Ok(exit(skipped))
}

fn eval(args: EvalArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let model = prior::load_model(args.model.as_deref())?;
    let (traces, skipped) = load(&args.input, global)?;
    let ecfg = prior::eval_config(args.common.seed, args.common.bootstrap);
    let refs: Vec<&Trace> = traces.iter().collect();
    let report = prior::evaluate(&refs, skipped, &model, &ecfg)?;
    print_report(&report, global)?;
    Ok(exit(skipped))
}

fn rank(args: RankArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let model = prior::load_model(args.model.as_deref())?.model;
    let (traces, skipped) = load(&args.input, global)?;
    for t in &traces {
        let r = prior::rank(&model, t, args.top);
        if global.json {
            crate::outln!("{}", serde_json::to_string(&r)?);
            continue;
        }
        crate::outln!("{}", r.text().trim_end());
    }
    if traces.is_empty() && skipped == 0 {
        anyhow::bail!("no traces found in the inputs");
    }
    Ok(exit(skipped))
}
