//! `maslens select`: best-of-N trace selection by IF risk, PRM, PRM+IF or at random, and the
//! weight-sensitivity study.

use crate::ui::{emit, exit_code, warn_all};
use crate::Global;
use maslens_core::implicit::{read_prm_scores, select_from_scans, PrmRange, SelectOptions};
use maslens_implicit::settings::weights_or_default;
use maslens_implicit::{read_trace_scans, read_trace_scans_skipping};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scan result of the candidate traces (`maslens scan --out FILE`).
    #[arg(long)]
    pub scan: PathBuf,
    /// Step scores of an external process reward model: JSONL lines `{"id": TRACE_ID, "scores": [..]}`.
    #[arg(long)]
    pub prm: Option<PathBuf>,
    /// Raw range of the PRM scores, normalized to [0, 1] before pooling (e.g. `-4,4` for PRInTS).
    #[arg(long, value_name = "LO,HI", allow_hyphen_values = true)]
    pub prm_range: Option<PrmRange>,
    /// Candidate counts N.
    #[arg(long, value_delimiter = ',', default_value = "4,8,16")]
    pub n: Vec<usize>,
    /// Share of tasks used to tune pooling and w.
    #[arg(long, default_value_t = 0.2)]
    pub tune_fraction: f64,
    /// Seed of the split, the candidate subsets and the random scorer.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Severity weights override (TOML).
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Weight-sensitivity trials (0 to skip).
    #[arg(long, default_value_t = 1000)]
    pub trials: usize,
    /// Largest relative perturbation of each weight in the sensitivity study.
    #[arg(long, default_value_t = 0.1)]
    pub spread: f64,
    /// Write the JSON result here.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Stop at the first bad line of the scan or PRM file instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let opts = SelectOptions {
        ns: args.n.clone(),
        tune_fraction: args.tune_fraction,
        seed: args.seed,
        weights: weights_or_default(args.weights.as_deref())?,
        trials: args.trials,
        spread: args.spread,
    };
    let prm = args
        .prm
        .as_deref()
        .map(|p| read_prm_scores(p, args.prm_range));
    let prm = prm.transpose()?;
    let mut problems = prm.as_ref().map_or(0, |p| warn_all(&p.warnings));
    if let (true, Some(first)) = (args.strict, prm.as_ref().and_then(|p| p.warnings.first())) {
        anyhow::bail!("{first} (--strict)");
    }
    let scans = if args.strict {
        read_trace_scans(&args.scan)?
    } else {
        let (scans, bad) = read_trace_scans_skipping(&args.scan)?;
        problems += warn_all(&bad);
        scans
    };
    let sel = select_from_scans(&scans, prm.as_ref().map(|p| &p.value), &opts)?;
    problems += warn_all(&sel.warnings);
    if !global.quiet {
        sel.value
            .notes()
            .iter()
            .for_each(|n| eprintln!("note: {n}"));
    }
    let json = sel.value.to_json();
    emit(args.out.as_deref(), &json, global.json, || {
        sel.value.markdown()
    })?;
    Ok(exit_code(problems))
}
