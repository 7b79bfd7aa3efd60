//! `maslens process-stats BASE [NEW]`: MASIF's process metrics of scanned traces (tables 6 and
//! 9: accuracy, IF cost and count per task and per 1K trace tokens), and with a second scan the
//! comparison paired by task with Holm-adjusted two-sided paired permutation tests
//! (`maslens_implicit::process`).

use crate::ui::{emit, exit_code, warn_all};
use crate::Global;
use maslens_implicit::process::{compare, comparison_markdown, metrics, metrics_markdown};
use maslens_implicit::TraceScan;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scan of the base run (`scan --out` file, or JSONL of trace scans), e.g. GRPO's traces.
    pub base: PathBuf,
    /// Scan of the run to compare with the base, on the same tasks (e.g. IF-GRPO's traces).
    pub new: Option<PathBuf>,
    /// Permutations of each test: all 2^tasks swaps when there are at most this many, else this
    /// many seeded random swaps.
    #[arg(long, default_value_t = 10_000)]
    pub permutations: usize,
    /// Seed of the random swaps.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the JSON result here.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Stop with exit code 2 at the first bad JSONL line instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

/// The scans of one input; bad JSONL lines are skipped with a warning unless `strict`.
fn read(path: &Path, strict: bool, problems: &mut usize) -> anyhow::Result<Vec<TraceScan>> {
    if strict {
        return Ok(maslens_implicit::read_trace_scans(path)?);
    }
    let (scans, bad) = maslens_implicit::read_trace_scans_skipping(path)?;
    *problems += warn_all(&bad);
    Ok(scans)
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let mut problems = 0;
    let base = read(&args.base, args.strict, &mut problems)?;
    let (json, human) = match &args.new {
        None => {
            let m = metrics(&base);
            (
                serde_json::to_string_pretty(&m)?,
                format!(
                    "# Process metrics (MASIF table 9): {}\n\n{}",
                    args.base.display(),
                    metrics_markdown(&m)
                ),
            )
        }
        Some(new) => {
            let new = read(new, args.strict, &mut problems)?;
            let c = compare(&base, &new, args.permutations, args.seed);
            if c.tasks == 0 {
                anyhow::bail!(
                    "no task is in both scans ({} and the second): the comparison pairs traces by task text",
                    args.base.display()
                );
            }
            if c.base_only_tasks + c.new_only_tasks > 0 && !global.quiet {
                eprintln!(
                    "warning: {} base-only and {} new-only tasks left out (traces are paired by task)",
                    c.base_only_tasks, c.new_only_tasks
                );
            }
            (serde_json::to_string_pretty(&c)?, comparison_markdown(&c))
        }
    };
    emit(args.out.as_deref(), &json, global.json, || human)?;
    Ok(exit_code(problems))
}
