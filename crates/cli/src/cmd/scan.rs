//! `maslens scan`: implicit failures (MASIF) over traces: detection, absorption, risk, and a
//! corpus report (prevalence and intensity by outcome, types, absorption). A trace whose text
//! tried to steer the detector is named on stderr (`steering: ...`) and makes the run exit 1.

use crate::cmd::{block_on, EXIT_ERROR};
use crate::inputs::{read_all, Inputs};
use crate::llm_args::LlmArgs;
use crate::ui::{exit_code, write_output};
use crate::Global;
use anyhow::Context;
use maslens_core::scan::scan_traces;
use maslens_implicit::settings::{weights_or_default, Counting};
use maslens_implicit::{report::markdown, ScanOptions, ScanSettings};
use maslens_llm::ChatModel;
use std::path::PathBuf;
use std::process::ExitCode;

/// `--counting`: what counts as an IF.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountingArg {
    /// Events whose evidence is not in the trace are flagged, not counted; `--max-events` per window.
    Maslens,
    /// As the paper counts: every detected event (implies --count-unsupported; at least 100 per window).
    Paper,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Write the scan file (report and per-trace scans, JSON; see docs/implicit.md) here;
    /// `select` and `repair` read it with `--scan`.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Write the Markdown report to this file (default: stdout unless --json).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Severity weights override (TOML with [type] and [absorption] tables).
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Further judge models for multi-judge mode (repeat the flag); `--model` is the first judge
    /// and also classifies absorption.
    #[arg(long = "judge", value_name = "SPEC")]
    pub judges: Vec<String>,
    /// Keep events reported by at least this many judges (multi-judge mode; default: majority).
    #[arg(long)]
    pub min_judges: Option<usize>,
    /// Skip absorption classification (IFs are then weighted as unknown absorption).
    #[arg(long)]
    pub no_absorption: bool,
    /// Count IFs whose evidence was not found in the trace (default: flagged, not counted).
    #[arg(long)]
    pub count_unsupported: bool,
    /// What counts as an IF: `maslens` (the evidence check decides) or `paper` (every detected
    /// event, as MASIF counts); the report says which ran and how many events the check doubted.
    #[arg(long, value_enum, default_value_t = CountingArg::Maslens)]
    pub counting: CountingArg,
    /// Scan at most this many traces.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Context window to plan windows for (default: the model's own).
    #[arg(long)]
    pub window_tokens: Option<usize>,
    /// Steps repeated between consecutive windows of a long trace.
    #[arg(long, default_value_t = 2)]
    pub overlap: usize,
    /// Completion token limit of the detector.
    #[arg(long, default_value_t = 1024)]
    pub detect_max_tokens: u32,
    /// Most IFs the detector may report per window.
    #[arg(long, default_value_t = 10)]
    pub max_events: usize,
    /// Completion token limit of the absorption classifier.
    #[arg(long, default_value_t = 256)]
    pub absorb_max_tokens: u32,
    /// Seed of the bootstrap intervals in the report.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let opts = ScanOptions {
        weights: weights_or_default(args.weights.as_deref())?,
        settings: ScanSettings {
            classify_absorption: !args.no_absorption,
            count_unsupported: args.count_unsupported,
            counting: match args.counting {
                CountingArg::Maslens => Counting::Maslens,
                CountingArg::Paper => Counting::Paper,
            },
            min_judges: args.min_judges,
            window_tokens: args.window_tokens,
            overlap_steps: args.overlap,
            detect_max_tokens: args.detect_max_tokens,
            max_events: args.max_events,
            absorb_max_tokens: args.absorb_max_tokens,
            seed: args.seed,
        },
    };
    let (traces, read_errors) = read_all(&args.input, global, "reading traces", args.limit)?;
    if traces.is_empty() {
        anyhow::bail!("{}", args.input.nothing_read(read_errors.len()));
    }
    let quiet = global.quiet;
    let bar = crate::progress::Bar::new("scan", quiet);
    let mut exporting = false;
    let mut file = block_on(async {
        let mut stacks = vec![args.llm.build().await?];
        for spec in &args.judges {
            let llm = LlmArgs {
                model: Some(spec.clone()),
                ..args.llm.clone()
            };
            stacks.push(
                llm.build()
                    .await
                    .with_context(|| format!("judge model {spec}"))?,
            );
        }
        let models: Vec<&dyn ChatModel> = stacks.iter().map(|s| s.model.as_ref()).collect();
        let started = std::time::Instant::now();
        let file = scan_traces(&models, &traces, &opts, &bar).await?;
        // `--db`: each trace's scan is stored as a diagnosis with its events.
        if let Some(db) = &args.input.db {
            let model = stacks[0].model.id();
            crate::db::add_scans(db, &file.traces, &traces, model, &opts.settings, started).await?;
        }
        for s in &stacks {
            crate::llm_args::finish(s, quiet);
        }
        exporting = stacks.iter().any(|s| s.exporter.is_some());
        anyhow::Ok(file)
    })??;
    file.errors.splice(0..0, read_errors);
    if exporting {
        // Every deferred trace waits for its answers: no report until the rerun.
        return Ok(exit_code(file.errors.len() - bar.deferred_cases()));
    }
    // Traces that tried to steer the detector: named on stderr, and the run exits 1.
    let steered = file
        .traces
        .iter()
        .filter(|s| !s.steering.is_empty())
        .count();
    if !global.quiet {
        for s in file.traces.iter().filter(|s| !s.steering.is_empty()) {
            for h in &s.steering {
                eprintln!(
                    "steering: {}: {}",
                    crate::term::inline(&s.id),
                    crate::term::inline(&h.describe())
                );
            }
        }
    }
    let md = markdown(&file.report, &file.traces);
    if let Some(p) = &args.out {
        file.write(p)?;
    }
    if let Some(p) = &args.markdown {
        write_output(Some(p), &md)?;
    }
    // Stdout may be a terminal: trace text quoted in the report (evidence, descriptions) is
    // shown with its control characters escaped.
    if global.json {
        write_output(None, &crate::term::json(&file.to_json()))?;
    } else if args.markdown.is_none() {
        write_output(None, &crate::term::text(&md))?;
    }
    // Nothing scanned is "could not run" (2), unless a budget stopped it: a budget stop is 1,
    // like every other early stop, and a rerun resumes from the cache.
    if file.traces.is_empty() && !bar.was_stopped() {
        return Ok(ExitCode::from(EXIT_ERROR));
    }
    Ok(exit_code(
        file.errors.len() + steered + usize::from(bar.was_stopped()),
    ))
}
