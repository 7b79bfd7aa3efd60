//! Evaluation as a library path, in inspect_ai's shape: **dataset** (traces with gold labels) ->
//! **localizer** (the LLM pipeline, the prior, a baseline, external predictions: anything that
//! implements [`Localizer`]) -> **scorer** ([`Scorer`]: exact or the Who&When compat scorer) ->
//! a typed, versioned **report** ([`LocateReport`]). `maslens eval locate`, `maslens prior eval`,
//! the server and the Python package call [`evaluate`]; nothing else decides what a case scored.
//!
//! The baselines of [`crate::baselines`] are scored on exactly the cases the localizer was scored
//! on (a run stopped early by a budget covers fewer cases, and so do its baselines), next to any
//! extra baseline localizers the caller passes (the learned prior, for instance).

use crate::baselines;
use crate::metrics::{Case, CaseUsage, Gold, Prediction, Scorer};
use crate::report::{build, LocateReport, ReportOptions, SplitInfo};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::future::Future;

/// Version of the report JSON ([`LocateReport::format_version`]). 1: reports before the field
/// existed; 2: provenance (maslens version, git revision, dataset hashes, prompt hashes), typed
/// `stopped_early`; 3: `joint_accuracy` (agent and step both right); 4:
/// `deviation_histogram_paper` and `by_length_paper` (AgentLocate's fixed intervals and ranges);
/// 5: `joint_accuracy` and `tolerance` per subset (the prior's reports are these reports since).
pub const REPORT_FORMAT_VERSION: u32 = 5;

/// A trace with its gold label.
#[derive(Debug, Clone)]
pub struct LabelledCase {
    pub trace: Trace,
    pub gold: Gold,
}

/// What was evaluated: the dataset spec and hashes that identify it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    /// As given (`whowhen:DIR`, `aegis:FILE`, a path, `store:...`).
    pub spec: String,
    /// Cases scored.
    pub cases: usize,
    /// SHA-256 of the sorted case ids, one per line.
    pub ids_sha256: String,
    /// SHA-256 of the cases' traces as canonical JSON, in id order.
    pub content_sha256: String,
}

impl DatasetInfo {
    /// Identify `cases` (in any order).
    pub fn of(spec: &str, cases: &[&Trace]) -> DatasetInfo {
        let mut sorted: Vec<&Trace> = cases.to_vec();
        sorted.sort_by(|a, b| a.id.cmp(&b.id));
        let mut ids = Sha256::new();
        let mut content = Sha256::new();
        for t in &sorted {
            ids.update(t.id.as_bytes());
            ids.update(b"\n");
            // A trace always serializes; a failure would only make the hash weaker, not wrong.
            content.update(serde_json::to_vec(t).unwrap_or_default());
            content.update(b"\n");
        }
        DatasetInfo {
            spec: spec.to_string(),
            cases: sorted.len(),
            ids_sha256: hex(&ids.finalize()),
            content_sha256: hex(&content.finalize()),
        }
    }
}

