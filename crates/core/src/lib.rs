//! maslens-core: maslens as a library. Every method over traces, with typed options, exactly as
//! the CLI calls it; the server and the Python package call the same functions.
//!
//! - [`traces`]: read traces from files and directories (import errors kept, not printed);
//!   datasets of labelled cases.
//! - [`locate`]: failure localization with the LLM pipeline or the learned prior, as
//!   [`maslens_eval::run::Localizer`]s.
//! - [`localize`]: `maslens locate` over the chosen method (stacked, llm, prior) as one call, with
//!   verdicts that render themselves as JSON, labels and text.
//! - [`eval_locate`]: `maslens eval locate` as one function: dataset -> localizer -> scorer ->
//!   versioned report.
//! - [`improve`]: the improvement loop's steps (credit from located failures, the prompt
//!   rewrite, the black-box baseline, held-out acceptance, the report); the loop runs in Python.
//! - [`modes`]: failure modes across runs: failed runs grouped per system by responsible agent,
//!   implicit-failure type and reason text (no model needed), with purity against gold agents.
//! - [`credit`]: `maslens credit` over a corpus (role x segment credit): bounded concurrency,
//!   progress, per-trace failures, the credit file.
//! - [`scan`]: `maslens scan` over a corpus (implicit failures, MASIF): progress, per-trace
//!   failures, a budget stop, the scan file.
//! - [`optimize`]: `maslens optimize`: the options, the split, the sweep of settings (one
//!   credit-guided prompt optimization experiment each), the output folder.
//! - [`inject`]: `maslens inject`: fault injection into a debate's successful runs, the labelled
//!   failure traces and the summary it writes.
//! - [`prior`]: `maslens prior train/eval/rank`: the selection protocol or a fixed
//!   configuration, the model to apply, the in-sample note of an evaluation.
//! - [`implicit`]: the implicit-failure commands after a scan: `select` (best-of-N), `repair`,
//!   `replay-stats`, `advantages` (IF-GRPO).
//! - [`refinement`]: AgentLocate's fine-tuning loop: the refinement export (data, manifest,
//!   training, serving and evaluation scripts) and the checks of a fine-tuned Judge's evaluation.
//!
//! This crate joins method crates (locate and prior) and nothing joins it but front ends
//! (cli, server, python). It never prints: progress goes through [`maslens_eval::run::Progress`].

pub mod credit;
pub mod eval_compare;
pub mod eval_locate;
pub mod implicit;
pub mod improve;
pub mod in_sample;
pub mod inject;
pub mod localize;
pub mod locate;
pub mod modes;
pub mod optimize;
pub mod prior;
pub mod refinement;
pub mod scan;
pub mod stack;
pub mod traces;

/// `git rev-parse HEAD` of this build, when built from a checkout.
pub const GIT_REVISION: Option<&str> = option_env!("MASLENS_GIT_REV");

/// The maslens version and, when built from a checkout, its git revision: what a verdict and a
/// stored diagnosis record as `revision`.
pub fn revision() -> String {
    match GIT_REVISION {
        Some(rev) => format!("maslens {} ({rev})", env!("CARGO_PKG_VERSION")),
        None => format!("maslens {}", env!("CARGO_PKG_VERSION")),
    }
}

/// Errors that stop a library call (per-record problems are returned beside the results).
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error(transparent)]
    Llm(#[from] maslens_llm::LlmError),
    #[error(transparent)]
    Prior(#[from] maslens_prior::PriorError),
    #[error(transparent)]
    PriorRun(#[from] maslens_prior::run::RunError),
    #[error(transparent)]
    Credit(#[from] maslens_credit::CreditError),
    /// A compiled-in prompt template failed to render (a bug of ours).
    #[error(transparent)]
    Prompt(#[from] maslens_llm::prompt::PromptError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Options that do not fit together, or an input with nothing to work on.
    #[error("{0}")]
    Invalid(String),
    /// What the call names (a failure mode, a run) does not exist.
    #[error("{0}")]
    NotFound(String),
}

impl CoreError {
    /// The error of an I/O operation on `what` (e.g. `writing out/summary.json`), for `map_err`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CoreError {
        let what = what.into();
        move |source| CoreError::Io { what, source }
    }
}
