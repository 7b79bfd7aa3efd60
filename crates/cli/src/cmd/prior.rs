//! `maslens prior`: the learned localizer without an LLM (train, eval, rank).

use crate::cmd::{EXIT_OK, EXIT_PROBLEMS};
use crate::Global;
use anyhow::Context;
use maslens_prior::eval::{
    baseline_reports, cross_validate, leave_group_out, model_prediction, report, EvalConfig,
    MethodReport, Prediction,
};
use maslens_prior::{AgentAggregation, Objective, PairRule, PriorModel, TrainConfig};
use maslens_trace::import::{read_paths, Format};
use maslens_trace::Trace;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Cross-validate on labelled traces, then train on all of them and write the model.
    Train(TrainArgs),
    /// Evaluate a model (default: the shipped one) on labelled traces, next to the baselines.
    Eval(EvalArgs),
    /// Ranked (agent, step) candidates for each trace.
    Rank(RankArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Input format (default: detected per file).
    #[arg(long, default_value = "auto")]
    pub format: Format,
    /// Seed for fold split, bootstrap and the random baseline.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Bootstrap resamples for the 95% intervals.
    #[arg(long, default_value_t = 2000)]
    pub bootstrap: usize,
}

#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Files or directories of labelled traces (any supported format).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the trained model.
    #[arg(long, default_value = "prior-model.json")]
    pub out: PathBuf,
    /// Cross-validation folds (0: skip cross-validation).
    #[arg(long, default_value_t = 10)]
    pub folds: usize,
    /// L2 penalty of the step head.
    #[arg(long, default_value_t = TrainConfig::default().alpha)]
    pub alpha: f64,
    /// L2 penalty of the agent head (default: the built-in default, else `--alpha`).
    #[arg(long)]
    pub agent_alpha: Option<f64>,
    /// Objective of the step head: `pointwise` (logistic regression over steps) or `listwise`
    /// (conditional logit: a softmax over each trace's steps).
    #[arg(long, default_value = "pointwise", value_parser = ["pointwise", "listwise"])]
    pub objective: String,
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
    /// Files or directories of labelled traces.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Model file (default: the shipped model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct RankArgs {
    /// A trace file or a directory of traces.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Model file (default: the shipped model).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Candidates shown per trace.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Input format (default: detected per file).
    #[arg(long, default_value = "auto")]
    pub format: Format,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    match args.command {
        Sub::Train(a) => train(a, global),
        Sub::Eval(a) => eval(a, global),
        Sub::Rank(a) => rank(a, global),
    }
}

/// Read every trace; unreadable records are reported on stderr and counted.
fn load(inputs: &[PathBuf], format: Format) -> (Vec<Trace>, usize) {
    let mut traces = Vec::new();
    let mut skipped = 0;
    for item in read_paths(inputs, format) {
        match item {
            Ok(imported) => traces.push(imported.trace),
            Err(e) => {
                eprintln!("warning: skipped: {e}");
                skipped += 1;
            }
        }
    }
    (traces, skipped)
}

fn load_model(path: Option<&PathBuf>) -> anyhow::Result<PriorModel> {
    Ok(match path {
        Some(p) => PriorModel::load(p)?,
        None => maslens_prior::load_default()?,
    })
}

/// One evaluation protocol's results.
#[derive(Debug, Serialize)]
struct Protocol {
    protocol: String,
    description: String,
    methods: Vec<MethodReport>,
}

#[derive(Debug, Serialize)]
struct EvalOutput {
    traces: usize,
    labelled: usize,
    skipped: usize,
    seed: u64,
    bootstrap: usize,
    protocols: Vec<Protocol>,
}

fn pct(x: f64) -> String {
    format!("{:5.1}", 100.0 * x)
}