/// SHA-256 of a trace's steps (each step's agent and content, in order): the same for the same
/// trace read from another path, under another id or from another file format, so a model's
/// training set can be recognised by content ([`LocateReport::in_sample`]).
pub fn steps_sha256(t: &Trace) -> String {
    let mut h = Sha256::new();
    for s in &t.steps {
        h.update(s.agent.as_bytes());
        h.update([0x1f]);
        h.update(s.content.as_bytes());
        h.update([0x1e]);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A prompt a localizer used: its versioned id and the SHA-256 of its template text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptRef {
    pub id: String,
    pub sha256: String,
}

impl PromptRef {
    /// Reference a template by id and source text.
    pub fn new(id: &str, source: &str) -> PromptRef {
        PromptRef {
            id: id.to_string(),
            sha256: hex(&Sha256::digest(source.as_bytes())),
        }
    }
}

/// Where a report came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub maslens_version: String,
    /// `git rev-parse HEAD` of the build, when it was built from a checkout.
    pub git_revision: Option<String>,
    pub dataset: DatasetInfo,
    pub prompts: Vec<PromptRef>,
}

/// One localizer's answer for one trace.
#[derive(Debug, Clone, Default)]
pub struct Localized {
    pub prediction: Prediction,
    pub usage: CaseUsage,
    /// The method's full verdict (written to `verdicts.jsonl`), when it has one.
    pub verdict: Option<serde_json::Value>,
}

/// The error behind a [`LocalizeError`], with its source chain; shared, so that a run loop can
/// remember why it stopped.
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// Why a localizer gave no answer for a trace. Both kinds keep the error that caused them
/// (a [`maslens_llm::LlmError`] and its source, or a message).
#[derive(Debug, Clone, thiserror::Error)]
pub enum LocalizeError {
    /// This case failed (counted as unparsed, i.e. wrong, and listed); the run goes on.
    #[error(transparent)]
    Case(Cause),
    /// The run must stop here (a budget ran out); the report covers the cases run so far.
    #[error(transparent)]
    Stop(Cause),
}

impl LocalizeError {
    /// A failed case, from an error (its chain kept) or a message.
    pub fn case(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> LocalizeError {
        LocalizeError::Case(Cause::from(e.into()))
    }

    /// A stop, from an error (its chain kept) or a message.
    pub fn stop(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> LocalizeError {
        LocalizeError::Stop(Cause::from(e.into()))
    }

    /// The LLM error somewhere in the chain, when there is one: a caller tells a spent budget
    /// ([`maslens_llm::LlmError::Budget`]) from other failures by its type, not its text.
    pub fn llm_error(&self) -> Option<&maslens_llm::LlmError> {
        let (LocalizeError::Case(c) | LocalizeError::Stop(c)) = self;
        let mut e: Option<&(dyn std::error::Error + 'static)> = Some(c.as_ref());
        while let Some(x) = e {
            if let Some(l) = x.downcast_ref::<maslens_llm::LlmError>() {
                return Some(l);
            }
            e = x.source();
        }
        None
    }

    /// Whether the case was deferred to a batch file (export mode): its calls were written
    /// there instead of being sent ([`maslens_llm::LlmError::Deferred`] in the chain).
    pub fn is_deferred(&self) -> bool {
        matches!(
            self.llm_error(),
            Some(maslens_llm::LlmError::Deferred { .. })
        )
    }
}

/// Anything that answers "which agent, which step" for a trace.
#[async_trait::async_trait]
pub trait Localizer: Send + Sync {
    /// Method label for reports, e.g. `locate/all-at-once+3eval`, `prior`, `predictions:FILE`.
    fn method(&self) -> String;
    /// The model it calls, when any.
    fn model(&self) -> Option<String> {
        None
    }
    /// The prompts it sends, when any.
    fn prompts(&self) -> Vec<PromptRef> {
        Vec::new()
    }
    async fn localize(&self, trace: &Trace) -> Result<Localized, LocalizeError>;
}

/// Progress of a run over traces, the one progress interface of every method (eval, locate,
/// scan, credit): a terminal bar, a Python callback, server-sent events, or nothing.
///
/// For each case, in the order the run finishes them: `case(id)`, then at most one of `error`,
/// `deferred` or `stopped`, then `case_done()` (a stopped case is not done: the run ends after
/// `stopped`), then optionally `summary`. `start` comes first and `finish` last.
pub trait Progress: Send + Sync {
    fn start(&self, _cases: usize) {}
    fn case(&self, _id: &str) {}
    fn case_done(&self) {}
    /// One line about a finished case for a person (a scan's counts, risk and time).
    fn summary(&self, _id: &str, _line: &str) {}
    /// A case failed; the run goes on.
    fn error(&self, _id: &str, _message: &str) {}
    /// A case's calls were written to a batch file (export mode) instead of being sent: not a
    /// failure, the case is answered by a rerun after `maslens batch import`.
    fn deferred(&self, _id: &str) {}
    /// A budget ran out at this case: the run stops here and keeps what it has.
    fn stopped(&self, _id: &str, _why: &str) {}
    fn finish(&self) {}
}

/// No progress reporting.
pub struct Silent;
impl Progress for Silent {}

/// How a run is scored and labelled.
pub struct EvalSpec<'a> {
    pub title: String,
    pub dataset: String,
    pub scorer: Scorer,
    /// Seed of the random baseline and the bootstrap intervals.
    pub seed: u64,
    /// Bootstrap resamples of the intervals ([`crate::metrics::RESAMPLES`] by default).
    pub resamples: usize,
    pub tolerances: Vec<usize>,
    pub top_mislocalized: usize,
    pub split: Option<SplitInfo>,
    /// The localizer's typed configuration, serialized (protocol, variant, flags).
    pub config: serde_json::Value,
    /// Length of a trace in tokens, as the method renders it (for the length quartiles).
    pub trace_tokens: &'a (dyn Fn(&Trace) -> usize + Sync),
    /// `git rev-parse HEAD` of the build, when known.
    pub git_revision: Option<&'a str>,
}

/// A finished run: the report and the localizer's verdicts, in case order.
#[derive(Debug, Clone)]
pub struct EvalRun {
    pub report: LocateReport,
    pub verdicts: Vec<serde_json::Value>,
}

fn case_of(c: &LabelledCase, pred: Prediction, usage: CaseUsage, spec: &EvalSpec<'_>) -> Case {
    Case {
        id: c.trace.id.clone(),
        subset: c.trace.group(),
        gold: c.gold.clone(),
        pred,
        trace_tokens: (spec.trace_tokens)(&c.trace),
        usage,
    }
}

fn abstained() -> Prediction {
    Prediction {
        abstained: true,
        ..Default::default()
    }
}

/// Run `localizer` over `cases`, score it and the baselines on the same cases, and build the
/// report. Extra baselines (name, localizer) are scored next to the built-in ones; their
/// failures count as abstentions.
pub async fn evaluate(
    cases: &[LabelledCase],
    localizer: &dyn Localizer,
    extra_baselines: &[(&str, &dyn Localizer)],
    spec: &EvalSpec<'_>,
    progress: &dyn Progress,
) -> EvalRun {
    let mut scored: Vec<Case> = Vec::new();
    let mut verdicts = Vec::new();
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut stopped_early = None;
    progress.start(cases.len());
    for c in cases {
        progress.case(&c.trace.id);
        match localizer.localize(&c.trace).await {
            Ok(l) => {
                scored.push(case_of(c, l.prediction, l.usage, spec));
                verdicts.extend(l.verdict);
            }
            Err(LocalizeError::Stop(e)) => {
                let msg = e.to_string();
                progress.stopped(&c.trace.id, &msg);
                stopped_early = Some(msg);
                break;
            }
            Err(e @ LocalizeError::Case(_)) => {
                let msg = e.to_string();
                match e.is_deferred() {
                    true => progress.deferred(&c.trace.id),
                    false => progress.error(&c.trace.id, &msg),
                }
                scored.push(case_of(c, abstained(), CaseUsage::default(), spec));
                errors.push((c.trace.id.clone(), msg));
            }
        }
        progress.case_done();
    }
    progress.finish();

    // Baselines on exactly the cases scored.
    let ids: HashSet<&str> = scored.iter().map(|c| c.id.as_str()).collect();
    let same: Vec<&LabelledCase> = cases
        .iter()
        .filter(|c| ids.contains(c.trace.id.as_str()))
        .collect();
    let mut baseline_cases: Vec<(String, Vec<Case>)> = baselines::NAMES
        .iter()
        .map(|&name| {
            let bc = same
                .iter()
                .map(|c| {
                    let pred = baselines::prediction(baselines::run(name, &c.trace, spec.seed));
                    case_of(c, pred, CaseUsage::default(), spec)
                })
                .collect();
            (name.to_string(), bc)
        })
        .collect();
    for (name, b) in extra_baselines {
        let mut bc = Vec::new();
        for c in &same {
            let pred = b
                .localize(&c.trace)
                .await
                .map(|l| l.prediction)
                .unwrap_or_else(|_| abstained());
            bc.push(case_of(c, pred, CaseUsage::default(), spec));
        }
        baseline_cases.push((name.to_string(), bc));
    }

    let opts = ReportOptions {
        title: spec.title.clone(),
        method: localizer.method(),
        model: localizer.model(),
        dataset: spec.dataset.clone(),
        scorer: spec.scorer,
        seed: spec.seed,
        tolerances: spec.tolerances.clone(),
        top_mislocalized: spec.top_mislocalized,
        resamples: spec.resamples,
    };
    let mut report = build(&scored, &baseline_cases, errors, &opts);
    report.split = spec.split.clone();
    report.config = spec.config.clone();
    report.stopped_early = stopped_early;
    let chances: Vec<f64> = same
        .iter()
        .filter_map(|c| baselines::random_agent_chance(&c.trace, &c.gold))
        .collect();
    report.random_chance =
        (!chances.is_empty()).then(|| chances.iter().sum::<f64>() / chances.len() as f64);
    let traces: Vec<&Trace> = same.iter().map(|c| &c.trace).collect();
    report.provenance = Provenance {
        maslens_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: spec.git_revision.map(String::from),
        dataset: DatasetInfo::of(&spec.dataset, &traces),
        prompts: localizer.prompts(),
    };
    EvalRun { report, verdicts }
}

/// [`evaluate`] for localizers that answer without waiting (a predictions table, the prior):
/// the same run, scoring and report, driven to completion on the calling thread.
pub fn evaluate_now(
    cases: &[LabelledCase],
    localizer: &dyn Localizer,
    extra_baselines: &[(&str, &dyn Localizer)],
    spec: &EvalSpec<'_>,
) -> EvalRun {
    let fut = evaluate(cases, localizer, extra_baselines, spec, &Silent);
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(run) = fut.as_mut().poll(&mut cx) {
            return run;
        }
        // A localizer that does wait is still driven to completion, just not efficiently.
        std::thread::yield_now();
    }
}

/// Sort labelled cases by id and drop repeated ids; returns the repeated ids (each once per
/// extra copy) so the caller can report them instead of losing them silently.
pub fn dedup_by_id(cases: &mut Vec<LabelledCase>) -> Vec<String> {
    cases.sort_by(|a, b| a.trace.id.cmp(&b.trace.id));
    let mut dups = Vec::new();
    let mut seen: BTreeMap<String, ()> = BTreeMap::new();
    cases.retain(|c| {
        if seen.insert(c.trace.id.clone(), ()).is_some() {
            dups.push(c.trace.id.clone());
            false
        } else {
            true
        }
    });
    dups
}

/// Split labelled cases into (refinement/train side, evaluated side) with
/// [`crate::metrics::split_ids`] (stratified by group, seeded order).
pub fn split(
    cases: Vec<LabelledCase>,
    fraction: f64,
    seed: u64,
) -> (Vec<LabelledCase>, Vec<LabelledCase>, SplitInfo) {
    let ids: Vec<(String, Option<String>)> = cases
        .iter()
        .map(|c| (c.trace.id.clone(), c.trace.group()))
        .collect();
    let (train_ids, _) = crate::metrics::split_ids(&ids, fraction, seed);
    let (train, test): (Vec<LabelledCase>, Vec<LabelledCase>) = cases
        .into_iter()
        .partition(|c| train_ids.binary_search(&c.trace.id).is_ok());
    let info = SplitInfo {
        fraction,
        seed,
        train: train.len(),
        test: test.len(),
    };
    (train, test, info)
}

/// A localizer that answers from a fixed table of predictions (external predictions files):
/// a trace without a prediction is an abstention.
pub struct Table {
    pub label: String,
    pub predictions: std::collections::HashMap<String, Prediction>,
}

#[async_trait::async_trait]
impl Localizer for Table {
    fn method(&self) -> String {
        self.label.clone()
    }
    async fn localize(&self, trace: &Trace) -> Result<Localized, LocalizeError> {
        Ok(Localized {
            prediction: self
                .predictions
                .get(&trace.id)
                .cloned()
                .unwrap_or_else(abstained),
            ..Default::default()
        })
    }
}

/// Write a run into `dir`: `report.json`, `report.md`, `report.html` and `verdicts.jsonl`, each
/// written to a temporary file beside it and renamed, so an interrupted write never leaves a
/// truncated report under the final name.
pub fn write_run(run: &EvalRun, dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(&run.report).map_err(std::io::Error::other)?;
    write_atomic(dir.join("report.json"), json.as_bytes())?;
    write_atomic(
        dir.join("report.md"),
        crate::markdown::render(&run.report).as_bytes(),
    )?;
    write_atomic(
        dir.join("report.html"),
        crate::html::render(&run.report).as_bytes(),
    )?;
    let mut lines = String::new();
    for v in &run.verdicts {
        lines.push_str(&v.to_string());
        lines.push('\n');
    }
    write_atomic(dir.join("verdicts.jsonl"), lines.as_bytes())
}

pub use crate::atomic::write_atomic;

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::TraceBuilder;

    fn labelled(id: &str, gold: (&str, usize)) -> LabelledCase {
        let t = TraceBuilder::new(id)
            .steps(&["human", "Planner", "Coder", "Coder"])
            .decisive(gold.0, gold.1)
            .build();
        let gold = t.gold().unwrap();
        LabelledCase { trace: t, gold }
    }

    /// Answers `Coder` at step 2, fails on `*/bad`, stops on `*/stop`.
    struct Scripted;
    #[test]
    fn a_stop_keeps_the_llm_error_it_came_from() {
        #[derive(Debug, thiserror::Error)]
        #[error("trace t: {source}")]
        struct Wrapped {
            #[source]
            source: maslens_llm::LlmError,
        }
        let budget = maslens_llm::LlmError::Budget("max calls 3".into());
        let e = LocalizeError::stop(Wrapped { source: budget });
        // Told apart by type, not text; the chain is kept for `{:#}`.
        assert!(matches!(
            e.llm_error(),
            Some(maslens_llm::LlmError::Budget(_))
        ));
        assert_eq!(e.to_string(), "trace t: budget exhausted: max calls 3");
        assert!(std::error::Error::source(&e).is_some());
        assert!(LocalizeError::case("no steps").llm_error().is_none());
    }

    #[async_trait::async_trait]
    impl Localizer for Scripted {
        fn method(&self) -> String {
            "scripted".into()
        }
        async fn localize(&self, trace: &Trace) -> Result<Localized, LocalizeError> {
            if trace.id.ends_with("/bad") {
                return Err(LocalizeError::case("boom"));
            }
            if trace.id.ends_with("/stop") {
                return Err(LocalizeError::stop(maslens_llm::LlmError::Budget(
                    "max calls".into(),
                )));
            }
            Ok(Localized {
                prediction: Prediction {
                    agent: Some("Coder".into()),
                    step: Some(2),
                    ..Default::default()
                },
                usage: CaseUsage {
                    calls: 2,
                    ..Default::default()
                },
                verdict: Some(serde_json::json!({"trace": trace.id})),
            })
        }
    }

    fn spec(tokens: &(dyn Fn(&Trace) -> usize + Sync)) -> EvalSpec<'_> {
        EvalSpec {
            title: "t".into(),
            dataset: "d".into(),
            scorer: Scorer::Exact,
            seed: 0,
            resamples: 100,
            tolerances: vec![0, 1],
            top_mislocalized: 3,
            split: None,
            config: serde_json::json!({"k": 1}),
            trace_tokens: tokens,
            git_revision: Some("abc"),
        }
    }

    #[test]
    fn evaluate_scores_errors_and_stops_with_baselines_on_the_same_cases() {
        let cases = vec![
            labelled("A/1", ("Coder", 2)),
            labelled("A/bad", ("Coder", 2)),
            labelled("B/1", ("Planner", 1)),
            labelled("B/stop", ("Coder", 3)),
            labelled("B/2", ("Coder", 3)),
        ];
        let tokens = |t: &Trace| t.steps.len();
        let run = evaluate_now(
            &cases,
            &Scripted,
            &[(
                "table",
                &Table {
                    label: "t".into(),
                    predictions: Default::default(),
                },
            )],
            &spec(&tokens),
        );
        let r = &run.report;
        assert_eq!(r.cases, 3, "stopped before B/stop: A/1, A/bad, B/1");
        assert_eq!(
            r.stopped_early.as_deref(),
            Some("budget exhausted: max calls")
        );
        assert_eq!(r.errors, vec![("A/bad".to_string(), "boom".to_string())]);
        assert_eq!(
            r.agent_accuracy.unwrap().k,
            1,
            "A/1 right, A/bad unparsed, B/1 wrong"
        );
        assert_eq!(r.abstentions, 1);
        assert_eq!(run.verdicts.len(), 2);
        for b in [
            "random",
            "first-agent",
            "last-agent",
            "error-keyword",
            "table",
        ] {
            assert_eq!(r.baselines[b].agent_accuracy.unwrap().n, 3, "{b}");
        }
        assert_eq!(r.baselines["table"].agent_accuracy.unwrap().k, 0);
        // first-agent: Planner at step 1 everywhere (the human is not acting).
        assert_eq!(r.baselines["first-agent"].step_accuracy.unwrap().k, 1);
        assert_eq!(r.format_version, REPORT_FORMAT_VERSION);
        assert_eq!(r.provenance.dataset.cases, 3);
        assert_eq!(r.provenance.dataset.ids_sha256.len(), 64);
        assert_eq!(r.config["k"], 1);
        assert_eq!(r.per_case[0].trace_tokens, 4);
        assert_eq!(r.subsets.len(), 2, "groups A and B");
        // A/1 (Coder@2) both right; A/bad unparsed; B/1 gold Planner@1, predicted Coder@2.
        assert_eq!(r.joint_accuracy.map(|a| (a.k, a.n)), Some((1, 3)));
    }

    #[test]
    fn dedup_reports_repeated_ids_and_split_is_stratified() {
        let mut cases = vec![
            labelled("A/2", ("Coder", 2)),
            labelled("A/1", ("Coder", 2)),
            labelled("A/2", ("Planner", 1)),
        ];
        assert_eq!(dedup_by_id(&mut cases), vec!["A/2".to_string()]);
        assert_eq!(cases.len(), 2);
        let many: Vec<LabelledCase> = (0..10)
            .flat_map(|i| {
                [
                    labelled(&format!("A/{i}"), ("Coder", 2)),
                    labelled(&format!("B/{i}"), ("Coder", 2)),
                ]
            })
            .collect();
        let (train, test, info) = split(many, 0.6, 3);
        assert_eq!(
            (train.len(), test.len(), info.train, info.test),
            (12, 8, 12, 8)
        );
        assert_eq!(
            train
                .iter()
                .filter(|c| c.trace.id.starts_with("A/"))
                .count(),
            6
        );
    }

    #[test]
    fn dataset_hash_ignores_order_and_sees_content() {
        let a = labelled("A/1", ("Coder", 2)).trace;
        let mut b = labelled("A/2", ("Coder", 2)).trace;
        let h1 = DatasetInfo::of("x", &[&a, &b]);
        assert_eq!(h1, DatasetInfo::of("x", &[&b, &a]));
        b.steps[0].content.push('!');
        let h2 = DatasetInfo::of("x", &[&a, &b]);
        assert_eq!(h1.ids_sha256, h2.ids_sha256);
        assert_ne!(h1.content_sha256, h2.content_sha256);
    }
}
