//! `maslens eval locate whowhen:DIR | aegis:FILE`: benchmark a failure localizer with exact
//! metrics, bootstrap intervals and trivial baselines on the same cases
//! (`maslens_core::eval_locate`).

use crate::llm_args::LlmArgs;
use crate::locate_args::{CaseArgs, MethodArgs};
use crate::Global;
use anyhow::Context;
use maslens_core::eval_locate::{eval_locate, EvalLocateOptions, RefineExport};
use maslens_core::refinement::{attach_finetune, check_finetuned_on};
use maslens_store::diagnosis::ReportKind;
use std::path::PathBuf;
use std::process::ExitCode;

#[path = "eval_compare.rs"]
mod compare;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum EvalCommand {
    /// Failure localization on Who&When (`whowhen:DIR`) or Aegis-Bench (`aegis:FILE`).
    Locate(LocateArgs),
    /// The stacked localizer (`maslens locate`'s default) against the prior alone and the LLM
    /// pipeline alone, by nested cross-validation grouped by task question; fits and writes the
    /// stack weights for the model (`-o`, then `maslens locate --stack FILE`).
    Stack(StackArgs),
    /// Several localizers (the prior, the stack, AgentLocate, Who&When's all-at-once,
    /// step-by-step and binary search) on the same cases with the same model and cache: one
    /// table, paired McNemar tests and bootstrap intervals (docs/locate.md).
    Compare(compare::CompareArgs),
}

