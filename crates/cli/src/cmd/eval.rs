//! `maslens eval locate whowhen:DIR | aegis:FILE`: benchmark a failure localizer with exact
//! metrics, bootstrap intervals and trivial baselines on the same cases.

use super::locate::{
    config, progress, read_traces, wants_error_modes, MethodArgs, Models, PriorSource,
};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use maslens_eval::metrics::{split_ids, Case, CaseUsage, Gold, Prediction, Scorer};
use maslens_eval::report::{build, LocateReport, ReportOptions, SplitInfo};
use maslens_locate::refine::{chat_example, openai_command, trl_command, RefinementInstance};
use maslens_locate::{baselines, LocateVerdict, Variant};
use maslens_trace::{Format, Trace};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum EvalCommand {
    /// Failure localization on Who&When (`whowhen:DIR`) or Aegis-Bench (`aegis:FILE`).
    Locate(LocateArgs),
}

#[derive(clap::Args, Debug)]
pub struct LocateArgs {
    /// `whowhen:DIR`, `aegis:FILE`, or a path (format auto-detected).
    pub dataset: String,
    #[command(flatten)]
    pub method: MethodArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Score with the Who&When reference scorer (substring matching; unparsed = wrong) instead of exact.
    #[arg(long)]
    pub compat_substring: bool,
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
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Evaluate only the first N cases (by id) of the evaluated side.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Only cases whose id starts with this (e.g. `Hand-Crafted/`).
    #[arg(long)]
    pub subset: Option<String>,
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
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    match args.command {
        EvalCommand::Locate(a) => run_locate(a, global),
    }
}

/// A trace with its gold labels.
type Labelled = (Trace, Gold);

fn parse_dataset(spec: &str) -> (PathBuf, Format) {
    if let Some(p) = spec.strip_prefix("whowhen:") {
        (PathBuf::from(p), Format::WhoWhen)
    } else if let Some(p) = spec.strip_prefix("aegis:") {
        (PathBuf::from(p), Format::Aegis)
    } else {
        (PathBuf::from(spec), Format::Auto)
    }
}

fn gold_of(t: &Trace) -> Option<Gold> {
    if let Some(d) = &t.labels.decisive {
        return Some(Gold {
            agent: Some(d.agent.clone()),
            step: Some(d.step),
            faulty: Vec::new(),
        });
    }
    if !t.labels.faulty_agents.is_empty() {
        let faulty = t
            .labels
            .faulty_agents
            .iter()
            .map(|f| (f.agent.clone(), f.error_mode.clone()))
            .collect();
        return Some(Gold {
            agent: None,
            step: None,
            faulty,
        });
    }
    None
}

fn subset_of(t: &Trace) -> Option<String> {
    if t.source.format == "aegis" {
        return t
            .metadata
            .get("framework")
            .and_then(|v| v.as_str())
            .map(String::from)
            .or_else(|| Some("aegis".into()));
    }
    t.id.split_once('/').map(|(s, _)| s.to_string())
}

fn trace_tokens(t: &Trace) -> usize {
    let (text, _) = maslens_locate::render::render_steps(t, 0..t.steps.len(), None);
    maslens_llm::estimate_tokens(&text)
}

fn case(t: &Trace, gold: &Gold, pred: Prediction, usage: CaseUsage) -> Case {
    Case {
        id: t.id.clone(),
        subset: subset_of(t),
        gold: gold.clone(),
        pred,
        trace_tokens: trace_tokens(t),
        usage,
    }
}

fn guess_pred(g: Option<baselines::Guess>) -> Prediction {
    match g {
        Some(g) => Prediction {
            agent: Some(g.agent),
            step: Some(g.step),
            ..Default::default()
        },
        None => Prediction {
            abstained: true,
            ..Default::default()
        },
    }
}

fn verdict_pred(v: &LocateVerdict) -> Prediction {
    Prediction {
        agent: v.agent.clone(),
        step: v.step,
        error_mode: v.error_mode.clone(),
        abstained: v.step.is_none(),
        parse_failures: v.usage.abstentions,
    }
}

#[derive(serde::Deserialize)]
struct ExternalPrediction {
    trace: String,
    agent: Option<String>,
    step: Option<serde_json::Value>,
    #[serde(default)]
    error_mode: Option<String>,
}

