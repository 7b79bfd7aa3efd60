//! `maslens locate <trace|dir>...`: which agent and step decided the failure, and why.

use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use maslens_llm::{ChatModel, Stack};
use maslens_locate::pipeline::EvaluatorSpec;
use maslens_locate::{LocateConfig, LocateVerdict, Locator, Protocol, Settings, Style, Variant};
use maslens_trace::{Format, Trace};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// How failures are localized (shared with `maslens eval locate`).
#[derive(clap::Args, Debug, Clone)]
pub struct MethodArgs {
    /// Localizer: `llm` (AgentLocate: Judge protocol + Evaluators + vote) or `prior` (the learned
    /// localizer of maslens-prior, no LLM).
    #[arg(long, default_value = "llm", value_parser = ["llm", "prior"])]
    pub method: String,
    /// Judge protocol: all-at-once, step-by-step, binary-search.
    #[arg(long, default_value = "all-at-once")]
    pub protocol: Protocol,
    /// full (Judge + Evaluators + vote), judge-only (variant I), evaluators-only (variant II).
    #[arg(long, default_value = "full")]
    pub variant: Variant,
    /// Evaluator styles (their number is H): base, concise, evidence; repeat styles for more.
    #[arg(long, value_delimiter = ',', default_value = "base,concise,evidence")]
    pub evaluators: Vec<Style>,
    /// Model spec(s) for the Evaluators: one for all, or one per style (default: the Judge's).
    #[arg(long)]
    pub evaluator_model: Vec<String>,
    /// Show the reference answer to the Judge and Evaluators (the Who&When "with ground truth"
    /// setting; AgentLocate's default is without).
    #[arg(long)]
    pub with_ground_truth: bool,
    /// Ask for an error mode from the Aegis (MAST) taxonomy too: `auto` (for Aegis traces), `aegis`, `none`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "aegis", "none"])]
    pub error_modes: String,
    /// Answer token limit per call.
    #[arg(long, default_value_t = 256)]
    pub max_answer_tokens: u32,
    /// External prior over steps as an extra voter: `builtin` (maslens-prior's default model) or
    /// a JSONL file of `{"trace": ID, "probs": [p_step0, p_step1, ...]}`.
    #[arg(long)]
    pub prior: Option<String>,
    /// Weight of the prior voter in the vote.
    #[arg(long, default_value_t = 1.0)]
    pub prior_weight: f64,
    /// Prior-guided narrowing: for traces longer than the model's window, show the steps the
    /// prior ranks most likely decisive in full and abridge the others (one call sees every step
    /// instead of several windows). Uses `--prior` (default `builtin`); with `--prior-narrowing`
    /// alone the prior does not vote.
    #[arg(long)]
    pub prior_narrowing: bool,
}

impl MethodArgs {
    /// The prior to load: `--prior`, else `builtin` when `--prior-narrowing` needs one.
    pub fn prior_spec(&self) -> Option<&str> {
        self.prior
            .as_deref()
            .or(self.prior_narrowing.then_some("builtin"))
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace files or directories (Who&When, Aegis JSONL, native, chat).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Input format (auto-detected per file by default).
    #[arg(long, default_value = "auto")]
    pub format: Format,
    #[command(flatten)]
    pub method: MethodArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Write every trace with its verdict appended to `labels.verdicts` as native JSONL to this file.
    #[arg(long)]
    pub write_back: Option<PathBuf>,
}

/// Prior distributions over steps, per trace id.
pub enum PriorSource {
    Builtin(Box<maslens_prior::PriorModel>),
    File(HashMap<String, Vec<f64>>),
}

impl PriorSource {
    pub fn load(spec: &str) -> anyhow::Result<PriorSource> {
        if spec == "builtin" {
            let m = maslens_prior::load_default().context("loading the built-in prior model")?;
            return Ok(PriorSource::Builtin(Box::new(m)));
        }
        let text =
            std::fs::read_to_string(spec).with_context(|| format!("reading prior file {spec}"))?;
        let mut map = HashMap::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            #[derive(serde::Deserialize)]
            struct Row {
                trace: String,
                probs: Vec<f64>,
            }
            let row: Row = serde_json::from_str(line).with_context(|| {
                format!("{spec}: line {}: expected {{\"trace\", \"probs\"}}", i + 1)
            })?;
            map.insert(row.trace, row.probs);
        }
        Ok(PriorSource::File(map))
    }

