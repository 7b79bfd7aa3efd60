//! `maslens select`: best-of-N trace selection by IF risk, PRM, PRM+IF or at random, and the
//! weight-sensitivity study.

use crate::cmd::scan::{load_scans, write_output};
use crate::cmd::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use anyhow::Context;
use maslens_implicit::select::{
    best_of_n, normalize_scores, weight_sensitivity, Candidate, SelectConfig,
};
use maslens_implicit::Weights;
use maslens_trace::Outcome;
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt::Write as _;
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
    pub prm_range: Option<String>,
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
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

#[derive(Deserialize)]
struct PrmLine {
    id: String,
    #[serde(alias = "step_scores")]
    scores: Vec<f64>,
}

fn pct(a: &maslens_implicit::select::Accuracy) -> String {
    match a.accuracy {
        Some(v) => format!("{:.1} ({}/{})", v * 100.0, a.correct, a.tasks),
        None => "n/a".into(),
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let weights = match &args.weights {
        Some(p) => Weights::from_toml_file(p)?,
        None => Weights::default(),
    };
    if !(0.0..1.0).contains(&args.tune_fraction) {
        anyhow::bail!("--tune-fraction must be in [0, 1)");
    }
    let range = match &args.prm_range {
        None => None,
        Some(s) => {
            let (lo, hi) = s
                .split_once(',')
                .context("--prm-range must look like LO,HI")?;
            let lo: f64 = lo
                .trim()
                .parse()
                .context("--prm-range LO is not a number")?;
            let hi: f64 = hi
                .trim()
                .parse()
                .context("--prm-range HI is not a number")?;
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                anyhow::bail!("--prm-range needs finite LO < HI");
            }
            Some((lo, hi))
        }
    };
    let mut problems = 0usize;
    let mut prm: HashMap<String, Vec<f64>> = HashMap::new();
    if let Some(p) = &args.prm {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<PrmLine>(line) {
                Ok(l) if l.scores.iter().all(|x| x.is_finite()) => {
                    let s = match range {
                        Some((lo, hi)) => normalize_scores(&l.scores, lo, hi),
                        None => l.scores,
                    };
                    prm.insert(l.id, s);
                }
                Ok(l) => {
                    eprintln!(
                        "warning: {}: line {}: field scores: non-finite score for {}",
                        p.display(),
                        i + 1,
                        l.id
                    );
                    problems += 1;
                }
                Err(e) => {
                    eprintln!("warning: {}: line {}: {e}", p.display(), i + 1);
                    problems += 1;
                }
            }
        }
    }
    let scans = load_scans(&args.scan)?;
    let mut cands = Vec::new();
    for s in &scans {
        let success = match s.outcome {
            Outcome::Success => true,
            Outcome::Failure => false,
            Outcome::Unknown => {
                eprintln!(
                    "warning: trace {}: outcome unknown, left out of selection",
                    s.id
                );
                problems += 1;
                continue;
            }
        };
        cands.push(Candidate {
            id: s.id.clone(),
            task: s.task.clone(),
            success,
            steps: s.steps,
            events: s.weighted_events(),
            prm: prm.get(&s.id).cloned(),
        });
    }
    if args.prm.is_some() {
        let missing = cands.iter().filter(|c| c.prm.is_none()).count();
        if missing > 0 {
            eprintln!(
                "warning: {missing} candidate(s) have no PRM scores; PRM scorers are skipped"
            );
            problems += 1;
        }
    }
    let cfg = SelectConfig {
        ns: args.n.clone(),
        tune_fraction: args.tune_fraction,
        seed: args.seed,
        weights: weights.clone(),
        ..Default::default()
    };
    let sel = best_of_n(&cands, &cfg);
    let sens = (args.trials > 0)
        .then(|| weight_sensitivity(&cands, &weights, args.trials, args.spread, args.seed));
    let json = serde_json::json!({"selection": sel, "sensitivity": sens});
    let text = serde_json::to_string_pretty(&json)?;
    if let Some(p) = &args.out {
        write_output(Some(p), &text)?;
    }
    if global.json {
        write_output(None, &text)?;
    } else {
        let mut md = String::new();
        let _ = writeln!(md, "# Best-of-N selection\n");
        let _ = writeln!(
            md,
            "{} candidates over {} tasks; {:.0}/{:.0} tuning/test split of tasks (seed {}). Accuracy on the test split, % (k/n).\n",
            sel.candidates,
            sel.tasks,
            sel.tune_fraction * 100.0,
            (1.0 - sel.tune_fraction) * 100.0,
            sel.seed
        );
        let _ = writeln!(
            md,
            "| N | test tasks | random | random (expected) | PRM | IF | PRM+IF | oracle |"
        );
        let _ = writeln!(md, "|---:|---:|---|---:|---|---|---|---|");
        for r in &sel.results {
            let prm = r
                .prm
                .as_ref()
                .map(|a| {
                    format!(
                        "{} [{:?}]",
                        pct(a),
                        r.prm_pooling
                            .unwrap_or(maslens_implicit::select::Pooling::Mean)
                    )
                })
                .unwrap_or_else(|| "n/a".into());
            let prm_if = r
                .prm_if
                .as_ref()
                .map(|a| format!("{} [w={:.1}]", pct(a), r.prm_if_w.unwrap_or(0.0)))
                .unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.n,
                r.test_tasks,
                pct(&r.random),
                r.random_expected
                    .map(|v| format!("{:.1}", v * 100.0))
                    .unwrap_or_else(|| "n/a".into()),
                prm,
                pct(&r.if_scorer),
                prm_if,
                pct(&r.oracle)
            );
        }
        if let Some(s) = &sens {
            let f = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                md,
                "\nWeight sensitivity: {} trials, each weight perturbed independently by up to ±{:.0}%: global Spearman of candidate risks mean {}, min {}, 5th percentile {} ({} trials defined); mean within-task Spearman {}.",
                s.trials,
                s.spread * 100.0,
                f(s.global_mean),
                f(s.global_min),
                f(s.global_p05),
                s.defined,
                f(s.within_task_mean)
            );
        }
        write_output(None, &md)?;
    }
    Ok(ExitCode::from(if problems == 0 {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}