fn load_predictions(path: &Path) -> anyhow::Result<HashMap<String, Prediction>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut map = HashMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let p: ExternalPrediction = serde_json::from_str(line).with_context(|| {
            format!(
                "{}: line {}: expected {{\"trace\", \"agent\", \"step\"}}",
                path.display(),
                i + 1
            )
        })?;
        // Steps may be integers or strings holding integers (Who&When style); anything else is unparsed.
        let step = match &p.step {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|s| s as usize),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        if p.step.is_some() && step.is_none() {
            eprintln!(
                "warning: {}: line {}: field `step` is not a step number; counted as unparsed",
                path.display(),
                i + 1
            );
        }
        let abstained = p.agent.is_none() && step.is_none();
        map.insert(
            p.trace,
            Prediction {
                agent: p.agent,
                step,
                error_mode: p.error_mode,
                abstained,
                parse_failures: 0,
            },
        );
    }
    Ok(map)
}

fn write_reports(report: &LocateReport, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(report)?,
    )?;
    std::fs::write(
        dir.join("report.md"),
        maslens_eval::markdown::render(report),
    )?;
    std::fs::write(dir.join("report.html"), maslens_eval::html::render(report))?;
    Ok(())
}

fn run_locate(args: LocateArgs, global: &Global) -> anyhow::Result<ExitCode> {
    let (path, format) = parse_dataset(&args.dataset);
    let (traces, mut problems) = read_traces(std::slice::from_ref(&path), format);
    let mut labelled: Vec<(Trace, Gold)> = Vec::new();
    for t in traces {
        if args.subset.as_deref().is_some_and(|s| !t.id.starts_with(s)) {
            continue;
        }
        match gold_of(&t) {
            Some(g) => labelled.push((t, g)),
            None => {
                eprintln!(
                    "warning: {}: no decisive or faulty-agent label; skipped",
                    t.id
                );
                problems += 1;
            }
        }
    }
    labelled.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    labelled.dedup_by(|a, b| a.0.id == b.0.id);
    if labelled.is_empty() {
        anyhow::bail!("no labelled traces in {}", path.display());
    }

    // Split.
    let ids: Vec<(String, Option<String>)> = labelled
        .iter()
        .map(|(t, _)| (t.id.clone(), subset_of(t)))
        .collect();
    let (train_ids, split_info) = match args.split {
        Some(frac) => {
            let (tr, te) = split_ids(&ids, frac, args.seed);
            let info = SplitInfo {
                fraction: frac,
                seed: args.seed,
                train: tr.len(),
                test: te.len(),
            };
            (Some(tr), Some(info))
        }
        None => (None, None),
    };
    let (train, mut test): (Vec<Labelled>, Vec<Labelled>) = match &train_ids {
        Some(tr) => labelled
            .into_iter()
            .partition(|(t, _)| tr.binary_search(&t.id).is_ok()),
        None => (Vec::new(), labelled),
    };
    if let Some(n) = args.limit {
        test.truncate(n);
    }
    let refine_side: Vec<&(Trace, Gold)> = if split_info.is_some() {
        train.iter().collect()
    } else {
        test.iter().collect()
    };

    let any_aegis = test.iter().any(|(t, _)| t.source.format == "aegis");
    let cfg = config(&args.method, wants_error_modes(&args.method, any_aegis));
    let scorer = if args.compat_substring {
        Scorer::CompatSubstring
    } else {
        Scorer::Exact
    };
    let quiet = global.quiet || global.json;
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut cases: Vec<Case> = Vec::new();
    let mut verdicts: Vec<LocateVerdict> = Vec::new();
    let mut stopped_early: Option<String> = None;
    let method_label;
    let mut model_label = None;

    let needs_llm = args.predictions.is_none() && args.method.method == "llm"
        || args.export_refinement.is_some();
    let prior = args
        .method
        .prior_spec()
        .map(PriorSource::load)
        .transpose()?;

    if let Some(p) = &args.predictions {
        method_label = format!("predictions:{}", p.display());
        let preds = load_predictions(p)?;
        let known: std::collections::HashSet<&str> =
            test.iter().map(|(t, _)| t.id.as_str()).collect();
        for id in preds.keys().filter(|k| !known.contains(k.as_str())) {
            eprintln!("warning: prediction for unknown or excluded trace {id:?} ignored");
        }
        for (t, g) in &test {
            let pred = preds.get(&t.id).cloned().unwrap_or(Prediction {
                abstained: true,
                ..Default::default()
            });
            cases.push(case(t, g, pred, CaseUsage::default()));
        }
    } else if args.method.method == "prior" {
        method_label = "prior".to_string();
        let Some(prior) = &prior else {
            anyhow::bail!("--method prior needs --prior builtin or --prior FILE")
        };
        for (t, g) in &test {
            let start = std::time::Instant::now();
            let pred = match prior.predict(t) {
                Some((a, s)) => Prediction {
                    agent: Some(a),
                    step: Some(s),
                    ..Default::default()
                },
                None => Prediction {
                    abstained: true,
                    ..Default::default()
                },
            };
            let usage = CaseUsage {
                seconds: start.elapsed().as_secs_f64(),
                ..Default::default()
            };
            cases.push(case(t, g, pred, usage));
        }
    } else {
        method_label = String::new();
    }

    let mut refine_written = None;
    let method_label = if needs_llm {
        let styles = args.method.evaluators.clone();
        let r = super::block_on(async {
            let models = Models::build(&args.llm, &args.method).await?;
            model_label = Some(models.judge.model.id().to_string());
            let price = models.judge.usage.price();
            let locator = models.locator(cfg.clone(), &styles);
            let label = locator.method();
            if args.predictions.is_none() && args.method.method == "llm" {
                let pb = progress(test.len(), quiet);
                for (t, g) in &test {
                    pb.set_message(t.id.clone());
                    let p = prior.as_ref().and_then(|p| p.probs(t));
                    match locator.locate(t, p.as_deref()).await {
                        Ok(v) => {
                            let s = &v.usage;
                            let u = maslens_llm::Usage {
                                prompt_tokens: s.prompt_tokens,
                                completion_tokens: s.completion_tokens,
                                cached_tokens: s.cached_tokens,
                            };
                            let usage = CaseUsage {
                                prompt_tokens: s.prompt_tokens,
                                cached_tokens: s.cached_tokens,
                                completion_tokens: s.completion_tokens,
                                calls: s.calls,
                                seconds: v.usage.seconds,
                                cost_usd: price.map(|p| p.cost(&u)),
                            };
                            cases.push(case(t, g, verdict_pred(&v), usage));
                            verdicts.push(v);
                        }
                        Err(e) => {
                            let msg = e.to_string();
                            pb.suspend(|| eprintln!("error: {msg}"));
                            if matches!(
                                &e,
                                maslens_locate::LocateError::Llm {
                                    source: maslens_llm::LlmError::Budget(_),
                                    ..
                                }
                            ) {
                                stopped_early = Some(msg);
                                break;
                            }
                            // Counted as unparsed (wrong) and listed.
                            cases.push(case(
                                t,
                                g,
                                Prediction {
                                    abstained: true,
                                    ..Default::default()
                                },
                                CaseUsage::default(),
                            ));
                            errors.push((t.id.clone(), msg));
                        }
                    }
                    pb.inc(1);
                }
                pb.finish_and_clear();
            }
            if let Some(dir) = &args.export_refinement {
                let mut rcfg = cfg.clone();
                rcfg.variant = Variant::Full;
                let rlocator = models.locator(rcfg.clone(), &styles);
                let n = export_refinement(
                    dir,
                    &refine_side,
                    &rlocator,
                    &rcfg.settings,
                    &args,
                    quiet,
                    split_info.is_some(),
                )
                .await?;
                refine_written = Some(n);
            }
            crate::llm_args::finish(&models.judge, global.quiet);
            Ok::<String, anyhow::Error>(label)
        });
        let label = r??;
        if method_label.is_empty() {
            label
        } else {
            method_label
        }
    } else {
        method_label
    };

    // Baselines on exactly the cases scored.
    let scored: std::collections::HashSet<String> = cases.iter().map(|c| c.id.clone()).collect();
    let mut baseline_cases: Vec<(String, Vec<Case>)> = baselines::NAMES
        .iter()
        .map(|&name| {
            let bc = test
                .iter()
                .filter(|(t, _)| scored.contains(&t.id))
                .map(|(t, g)| {
                    case(
                        t,
                        g,
                        guess_pred(baselines::run(name, t, args.seed)),
                        CaseUsage::default(),
                    )
                })
                .collect();
            (name.to_string(), bc)
        })
        .collect();
    // The learned prior (no LLM) next to the trivial baselines, on the same cases.
    if let (Some(p), false) = (&prior, args.method.method == "prior") {
        let bc = test
            .iter()
            .filter(|(t, _)| scored.contains(&t.id))
            .map(|(t, g)| {
                let pred = match p.predict(t) {
                    Some((a, s)) => Prediction {
                        agent: Some(a),
                        step: Some(s),
                        ..Default::default()
                    },
                    None => Prediction {
                        abstained: true,
                        ..Default::default()
                    },
                };
                case(t, g, pred, CaseUsage::default())
            })
            .collect();
        baseline_cases.push(("prior".to_string(), bc));
    }
    let opts = ReportOptions {
        title: format!("maslens eval locate: {}", args.dataset),
        method: method_label,
        model: model_label,
        dataset: args.dataset.clone(),
        scorer,
        seed: args.seed,
        tolerances: args.tolerances.clone(),
        top_mislocalized: 10,
    };
    let mut report = build(&cases, &baseline_cases, errors, &opts);
    report.split = split_info;
    report.config = serde_json::json!({
        "method": args.method.method,
        "protocol": cfg.protocol,
        "variant": cfg.variant,
        "evaluators": args.method.evaluators,
        "evaluator_models": args.method.evaluator_model,
        "with_ground_truth": cfg.settings.with_ground_truth,
        "error_modes": !cfg.settings.error_modes.is_empty(),
        "max_answer_tokens": cfg.settings.max_answer_tokens,
        "prior": args.method.prior,
        "prior_weight": cfg.prior_weight,
        "prior_narrowing": cfg.narrow_with_prior,
        "limit": args.limit,
        "subset": args.subset,
        "stopped_early": stopped_early,
        "refinement_instances": refine_written,
    });
    if let Some(dir) = &args.out {
        write_reports(&report, dir)?;
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("verdicts.jsonl"))?);
        for v in &verdicts {
            writeln!(f, "{}", serde_json::to_string(v)?)?;
        }
        f.flush()?;
    }
    if global.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", maslens_eval::markdown::render(&report));
        if let Some(dir) = &args.out {
            println!("\nreports written to {}", dir.display());
        }
    }
    if let Some(s) = &report.config["stopped_early"].as_str() {
        eprintln!(
            "warning: stopped early ({s}); the report covers the {} cases run",
            report.cases
        );
    }
    Ok(ExitCode::from(
        if problems > 0 || !report.errors.is_empty() {
            super::EXIT_PROBLEMS
        } else {
            super::EXIT_OK
        },
    ))
}

