//! Flags of failure localization, shared by `maslens locate` and `maslens eval locate`
//! (flatten `MethodArgs`); they describe a `maslens_core::locate::LocateOptions`.

use crate::inputs::enum_parser;
use crate::llm_args::LlmArgs;
use maslens_core::eval_locate::EvalLocateOptions;
use maslens_core::locate::{ErrorModes, LocateOptions, Method};
use maslens_eval::metrics::Scorer;
use maslens_locate::{Protocol, Style, Variant};

/// `--variant` values: each variant's names (`Variant::names`), its own first.
const VARIANTS: &[&[&str]] = &[
    &["verified", "full", "ii", "II", "variant-ii"],
    &["judge", "judge-only", "i", "I", "variant-i"],
    &["judge-ft", "agentlocate", "iii", "III", "variant-iii"],
    &["evaluators-only"],
];

#[derive(clap::Args, Debug, Clone)]
pub struct MethodArgs {
    /// Localizer: `stacked` (the LLM pipeline's ballots and the learned prior combined with
    /// weights learned by cross-validation, --stack; the default of `locate`, `eval locate`,
    /// `serve`'s jobs and the Python package), `llm` (AgentLocate alone: Judge protocol +
    /// Evaluators + vote) or `prior` (the learned localizer of maslens-prior, no LLM; the
    /// built-in model unless --prior FILE).
    #[arg(long, value_parser = ["stacked", "llm", "prior"])]
    pub method: Option<String>,
    /// Stack weights of `--method stacked`: `builtin` (fit for the embedded model; another
    /// model gets `generic` weights with a note), `generic`, or a file written by
    /// `maslens eval stack -o`.
    #[arg(long, value_name = "builtin|generic|FILE")]
    pub stack: Option<String>,
    /// Judge protocol: all-at-once, step-by-step, binary-search (Who&When), a2p
    /// (Abduct-Act-Predict: abduction, action and prediction in one pass), taxonomy (AEGIS-style:
    /// the failure modes of a fixed taxonomy seen, then the decisive one), echo (ECHO-style: a
    /// hierarchical context, six analysts, a consensus vote), or counterfactual (AgenTracer-style:
    /// a step and its correction proposed, the corrected run predicted by the model, up to three
    /// rounds; docs/locate.md).
    #[arg(long, default_value = "all-at-once",
          value_parser = enum_parser::<Protocol>(&[&["all-at-once", "all_at_once"], &["step-by-step", "step_by_step"], &["binary-search", "binary_search", "binary"], &["a2p", "abduct-act-predict"], &["taxonomy", "aegis-taxonomy"], &["echo"], &["counterfactual"]]))]
    pub protocol: Protocol,
    /// Which output the run gives, named as in the paper (section 5): `verified` (Variant II:
    /// Judge + Evaluators, output = their vote, eq. 4; formerly `full`), `judge` (Variant I: the
    /// Judge's hypothesis, eq. 1; formerly `judge-only`), `judge-ft` (AgentLocate, eq. 6: the
    /// Judge alone, with --model set to the Judge fine-tuned on `eval locate --export-refinement`
    /// data), `evaluators-only` (no Judge; maslens's addition). Aliases: i, ii, iii.
    #[arg(long, default_value = "verified",
          value_parser = enum_parser::<Variant>(VARIANTS))]
    pub variant: Variant,
    /// Evaluator styles (their number is H): base, concise, evidence; repeat styles for more.
    #[arg(long, value_delimiter = ',', default_value = "base,concise,evidence",
          value_parser = enum_parser::<Style>(&[&["base"], &["concise"], &["evidence"]]))]
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
    #[arg(long, default_value_t = 384)]
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
    /// Let a tool, code executor, terminal or the human user be the responsible agent (by
    /// default the verdict names the acting agent whose call or turn produced such a step).
    #[arg(long)]
    pub allow_non_acting: bool,
    /// Which answer `eval` scores: `coherent` (the verdict's primary pair: the agent acts at the
    /// step; the default) or `independent` (Who&When's tables: a method's agent-level and
    /// step-level answers scored apart, to reproduce the papers).
    #[arg(long, default_value = "coherent", value_parser = ["coherent", "independent"])]
    pub pair_rule: String,
    /// `prior`: when the stacked method's LLM pipeline fails on a trace, answer with the prior
    /// alone; the verdict says so and the exit code is 1. Without it such a trace is an error.
    #[arg(long, value_name = "WHAT", value_parser = ["prior"])]
    pub fallback: Option<String>,
}

