//! `maslens eval locate` as one library call: a dataset of labelled traces -> a localizer (the
//! LLM pipeline, the prior, or external predictions) -> the exact or compat scorer -> a
//! versioned report, with the trivial baselines (and the prior, when loaded) on the same cases,
//! and optionally the refinement data of AgentLocate (z_q instances and a chat JSONL).

use crate::locate::{LocateOptions, Method, Models, PriorLocalizer, PriorSource};
use crate::traces::{load_dataset, parse_dataset};
use crate::CoreError;
use maslens_eval::metrics::{Prediction, Scorer};
use maslens_eval::run::{
    evaluate, split, EvalRun, EvalSpec, LabelledCase, Localizer, Progress, Table,
};
use maslens_llm::OpenOptions;
use maslens_locate::{Protocol, Variant};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Refinement targets of the exported data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefineTargets {
    /// The Evaluator vote's verified location (AgentLocate).
    #[default]
    Verified,
    /// The gold label (variant III).
    Gold,
}

impl std::str::FromStr for RefineTargets {
    type Err = CoreError;

    /// `verified` or `gold` (the names the report records).
    fn from_str(s: &str) -> Result<RefineTargets, CoreError> {
        match s {
            "verified" => Ok(RefineTargets::Verified),
            "gold" => Ok(RefineTargets::Gold),
            _ => Err(CoreError::Invalid(format!(
                "refinement targets {s:?}: `verified` or `gold`"
            ))),
        }
    }
}

/// Export of refinement data (`--export-refinement`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefineExport {
    pub dir: PathBuf,
    pub targets: RefineTargets,
    pub round: u32,
    /// Base model written into the trl command.
    pub base_model: String,
}

/// Everything `maslens eval locate` takes.
#[derive(Debug, Clone)]
pub struct EvalLocateOptions {
    /// `whowhen:DIR`, `aegis:FILE`, or a path.
    pub dataset: String,
    pub locate: LocateOptions,
    /// The Judge's model spec and the LLM options (cache, budgets, backend).
    pub model: String,
    pub llm: OpenOptions,
    pub scorer: Scorer,
    /// Fraction of each group on the refinement (train) side; the rest is evaluated.
    pub split: Option<f64>,
    pub seed: u64,
    /// A JSONL of `{"trace", "agent", "step"[, "error_mode"]}` scored instead of running a method.
    pub predictions: Option<PathBuf>,
    /// Evaluate only the first N cases (by id) of the evaluated side.
    pub limit: Option<usize>,
    /// Only cases whose id starts with this.
    pub subset: Option<String>,
    pub tolerances: Vec<usize>,
    pub export_refinement: Option<RefineExport>,
}

/// The typed configuration recorded in the report (`config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub method: Method,
    pub protocol: maslens_locate::Protocol,
    pub variant: Variant,
    pub evaluators: Vec<maslens_locate::Style>,
    pub evaluator_models: Vec<String>,
    pub with_ground_truth: bool,
    pub error_modes: bool,
    pub max_answer_tokens: u32,
    pub prior: Option<String>,
    pub prior_weight: f64,
    pub prior_narrowing: bool,
    /// Which pair the report scored: `coherent` (the verdict's primary pair) or `independent`
    /// (the agent-level and step-level answers apart, as Who&When's tables).
    #[serde(default)]
    pub pair_rule: maslens_trace::ScoringRule,
    /// Whether a tool, terminal or human could be the primary agent.
    #[serde(default)]
    pub allow_non_acting: bool,
    pub limit: Option<usize>,
    pub subset: Option<String>,
    pub refinement_instances: Option<usize>,
    /// Which output the run gives, in the paper's terms (`Variant::output`); a `--variant
    /// judge-ft` run with `--finetuned-on` says what the Judge was fine-tuned on
    /// (`refinement::attach_finetune`, which also adds `finetune`).
    #[serde(default)]
    pub output: String,
}

/// A finished evaluation.
pub struct EvalLocateOutput {
    pub run: EvalRun,
    /// Records skipped or left out, as messages (file, record, field): counted for the exit code.
    pub problems: Vec<String>,
    /// The LLM stack of the Judge, for a usage summary (when a model was opened).
    pub judge: Option<maslens_llm::Stack>,
}

impl EvalLocateOutput {
    /// Whether the run found problems (records skipped, cases failed) or stopped early: what the
    /// exit code reports.
    pub fn has_problems(&self) -> bool {
        let report = &self.run.report;
        !self.problems.is_empty() || !report.errors.is_empty() || report.stopped_early.is_some()
    }

    /// The report as Markdown, then where the reports were written (`written`, `--out`); no
    /// final newline.
    pub fn render_text(&self, written: Option<&Path>) -> String {
        let text = maslens_eval::markdown::render(&self.run.report);
        let mut out = text.strip_suffix('\n').unwrap_or(&text).to_string();
        if let Some(dir) = written {
            out.push_str(&format!("\n\nreports written to {}", dir.display()));
        }
        out
    }