#[derive(clap::Args, Debug)]
pub struct StackArgs {
    /// Labelled traces: `whowhen:DIR`, `aegis:FILE`, or a path.
    pub dataset: String,
    #[command(flatten)]
    pub method: MethodArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Read the pipeline's verdicts from these files (`verdicts.jsonl` of `eval locate --out`, or
    /// `maslens locate --json` lines) instead of running it.
    #[arg(long, value_name = "FILE")]
    pub verdicts: Vec<PathBuf>,
    /// Write the weights fit on every case here (for `maslens locate --stack FILE`).
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Save the pipeline's verdicts in this file (JSONL, by trace id), to refit later with
    /// --verdicts.
    #[arg(long, value_name = "FILE")]
    pub save_verdicts: Option<PathBuf>,
    /// Write the evaluation report (JSON) here.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Outer folds of the nested cross-validation (grouped by task question).
    #[arg(long, default_value_t = 10)]
    pub folds: usize,
    /// Folds of every selection inside an outer fold.
    #[arg(long, default_value_t = 5)]
    pub inner_folds: usize,
    /// Seed of the folds, the bootstrap and the random baseline.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Also run the nested protocol on these fold seeds (comma-separated) and print each seed's
    /// pooled hits with the sums: how much of one split's difference is noise.
    #[arg(long, value_name = "SEEDS", value_delimiter = ',')]
    pub repeat_seeds: Vec<u64>,
    /// Only cases whose id starts with this (e.g. `Hand-Crafted/`).
    #[arg(long)]
    pub subset: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct LocateArgs {
    #[command(flatten)]
    pub cases: CaseArgs,
    /// Deterministic split: this fraction of each subset is the refinement (train) side, the rest is evaluated.
    #[arg(long)]
    pub split: Option<f64>,
    /// Seed of the split, the random baseline and the bootstrap intervals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Score a JSONL of `{"trace", "agent", "step"[, "error_mode"]}` predictions instead of running a method.
    #[arg(long)]
    pub predictions: Option<PathBuf>,
    /// Directory for report.json, report.md, report.html and verdicts.jsonl.
    #[arg(long, short, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Also store the report in a maslens store (a `postgres://` or `sqlite:` URL, or a SQLite
    /// file; the one `maslens serve` uses), named after the dataset.
    #[arg(long, value_name = "URL|FILE")]
    pub db: Option<String>,
    /// Step tolerances for the tolerance curve.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,3,5,10,20")]
    pub tolerances: Vec<usize>,
    /// Export refinement data (z_q instances, chat JSONL, trl command) for the refinement side
    /// (the train part of --split, else every case) into this directory.
    #[arg(long)]
    pub export_refinement: Option<PathBuf>,
    /// Refinement targets: `verified` (Evaluator vote, AgentLocate) or `gold` (variant III).
    #[arg(long, default_value = "verified", value_parser = ["verified", "gold"])]
    pub refine_targets: String,
    /// Refinement round recorded in the instances (run round r+1 with the round-r adapter as --model).
    #[arg(long, default_value_t = 1)]
    pub round: u32,
    /// Base model name written into the trl command.
    #[arg(long, default_value = "HuggingFaceTB/SmolLM2-135M-Instruct")]
    pub base_model: String,
    /// With `--variant judge-ft`: the `--export-refinement` directory the Judge (--model) was
    /// fine-tuned on. The report records what it was trained on (config.finetune) and which of
    /// the paper's outputs the run gives; evaluated traces that were in that data are reported
    /// (exit 1). `DIR/evaluate.sh MODEL_SPEC` runs this evaluation.
    #[arg(long, value_name = "DIR")]
    pub finetuned_on: Option<PathBuf>,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let a = match args.command {
        EvalCommand::Locate(a) => a,
        EvalCommand::Stack(s) => return stack(s, global),
        EvalCommand::Compare(c) => return compare::run(c, global),
    };
    let note = check_finetuned_on(a.cases.method.variant, a.finetuned_on.as_deref())?;
    if let (Some(note), false) = (note, global.quiet) {
        eprintln!("note: {note}");
    }
    let opts = EvalLocateOptions {
        split: a.split,
        predictions: a.predictions.clone(),
        export_refinement: a.export_refinement.as_ref().map(|dir| RefineExport {
            dir: dir.clone(),
            targets: a.refine_targets.parse().unwrap_or_default(),
            round: a.round,
            base_model: a.base_model.clone(),
        }),
        ..a.cases.options(a.seed, &a.tolerances)?
    };
    let bar = crate::progress::Bar::new("eval", global.quiet);
    let mut out = super::block_on(eval_locate(&opts, &bar))??;
    if let Some(dir) = &a.finetuned_on {
        attach_finetune(&mut out, dir)?;
    }
    if let Some(judge) = out.judge.as_ref().filter(|j| j.exporter.is_some()) {
        // Export mode: every case waits for its answers in the batch file, so no report.
        finish(&out.problems, None, global);
        let windows = judge.model.context_size().is_some();
        let more =
            crate::locate_args::export_rounds_left(&opts.locate, &judge.usage.report(), windows);
        crate::llm_args::finish_export(judge, global.quiet, more);
        return Ok(exit_code(!out.problems.is_empty()));
    }
    finish(&out.problems, out.judge.as_ref(), global);
    let report = &out.run.report;
    if let Some(dir) = &a.out {
        maslens_eval::run::write_run(&out.run, dir)
            .with_context(|| format!("writing reports to {}", dir.display()))?;
    }
    if let Some(db) = &a.db {
        let id = crate::db::add_report(db, ReportKind::Eval, &a.cases.dataset, None, report)?;
        eprintln!("report stored in {db} as {id}");
    }
    if global.json {
        crate::outln!("{}", serde_json::to_string_pretty(report)?);
    } else {
        crate::outln!("{}", out.render_text(a.out.as_deref()));
    }
    if let Some(w) = out.stopped_early() {
        eprintln!("warning: {w}");
    }
    if let Some(w) = out.in_sample() {
        eprintln!("warning: {w}");
    }
    Ok(exit_code(out.has_problems()))
}

/// The warnings of a finished run, then the Judge's usage summary.
fn finish(problems: &[String], judge: Option<&maslens_llm::Stack>, global: &Global) {
    finish_problems(problems);
    if let Some(judge) = judge {
        crate::llm_args::finish(judge, global.quiet);
    }
}

/// The skipped records and failed cases of a finished run, as warnings.
fn finish_problems(problems: &[String]) {
    for p in problems {
        eprintln!("warning: {p}");
    }
}

fn exit_code(problems: bool) -> ExitCode {
    crate::ui::exit_code(usize::from(problems))
}

fn stack(a: StackArgs, global: &Global) -> anyhow::Result<ExitCode> {
    use maslens_core::stack::{eval_stack, EvalStackOptions, StackFitOptions};
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let opts = EvalStackOptions {
        dataset: a.dataset.clone(),
        subset: a.subset.clone(),
        locate: a.method.options(),
        model: a.llm.model()?,
        llm: a.llm.options()?,
        verdicts: a.verdicts.clone(),
        fit: StackFitOptions {
            repeat_seeds: a.repeat_seeds.clone(),
            ..StackFitOptions::nested(a.folds, a.inner_folds, a.seed, command)
        },
    };
    let bar = crate::progress::Bar::new("eval", global.quiet);
    let out = super::block_on(eval_stack(&opts, &bar))??;
    finish(&out.problems, out.judge.as_ref(), global);
    if let Some(path) = &a.report {
        let text = serde_json::to_string_pretty(&out.fit.report)? + "\n";
        crate::ui::write_atomic(path, text.as_bytes())?;
    }
    if let Some(path) = &a.out {
        out.fit.weights.save(path)?;
    }
    if let Some(path) = &a.save_verdicts {
        maslens_eval::run::write_atomic(path, out.verdicts_jsonl()?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if global.json {
        crate::outln!("{}", serde_json::to_string_pretty(&out.to_json())?);
    } else {
        crate::outln!("{}", out.render_text(a.out.as_deref())?);
    }
    Ok(exit_code(!out.problems.is_empty()))
}