impl MethodArgs {
    /// The library options these flags describe; without --method, the one default
    /// (`Method::default()`, stacked).
    pub fn options(&self) -> LocateOptions {
        LocateOptions {
            method: match self.method.as_deref() {
                Some("prior") => Method::Prior,
                Some("llm") => Method::Llm,
                Some("stacked") => Method::Stacked,
                _ => Method::default(),
            },
            stack: self.stack.clone(),
            protocol: self.protocol,
            variant: self.variant,
            evaluators: self.evaluators.clone(),
            evaluator_models: self.evaluator_model.clone(),
            with_ground_truth: self.with_ground_truth,
            error_modes: match self.error_modes.as_str() {
                "aegis" => ErrorModes::Aegis,
                "none" => ErrorModes::None,
                _ => ErrorModes::Auto,
            },
            max_answer_tokens: self.max_answer_tokens,
            prior: self.prior.clone(),
            prior_weight: self.prior_weight,
            prior_narrowing: self.prior_narrowing,
            allow_non_acting: self.allow_non_acting,
            pair_rule: maslens_trace::ScoringRule::parse(&self.pair_rule).unwrap_or_default(),
            fallback_prior: self.fallback.as_deref() == Some("prior"),
        }
    }
}

/// In export mode, what is left after this round of the LLM pipeline (for the export line), from
/// the stages whose calls went to the batch file: the Evaluators' calls need the Judge's answers,
/// so a run that deferred Judge calls needs another round for them; a structured answer that
/// fails its check needs one repair call, a further round. `windows` is whether the Judge may
/// read a long trace in windows (one call per window, each after the last: the model's context
/// size is known). `None` when this round is the last one needed when answers are well formed.
pub fn export_rounds_left(
    opts: &LocateOptions,
    usage: &maslens_llm::usage::UsageReport,
    windows: bool,
) -> Option<String> {
    let deferred = |prefix: &str| {
        usage
            .stages
            .iter()
            .any(|(s, t)| s.starts_with(prefix) && t.deferred > 0)
    };
    let evaluators = matches!(opts.variant, Variant::Verified) && !opts.evaluators.is_empty();
    if !deferred("judge") || opts.method == Method::Prior {
        return None;
    }
    let one_call_judge = opts.protocol == Protocol::AllAtOnce && !windows;
    match (one_call_judge, evaluators) {
        (true, true) => Some(
            "the Evaluators' calls need the Judge's answers: 1 more round, at most 3 when \
             answers need their repair call"
                .into(),
        ),
        (true, false) => None,
        (false, _) => {
            Some(format!(
            "the Judge ({}{}) makes its calls one after another: up to one more round per step of \
             the longest trace, twice that when answers need their repair call{}",
            opts.protocol.as_str(),
            if windows { ", in windows on long traces" } else { "" },
            if evaluators { ", then at most 2 for the Evaluators" } else { "" }
        ))
        }
    }
}

/// The cases an evaluation runs on, its localizer and model, and how it scores (`eval locate`,
/// `eval compare`).
#[derive(clap::Args, Debug)]
pub struct CaseArgs {
    /// `whowhen:DIR`, `aegis:FILE`, or a path (format auto-detected).
    pub dataset: String,
    #[command(flatten)]
    pub method: MethodArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Score with the Who&When reference scorer (substring matching; unparsed = wrong) instead of exact.
    #[arg(long)]
    pub compat_substring: bool,
    /// Evaluate only the first N cases (by id) of the evaluated side.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Only cases whose id starts with this (e.g. `Hand-Crafted/`).
    #[arg(long)]
    pub subset: Option<String>,
}

impl CaseArgs {
    /// The options of an evaluation of these cases with `seed` and `tolerances` (no split,
    /// predictions or refinement export: `eval locate` sets its own).
    pub fn options(&self, seed: u64, tolerances: &[usize]) -> anyhow::Result<EvalLocateOptions> {
        Ok(EvalLocateOptions {
            dataset: self.dataset.clone(),
            locate: self.method.options(),
            model: self.llm.model()?,
            llm: self.llm.options()?,
            scorer: Scorer::from_compat(self.compat_substring),
            split: None,
            seed,
            predictions: None,
            limit: self.limit,
            subset: self.subset.clone(),
            tolerances: tolerances.to_vec(),
            export_refinement: None,
        })
    }
}