    /// Step distribution (by position) for a trace, when known.
    pub fn probs(&self, trace: &Trace) -> Option<Vec<f64>> {
        match self {
            PriorSource::Builtin(m) => {
                let ranked = m.rank(trace);
                let mut probs = vec![0.0; trace.steps.len()];
                for c in ranked {
                    if let Some(p) = maslens_locate::step_position(trace, c.step) {
                        probs[p] = c.prob;
                    }
                }
                Some(probs)
            }
            PriorSource::File(map) => map
                .get(&trace.id)
                .filter(|p| p.len() == trace.steps.len())
                .cloned(),
        }
    }

    /// Prior-only prediction (the `prior` method): a model's own pair rule (by default the agent
    /// head's agent and the step head's step, scored separately on Who&When, as `maslens prior
    /// eval` does); for a probability file, the most probable step and the agent acting there.
    pub fn predict(&self, trace: &Trace) -> Option<(String, usize)> {
        if let PriorSource::Builtin(m) = self {
            // The model's own pair rule (as `maslens prior eval` scores it).
            return m.predict(trace);
        }
        let probs = self.probs(trace)?;
        let best = probs
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))?
            .0;
        Some((trace.steps[best].agent.clone(), trace.steps[best].index))
    }
}

/// The LLM stacks of a run: the Judge's and those of distinct Evaluator models.
pub struct Models {
    pub judge: Stack,
    pub evaluators: Vec<Stack>,
}

impl Models {
    pub async fn build(llm: &LlmArgs, method: &MethodArgs) -> anyhow::Result<Models> {
        let judge = llm
            .build()
            .await
            .with_context(|| format!("opening model {}", llm.model))?;
        let mut evaluators = Vec::new();
        for spec in &method.evaluator_model {
            let mut a = llm.clone();
            a.model = spec.clone();
            evaluators.push(
                a.build()
                    .await
                    .with_context(|| format!("opening evaluator model {spec}"))?,
            );
        }
        if !method.evaluator_model.is_empty()
            && method.evaluator_model.len() != 1
            && method.evaluator_model.len() != method.evaluators.len()
        {
            anyhow::bail!(
                "--evaluator-model given {} times: give it once (all Evaluators) or once per style ({} styles)",
                method.evaluator_model.len(),
                method.evaluators.len()
            );
        }
        Ok(Models { judge, evaluators })
    }

    /// A locator over these models.
    pub fn locator<'a>(&'a self, config: LocateConfig, styles: &[Style]) -> Locator<'a> {
        let judge: &dyn ChatModel = self.judge.model.as_ref();
        let evaluators = styles
            .iter()
            .enumerate()
            .map(|(i, &style)| {
                let model: &dyn ChatModel = match self.evaluators.len() {
                    0 => judge,
                    1 => self.evaluators[0].model.as_ref(),
                    _ => self.evaluators[i].model.as_ref(),
                };
                EvaluatorSpec { style, model }
            })
            .collect();
        Locator {
            judge,
            evaluators,
            config,
        }
    }
}

/// Whether error modes are asked for this trace set.
pub fn wants_error_modes(method: &MethodArgs, any_aegis: bool) -> bool {
    match method.error_modes.as_str() {
        "aegis" => true,
        "none" => false,
        _ => any_aegis,
    }
}

/// The locate configuration these flags describe.
pub fn config(method: &MethodArgs, error_modes: bool) -> LocateConfig {
    LocateConfig {
        protocol: method.protocol,
        variant: method.variant,
        settings: Settings {
            with_ground_truth: method.with_ground_truth,
            error_modes: if error_modes {
                maslens_locate::aegis_error_modes()
            } else {
                Vec::new()
            },
            max_answer_tokens: method.max_answer_tokens,
        },
        prior_weight: if method.prior.is_some() {
            method.prior_weight
        } else {
            0.0
        },
        narrow_with_prior: method.prior_narrowing,
    }
}

/// Read traces, printing import errors (file, record, field) to stderr; returns the traces and
/// the number of problems.
pub fn read_traces(inputs: &[PathBuf], format: Format) -> (Vec<Trace>, usize) {
    let mut traces = Vec::new();
    let mut problems = 0;
    for r in maslens_trace::import::read_paths(inputs, format) {
        match r {
            Ok(imp) => traces.push(imp.trace),
            Err(e) => {
                eprintln!("error: {e}");
                problems += 1;
            }
        }
    }
    (traces, problems)
}