async fn export_refinement(
    dir: &Path,
    side: &[&(Trace, Gold)],
    locator: &maslens_locate::Locator<'_>,
    settings: &maslens_locate::Settings,
    args: &LocateArgs,
    quiet: bool,
    disjoint: bool,
) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut train = std::io::BufWriter::new(std::fs::File::create(dir.join("train.jsonl"))?);
    let mut inst_f = std::io::BufWriter::new(std::fs::File::create(dir.join("instances.jsonl"))?);
    let pb = progress(side.len(), quiet);
    let mut n = 0;
    for (t, _) in side {
        pb.set_message(format!("refine {}", t.id));
        let inst = if args.refine_targets == "gold" {
            RefinementInstance::from_gold(t, args.round)
        } else {
            match locator.locate(t, None).await {
                Ok(v) => RefinementInstance::from_verdict(t, &v, args.round),
                Err(e) => {
                    pb.suspend(|| eprintln!("error: refinement: {e}"));
                    None
                }
            }
        };
        pb.inc(1);
        let Some(inst) = inst else { continue };
        let ex = chat_example(locator.judge, t, &inst, settings)?;
        writeln!(train, "{}", serde_json::to_string(&ex)?)?;
        writeln!(inst_f, "{}", serde_json::to_string(&inst)?)?;
        n += 1;
    }
    pb.finish_and_clear();
    train.flush()?;
    inst_f.flush()?;
    let d = dir.display().to_string();
    let script = format!(
        "#!/bin/sh\n# Refinement round {} ({} targets, {} instances{}).\n# LoRA settings of AgentLocate: r 64, alpha 128, dropout 0.05, 3 epochs, effective batch 16.\nset -e\n{}",
        args.round,
        args.refine_targets,
        n,
        if disjoint { ", train side of the split, disjoint from evaluation" } else { "; not split: keep these traces out of evaluation" },
        trl_command(&d, &args.base_model, &format!("{d}/lora-round{}", args.round))
    );
    std::fs::write(dir.join("trl_sft.sh"), script)?;
    std::fs::write(
        dir.join("openai_finetune.txt"),
        openai_command(&format!("{d}/train.jsonl"), "gpt-4o-2024-08-06"),
    )?;
    Ok(n)
}