fn render(out: &EvalOutput) -> String {
    let mut s = format!(
        "{} traces ({} labelled, {} skipped); 95% bootstrap intervals, {} resamples, seed {}\n",
        out.traces, out.labelled, out.skipped, out.bootstrap, out.seed
    );
    for p in &out.protocols {
        s.push_str(&format!("\n## {}: {}\n", p.protocol, p.description));
        s.push_str(&format!(
            "{:30} {:22} {:>26} {:>26} {}\n",
            "method", "group", "agent % [95% CI] (k/n)", "step % [95% CI] (k/n)", "step within +-k"
        ));
        for m in &p.methods {
            for (g, r) in &m.groups {
                let cell = |x: &maslens_prior::Accuracy| {
                    format!(
                        "{} [{},{}] ({}/{})",
                        pct(x.value),
                        pct(x.ci95[0]).trim(),
                        pct(x.ci95[1]).trim(),
                        x.k,
                        x.n
                    )
                };
                let mut tol: Vec<String> = r
                    .tolerance
                    .iter()
                    .map(|t| format!("+-{}: {}", t.within, pct(t.metric.value).trim()))
                    .collect();
                tol.push(format!("pair: {}", pct(r.pair.value).trim()));
                s.push_str(&format!(
                    "{:30} {:22} {:>26} {:>26} {}\n",
                    m.method,
                    g,
                    cell(&r.agent),
                    cell(&r.step),
                    tol.join("  ")
                ));
            }
        }
    }
    s
}

fn eval_config(c: &Common) -> EvalConfig {
    EvalConfig {
        bootstrap: c.bootstrap,
        seed: c.seed,
        ..EvalConfig::default()
    }
}

fn train(args: TrainArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let (traces, skipped) = load(&args.inputs, args.common.format);
    let refs: Vec<&Trace> = traces.iter().collect();
    let labelled = refs.iter().filter(|t| t.labels.decisive.is_some()).count();
    if labelled == 0 {
        anyhow::bail!(
            "no trace with a decisive label (labels.decisive) among {} traces read",
            traces.len()
        );
    }
    let defaults = TrainConfig::default();
    let cfg = TrainConfig {
        alpha: args.alpha,
        agent_alpha: args.agent_alpha.or(defaults.agent_alpha),
        objective: if args.objective == "listwise" {
            Objective::Listwise
        } else {
            Objective::Pointwise
        },
        pair_rule: if args.pair_rule == "agent-first" {
            PairRule::AgentFirst
        } else {
            PairRule::Independent
        },
        seed: args.common.seed,
        agent_head: !args.no_agent_head,
        agent_aggregation: AgentAggregation::Sum,
        ..defaults
    };
    let ecfg = eval_config(&args.common);
    let mut protocols = Vec::new();
    if args.folds >= 2 {
        let mut methods = baseline_reports(&refs, &ecfg);
        let started = Instant::now();
        let cv = cross_validate(&refs, args.folds, &cfg)?;
        methods.push(report(
            &format!("prior/cv{}-pooled", args.folds),
            &refs,
            &cv,
            &ecfg,
        ));
        // The same K-fold protocol inside each group alone (e.g. each Who&When subset).
        let mut groups: std::collections::BTreeMap<String, Vec<&Trace>> = Default::default();
        for t in refs.iter().filter(|t| t.labels.decisive.is_some()) {
            groups
                .entry(maslens_prior::eval::group_of(t))
                .or_default()
                .push(t);
        }
        if groups.len() > 1 {
            let mut within: Vec<Prediction> = Vec::new();
            for ts in groups.values() {
                match cross_validate(ts, args.folds, &cfg) {
                    Ok(p) => within.extend(p),
                    Err(e) => eprintln!("warning: within-group cross-validation: {e}"),
                }
            }
            methods.push(report(
                &format!("prior/cv{}-within-group", args.folds),
                &refs,
                &within,
                &ecfg,
            ));
            let lgo = leave_group_out(&refs, &cfg)?;
            methods.push(report("prior/leave-group-out", &refs, &lgo, &ecfg));
        }
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "cross-validation done"
        );
        protocols.push(Protocol {
            protocol: format!("cv{}", args.folds),
            description: format!(
                "out-of-fold predictions; {}-fold split by FNV-1a(seed, trace id), seed {}; \
                 pooled = one model per fold trained on every group, within-group = folds inside \
                 each group alone, leave-group-out = trained on the other groups only",
                args.folds, args.common.seed
            ),
            methods,
        });
    }
    if let Some(path) = &args.oof_probs {
        let n = write_oof_probs(&refs, args.folds.max(2), &cfg, path)?;
        eprintln!(
            "out-of-fold step distributions of {n} traces written to {}",
            path.display()
        );
    }
    let mut model = PriorModel::train(&refs, &cfg)?;
    let fit: Vec<Prediction> = refs.iter().map(|t| model_prediction(&model, t)).collect();
    protocols.push(Protocol {
        protocol: "training-fit".into(),
        description: "the final model on its own training traces (optimistic; for reference only)"
            .into(),
        methods: vec![report("prior/training-fit", &refs, &fit, &ecfg)],
    });
    let out = EvalOutput {
        traces: traces.len(),
        labelled,
        skipped,
        seed: args.common.seed,
        bootstrap: args.common.bootstrap,
        protocols,
    };
    let inputs: Vec<String> = args
        .inputs
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    model.training.note = Some(format!(
        "maslens prior train {} --folds {} --alpha {} --agent-alpha {} --objective {} --pair-rule {} --seed {}{}",
        inputs.join(" "),
        args.folds,
        args.alpha,
        cfg.agent_alpha.unwrap_or(args.alpha),
        args.objective,
        args.pair_rule,
        args.common.seed,
        if args.no_agent_head {
            " --no-agent-head"
        } else {
            ""
        }
    ));
    model
        .save(&args.out)
        .with_context(|| format!("writing the model to {}", args.out.display()))?;
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&out)? + "\n")
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    if global.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&out));
        println!("\nmodel written to {}", args.out.display());
    }
    Ok(ExitCode::from(if skipped > 0 {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }))
}