/// A progress bar over `n` items (hidden when quiet or not a terminal).
pub fn progress(n: usize, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(n as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb
}

fn print_verdict(v: &LocateVerdict) {
    match (&v.agent, v.step) {
        (Some(a), Some(s)) => {
            let agree = match (v.agreement, v.evaluators.len()) {
                (Some(x), n) if n > 0 => format!(
                    ", Evaluators agree {}/{}",
                    (x * n as f64).round() as usize,
                    n
                ),
                _ => String::new(),
            };
            println!(
                "{}: {} at step {} (confidence {:.2}{agree})",
                v.trace, a, s, v.confidence
            );
            if let Some(m) = &v.error_mode {
                println!("  error mode: {m}");
            }
            if let Some(e) = &v.step_excerpt {
                println!("  step {s}: {}", e.replace('\n', " "));
            }
            if !v.rationale.is_empty() {
                println!("  why: {}", v.rationale.replace('\n', " "));
            }
        }
        _ => println!(
            "{}: no location ({})",
            v.trace,
            v.abstain_reason.clone().unwrap_or_default()
        ),
    }
    if v.long_trace.strategy != maslens_locate::render::Strategy::Full {
        println!("  long trace: {}", v.long_trace.strategy.describe());
    }
    if let Some(n) = &v.note {
        println!("  note: {n}");
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let (mut traces, mut problems) = read_traces(&args.inputs, args.format);
    if traces.is_empty() {
        anyhow::bail!("no readable traces in {:?}", args.inputs);
    }
    let prior = args
        .method
        .prior_spec()
        .map(PriorSource::load)
        .transpose()?;
    let any_aegis = traces.iter().any(|t| t.source.format == "aegis");
    let cfg = config(&args.method, wants_error_modes(&args.method, any_aegis));
    let mut out = match &args.write_back {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };

    if args.method.method == "prior" {
        let Some(prior) = prior else {
            anyhow::bail!("--method prior needs --prior builtin or --prior FILE")
        };
        for t in &traces {
            match prior.predict(t) {
                Some((a, s)) if global.json => println!(
                    "{}",
                    serde_json::json!({"trace": t.id, "agent": a, "step": s, "method": "prior"})
                ),
                Some((a, s)) => println!("{}: {a} at step {s} (prior)", t.id),
                None => {
                    eprintln!("{}: the prior gave no distribution", t.id);
                    problems += 1;
                }
            }
        }
        return Ok(ExitCode::from(if problems > 0 {
            super::EXIT_PROBLEMS
        } else {
            super::EXIT_OK
        }));
    }

    let quiet = global.quiet;
    let json = global.json;
    let styles = args.method.evaluators.clone();
    let result = super::block_on(async {
        let models = Models::build(&args.llm, &args.method).await?;
        let locator = models.locator(cfg, &styles);
        let pb = progress(traces.len(), quiet || json);
        let mut problems = 0;
        for t in traces.iter_mut() {
            pb.set_message(t.id.clone());
            let p = prior.as_ref().and_then(|p| p.probs(t));
            match locator.locate(t, p.as_deref()).await {
                Ok(v) => {
                    pb.suspend(|| {
                        if json {
                            println!("{}", serde_json::to_string(&v).unwrap_or_default());
                        } else {
                            print_verdict(&v);
                        }
                    });
                    t.labels.verdicts.push(v.to_label());
                }
                Err(e) => {
                    pb.suspend(|| eprintln!("error: {e}"));
                    problems += 1;
                }
            }
            if let Some(w) = out.as_mut() {
                maslens_trace::export::write_jsonl(&mut *w, t)
                    .context("writing --write-back output")?;
            }
            pb.inc(1);
        }
        pb.finish_and_clear();
        crate::llm_args::finish(&models.judge, quiet);
        Ok::<usize, anyhow::Error>(problems)
    })?;
    problems += result?;
    if let Some(mut w) = out {
        w.flush()?;
    }
    Ok(ExitCode::from(if problems > 0 {
        super::EXIT_PROBLEMS
    } else {
        super::EXIT_OK
    }))
}
