//! `maslens optimize`: credit-guided prompt optimization of a multi-role debate (verbalized block
//! coordinate descent), compared with the unoptimized prompts and a black-box baseline at the
//! same LLM call budget, on a held-out split. Writes JSON, Markdown and HTML reports and the
//! held-out runs as maslens traces.

use crate::cmd::{block_on, EXIT_OK};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::{bail, Context};
use maslens_credit::config::{Blocks, DebateConfig, RoleSelection};
use maslens_credit::data::{load_spec, split, Mcq};
use maslens_credit::debate::{to_trace, ModelSet};
use maslens_credit::experiment::{run_experiment, Experiment, ExperimentOptions};
use maslens_credit::report;
use maslens_credit::simulation::{self, SimulatedMas};
use std::io::Write;
use std::path::{Path, PathBuf};
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
    /// Dataset: `mmlu:PATH` (CSV file or folder), `aqua:PATH`, `jsonl:PATH`; overrides [data].
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

fn apply_overrides(cfg: &mut DebateConfig, a: &Args) -> anyhow::Result<()> {
    let o = &mut cfg.optimizer;
    if let Some(k) = a.iterations {
        o.iterations = k;
    }
    if let Some(b) = a.blocks {
        o.blocks = match b {
            BlocksArg::Both => Blocks::Both,
            BlocksArg::RolesOnly => Blocks::RolesOnly,
            BlocksArg::AggregatorsOnly => Blocks::AggregatorsOnly,
        };
    }
    if let Some(k) = a.bottom_k {
        o.role_selection = RoleSelection::BottomK { k };
    }
    if let Some(l) = a.lambda {
        if !(0.0..=1.0).contains(&l) {
            bail!("--lambda must be in [0, 1]");
        }
        o.lambda = l;
    }
    if let Some(t) = a.tau {
        o.tau = t;
    }
    if let Some(m) = a.buffer_m {
        o.buffer_m = m;
    }
    if a.optimizer_calls.is_some() {
        o.max_calls = a.optimizer_calls;
    }
    if a.optimizer_tokens.is_some() {
        o.max_tokens = a.optimizer_tokens;
    }
    Ok(())
}

fn resolve_dataset(spec: &str, config_dir: Option<&Path>) -> String {
    let (kind, path) = match spec.split_once(':') {
        Some((k, p)) if ["mmlu", "aqua", "jsonl"].contains(&k) => (Some(k), p),
        _ => (None, spec),
    };
    let p = Path::new(path);
    let resolved = match config_dir {
        Some(d) if p.is_relative() && !p.exists() => d.join(p).display().to_string(),
        _ => path.to_string(),
    };
    match kind {
        Some(k) => format!("{k}:{resolved}"),
        None => resolved,
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    // Configuration.
    let mut cfg = match (&args.config, args.simulation) {
        (Some(p), _) => DebateConfig::from_path(p)?,
        (None, true) => simulation::config(2, 0, 0)?,
        (None, false) => bail!("a debate configuration file is required (or --simulation)"),
    };
    apply_overrides(&mut cfg, &args)?;
    // Questions and split.
    let data = cfg.data.clone();
    let split_seed = args
        .split_seed
        .or(data.as_ref().map(|d| d.split_seed))
        .unwrap_or(0);
    let opt_size = args
        .opt_size
        .or(data.as_ref().map(|d| d.optimization_size))
        .unwrap_or(100);
    let test_size = args.test_size.or(data.as_ref().and_then(|d| d.test_size));
    let (questions, dataset): (Vec<Mcq>, String) = if args.simulation && args.dataset.is_none() {
        (
            simulation::questions(args.sim_questions, split_seed),
            format!("simulation ({} synthetic questions)", args.sim_questions),
        )
    } else {
        let spec = args
            .dataset
            .clone()
            .or(data.as_ref().map(|d| d.dataset.clone()))
            .context("no dataset: pass --dataset or set [data] dataset in the configuration")?;
        let spec = resolve_dataset(&spec, args.config.as_ref().and_then(|p| p.parent()));
        let loaded = load_spec(&spec)?;
        for p in &loaded.problems {
            eprintln!("warning: skipped {p}");
        }
        (loaded.items, spec)
    };
    let sp = split(&questions, opt_size, test_size, split_seed);
    if sp.optimization.is_empty() || sp.test.is_empty() {
        bail!(
            "{} questions cannot make {} optimization and a non-empty test set",
            questions.len(),
            opt_size
        );
    }
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
    let x: Experiment = block_on(async {
        let models = if args.simulation {
            ModelSet::single(Arc::new(SimulatedMas::new(&questions)))
        } else {
            let default = args.llm.build().await?.model;
            let mut set = ModelSet::single(default);
            for spec in cfg.model_specs() {
                let mut a = args.llm.clone();
                a.model = spec.clone();
                let m = a
                    .build()
                    .await
                    .with_context(|| format!("building model {spec}"))?
                    .model;
                set = set.with(spec, m);
            }
            set
        };
        anyhow::Ok(
            run_experiment(
                &models,
                cfg.clone(),
                &sp.optimization,
                &sp.test,
                &dataset,
                options,
            )
            .await?,
        )
    })??;
    // Outputs.
    let md = report::markdown(&x);
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir.join("traces"))
            .with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&x)?)?;
        std::fs::write(dir.join("report.md"), &md)?;
        std::fs::write(dir.join("report.html"), report::html(&x))?;
        let prompts: Vec<serde_json::Value> = x
            .seeds
            .iter()
            .map(|s| serde_json::json!({"seed": s.seed, "initial": cfg.prompts(), "optimized": s.bcd.best, "black_box": s.blackbox.as_ref().map(|b| &b.best)}))
            .collect();
        std::fs::write(
            dir.join("prompts.json"),
            serde_json::to_string_pretty(&prompts)?,
        )?;
        for s in &x.seeds {
            for (name, runs) in &s.test_runs {
                let path = dir
                    .join("traces")
                    .join(format!("{name}-seed{}.jsonl", s.seed));
                let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
                let p = if name == "ours" {
                    s.bcd.best.clone()
                } else {
                    cfg.prompts()
                };
                for r in runs {
                    let tr = to_trace(r, &cfg, &p, &format!("{}/{name}/seed{}", cfg.name, s.seed));
                    writeln!(f, "{}", serde_json::to_string(&tr)?)?;
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if global.json {
        let summary = serde_json::json!({
            "name": x.name, "model": x.model, "dataset": x.dataset,
            "n_optimization": x.n_optimization, "n_test": x.n_test, "summary": x.summary,
            "out": args.out.as_ref().map(|p| p.display().to_string()),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        writeln!(out, "{md}")?;
    }
    Ok(ExitCode::from(EXIT_OK))
}