    /// Why the report's figures are in-sample, when they are (the built-in prior was trained on
    /// some of its traces).
    pub fn in_sample(&self) -> Option<&str> {
        self.run.report.in_sample.as_deref()
    }

    /// The warning of a run that stopped early (a budget), naming what the report covers.
    pub fn stopped_early(&self) -> Option<String> {
        let report = &self.run.report;
        report.stopped_early.as_ref().map(|s| {
            format!(
                "stopped early ({s}); the report covers the {} cases run",
                report.cases
            )
        })
    }
}

/// Read an external predictions file: predictions by trace id, and the lines skipped.
/// Steps may be integers or strings holding integers (Who&When style); anything else is
/// counted as unparsed with a message.
pub fn read_predictions(
    path: &Path,
) -> Result<(HashMap<String, Prediction>, Vec<String>), CoreError> {
    #[derive(Deserialize)]
    struct Line {
        trace: String,
        agent: Option<String>,
        step: Option<serde_json::Value>,
        #[serde(default)]
        error_mode: Option<String>,
    }
    let text = std::fs::read_to_string(path)
        .map_err(CoreError::io(format!("reading {}", path.display())))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut map = HashMap::new();
    let mut skipped = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = format!("{}: line {}", path.display(), i + 1);
        let p: Line = match serde_json::from_str(line) {
            Ok(p) => p,
            Err(e) => {
                skipped.push(format!(
                    "{at}: expected {{\"trace\", \"agent\", \"step\"}}: {e}; skipped"
                ));
                continue;
            }
        };
        let step = match &p.step {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|s| s as usize),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        if p.step.as_ref().is_some_and(|s| !s.is_null()) && step.is_none() {
            skipped.push(format!(
                "{at}: field `step` is not a step number; counted as unparsed"
            ));
        }
        if map.contains_key(&p.trace) {
            skipped.push(format!(
                "{at}: a second prediction for trace {:?}; the first is kept",
                p.trace
            ));
            continue;
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
    Ok((map, skipped))
}

/// Tokens of a trace as the locate prompts render it (length quartiles of the report).
pub fn trace_tokens(t: &Trace) -> usize {
    let (text, _) = maslens_locate::render::render_steps(t, 0..t.steps.len(), None);
    maslens_llm::estimate_tokens(&text)
}

/// Run `maslens eval locate`. Call inside a tokio runtime.
pub async fn eval_locate(
    opts: &EvalLocateOptions,
    progress: &dyn Progress,
) -> Result<EvalLocateOutput, CoreError> {
    eval_locate_with(opts, None, progress).await
}

/// [`eval_locate`] with models the caller already opened (the Python package keeps a model
/// open across calls); `None` opens `opts.model` with `opts.llm` when the run needs a model.
pub async fn eval_locate_with(
    opts: &EvalLocateOptions,
    opened: Option<Models>,
    progress: &dyn Progress,
) -> Result<EvalLocateOutput, CoreError> {
    if opts.export_refinement.is_some()
        && matches!(
            opts.locate.protocol,
            Protocol::A2p | Protocol::Taxonomy | Protocol::Echo | Protocol::Counterfactual
        )
    {
        return Err(CoreError::Invalid(
            "--export-refinement teaches the Judge in all-at-once, step-by-step or binary-search; \
             A2P, the taxonomy Judge, ECHO and counterfactual checking train no Judge (choose another --protocol)"
                .into(),
        ));
    }
    let (path, format) = parse_dataset(&opts.dataset);
    let ds = load_dataset(&path, format, opts.subset.as_deref());
    let mut problems = ds.problems();
    if ds.cases.is_empty() {
        return Err(CoreError::Invalid(format!(
            "no labelled traces in {}",
            path.display()
        )));
    }
    let (train, mut test, split_info) = match opts.split {
        Some(frac) => {
            let (tr, te, info) = split(ds.cases, frac, opts.seed);
            (tr, te, Some(info))
        }
        None => (Vec::new(), ds.cases, None),
    };
    if let Some(n) = opts.limit {
        test.truncate(n);
    }
    let any_aegis = test.iter().any(|c| c.trace.source.format == "aegis");
    let error_modes = opts.locate.wants_error_modes(any_aegis);
    let cfg = opts.locate.config(error_modes);

    let needs_llm = opts.predictions.is_none() && opts.locate.method.needs_llm()
        || opts.export_refinement.is_some();
    let models = match (needs_llm, opened) {
        (false, _) => None,
        (true, Some(m)) => Some(m),
        (true, None) => Some(Models::open(&opts.model, &opts.llm, &opts.locate).await?),
    };
    let mut run = evaluate_cases(
        opts,
        &test,
        models.as_ref(),
        any_aegis,
        split_info.clone(),
        &mut problems,
        progress,
    )
    .await?;

    let mut refinement_instances = None;
    if let (Some(export), Some(models)) = (&opts.export_refinement, &models) {
        // The refinement side: the train part of the split, else every evaluated case.
        let side: &[LabelledCase] = if split_info.is_some() { &train } else { &test };
        let mut rcfg = cfg.clone();
        rcfg.variant = Variant::Verified;
        let locator = models.locator(rcfg.clone(), &opts.locate.evaluators);
        let source = crate::refinement::ExportSource {
            dataset: opts.dataset.clone(),
            split: opts.split,
            seed: opts.seed,
            subset: opts.subset.clone(),
        };
        refinement_instances = Some(
            crate::refinement::export_refinement(export, &source, side, &locator, &rcfg, progress)
                .await?,
        );
    }
    let config = RunConfig {
        method: opts.locate.method,
        protocol: cfg.protocol,
        variant: cfg.variant,
        evaluators: opts.locate.evaluators.clone(),
        evaluator_models: opts.locate.evaluator_models.clone(),
        with_ground_truth: cfg.settings.with_ground_truth,
        error_modes,
        max_answer_tokens: cfg.settings.max_answer_tokens,
        prior: opts.locate.prior.clone(),
        prior_weight: cfg.prior_weight,
        prior_narrowing: cfg.narrow_with_prior,
        pair_rule: opts.locate.pair_rule,
        allow_non_acting: opts.locate.allow_non_acting,
        limit: opts.limit,
        subset: opts.subset.clone(),
        refinement_instances,
        output: if opts.predictions.is_some() {
            "the predictions file's locations".into()
        } else if opts.locate.method == Method::Prior {
            "the learned prior's most likely (agent, step) (maslens-prior, no LLM)".into()
        } else {
            let o = cfg.variant.output();
            format!("{} ({}): {}", o.paper, o.equation, o.output)
        },
    };
    run.report.config = serde_json::to_value(&config).unwrap_or_default();
    if opts.predictions.is_none() {
        let scored: Vec<&Trace> = test.iter().map(|c| &c.trace).collect();
        run.report.in_sample = crate::in_sample::note(opts.locate.prior_spec(), &scored);
    }
    Ok(EvalLocateOutput {
        run,
        problems,
        judge: models.map(|m| m.judge),
    })
}

/// Evaluate `test` with the localizer `opts` names (or the predictions file), beside the
/// baselines and, when loaded, the prior.
async fn evaluate_cases(
    opts: &EvalLocateOptions,
    test: &[LabelledCase],
    models: Option<&Models>,
    any_aegis: bool,
    split_info: Option<maslens_eval::report::SplitInfo>,
    problems: &mut Vec<String>,
    progress: &dyn Progress,
) -> Result<EvalRun, CoreError> {
    let table;
    let chosen;
    let localizer: &dyn Localizer = if let Some(p) = &opts.predictions {
        let (predictions, skipped) = read_predictions(p)?;
        let known: std::collections::HashSet<&str> =
            test.iter().map(|c| c.trace.id.as_str()).collect();
        let mut unknown: Vec<&String> = predictions
            .keys()
            .filter(|k| !known.contains(k.as_str()))
            .collect();
        unknown.sort();
        problems.extend(skipped);
        for id in unknown {
            tracing::warn!("prediction for unknown or excluded trace {id:?} ignored");
        }
        table = Table {
            label: format!("predictions:{}", p.display()),
            predictions,
        };
        &table
    } else {
        // The localizer `maslens locate` builds for these options (crate::localize).
        let setup = crate::localize::Setup::new(&opts.locate, models, any_aegis)?;
        problems.extend(setup.warnings);
        for n in &setup.notes {
            tracing::warn!("{n}");
        }
        chosen = setup.localizer;
        &chosen
    };

    let mut extra: Vec<(&str, &dyn Localizer)> = Vec::new();
    let prior_baseline;
    if opts.locate.method != Method::Prior {
        // The learned prior next to the trivial baselines, when the run loaded one.
        if let Some(spec) = opts.locate.prior_spec() {
            let (p, _) = PriorSource::load(spec)?;
            prior_baseline = PriorLocalizer {
                allow_non_acting: opts.locate.allow_non_acting,
                pair_rule: opts.locate.pair_rule,
                ..PriorLocalizer::new(p)
            };
            extra.push(("prior", &prior_baseline));
        }
    }
    let spec = EvalSpec {
        title: format!("maslens eval locate: {}", opts.dataset),
        dataset: opts.dataset.clone(),
        scorer: opts.scorer,
        seed: opts.seed,
        resamples: maslens_eval::metrics::RESAMPLES,
        tolerances: opts.tolerances.clone(),
        top_mislocalized: 10,
        split: split_info,
        config: serde_json::Value::Null,
        trace_tokens: &trace_tokens,
        git_revision: crate::GIT_REVISION,
    };
    Ok(evaluate(test, localizer, &extra, &spec, progress).await)
}