/// Out-of-fold step distributions (same folds and training sets as the pooled
/// cross-validation) as `{"trace", "probs"}` lines; returns how many traces were written.
fn write_oof_probs(
    traces: &[&Trace],
    k: usize,
    cfg: &TrainConfig,
    path: &std::path::Path,
) -> anyhow::Result<usize> {
    use std::io::Write;
    let lines = maslens_prior::eval::out_of_fold(traces, k, cfg, |model, t| {
        serde_json::json!({"trace": t.id, "probs": model.step_distribution(t)}).to_string()
    })?;
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    for l in &lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    Ok(lines.len())
}

fn eval(args: EvalArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let model = load_model(args.model.as_ref())?;
    let (traces, skipped) = load(&args.inputs, args.common.format);
    let refs: Vec<&Trace> = traces.iter().collect();
    let labelled = refs
        .iter()
        .filter(|t| maslens_prior::eval::is_labelled(t))
        .count();
    if labelled == 0 {
        anyhow::bail!(
            "no labelled trace (labels.decisive or labels.faulty_agents) among {} traces read",
            traces.len()
        );
    }
    let ecfg = eval_config(&args.common);
    let mut methods = baseline_reports(&refs, &ecfg);
    let preds: Vec<Prediction> = refs.iter().map(|t| model_prediction(&model, t)).collect();
    methods.push(report("prior", &refs, &preds, &ecfg));
    let out = EvalOutput {
        traces: traces.len(),
        labelled,
        skipped,
        seed: args.common.seed,
        bootstrap: args.common.bootstrap,
        protocols: vec![Protocol {
            protocol: "fixed-model".into(),
            description: format!(
                "model {} applied to every labelled trace (only meaningful on traces it was not trained on)",
                args.model
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "built-in whowhen-v1".into())
            ),
            methods,
        }],
    };
    if global.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&out));
    }
    Ok(ExitCode::from(if skipped > 0 {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }))
}

#[derive(Debug, Serialize)]
struct Ranked {
    trace: String,
    steps: usize,
    agents: Vec<AgentProb>,
    candidates: Vec<maslens_prior::Candidate>,
}

#[derive(Debug, Serialize)]
struct AgentProb {
    agent: String,
    prob: f64,
}

fn rank(args: RankArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let model = load_model(args.model.as_ref())?;
    let (traces, skipped) = load(&args.inputs, args.format);
    for t in &traces {
        let mut candidates = model.rank(t);
        candidates.truncate(args.top);
        let agents = model
            .agent_distribution(t)
            .into_iter()
            .map(|(agent, prob)| AgentProb { agent, prob })
            .collect();
        let r = Ranked {
            trace: t.id.clone(),
            steps: t.steps.len(),
            agents,
            candidates,
        };
        if global.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!("{} ({} steps)", r.trace, r.steps);
            let agents: Vec<String> = r
                .agents
                .iter()
                .take(3)
                .map(|a| format!("{} {:.2}", a.agent, a.prob))
                .collect();
            println!("  agents: {}", agents.join(", "));
            for c in &r.candidates {
                println!(
                    "  step {:>4}  {:30} p={:.3}  score={:+.2}",
                    c.step, c.agent, c.prob, c.score
                );
            }
        }
    }
    if traces.is_empty() && skipped == 0 {
        anyhow::bail!("no traces found in the inputs");
    }
    Ok(ExitCode::from(if skipped > 0 {
        EXIT_PROBLEMS
    } else {
        EXIT_OK
    }))
}
