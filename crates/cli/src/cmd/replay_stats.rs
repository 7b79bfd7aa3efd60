//! `maslens replay-stats`: SPR, RR and delta-RR per configuration from matched no-op and fix
//! replay outcomes, with paired task-cluster bootstrap 95% intervals.

use crate::ui::{emit, exit_code, warn_all};
use crate::Global;
use maslens_core::implicit::{replay_stats_from_jsonl, ReplayStatsOptions};
use maslens_implicit::replay::markdown;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSONL of replay outcomes (`-` or absent: stdin): `{"config","task","trace","if_step",
    /// "original_success","intervention":"noop"|"fix","success"}`.
    pub input: Option<PathBuf>,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = maslens_eval::stats::DEFAULT_RESAMPLES)]
    pub resamples: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the JSON result here.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Stop with exit code 2 at the first bad line instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let opts = ReplayStatsOptions {
        resamples: args.resamples,
        seed: args.seed,
    };
    let (name, reader) = crate::ui::jsonl_input(args.input.as_deref())?;
    let stats = replay_stats_from_jsonl(&name, reader, &opts)?;
    if let (true, Some(first)) = (args.strict, stats.warnings.first()) {
        anyhow::bail!("{first} (--strict)");
    }
    let problems = warn_all(&stats.warnings);
    let json = serde_json::to_string_pretty(&stats.value)?;
    emit(args.out.as_deref(), &json, global.json, || {
        markdown(&stats.value)
    })?;
    Ok(exit_code(problems))
}
