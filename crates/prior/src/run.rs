//! The prior as a library path: train (cross-validation protocols, then the final model), evaluate a
//! fixed model, rank candidates. Typed options in, typed reports out; front ends only print them.
//!
//! The evaluation report (`maslens prior train --report FILE`, `--json`) is owned here:
//! [`EvalReport`], versioned by [`REPORT_FORMAT_VERSION`], with a text rendering ([`render_text`]).

use crate::eval::{
    is_labelled, leave_group_out_selected, model_prediction, nested_out_of_fold, protocol_settings,
    report, scored_pairs, select, with_injected_choice, EvalConfig, Prediction, Selection, Setting,
};
use crate::model::{Candidate, Objective, PairRule, PriorModel, TrainConfig};
use crate::probs::ProbsLine;
use crate::PriorError;
use maslens_eval::metrics::Accuracy;
use maslens_eval::report::LocateReport;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the evaluation report this build writes.
/// 1: first; 2: `pair` (agent and step both right) renamed `joint`, the name the locate report uses
/// (its `pair_accuracy` is Aegis's agent + error mode), and every metric scored by
/// `maslens_eval::run::evaluate_now`; 3: the frozen protocol: nested cross-validation grouped by
/// task question (protocol `nested-cvKxI-grouped`, methods `prior/nested` and
/// `prior/leave-group-out` with the selection inside), and `selection` (the candidates' inner-CV
/// hits on all traces, which chose the trained model); 4: `in_sample` (a fixed model evaluated on
/// traces it was trained on says so); 5: each method's scores are the report of `maslens eval
/// locate` ([`LocateReport`]: groups in its `subsets`, the trivial baselines in its `baselines`),
/// no longer a table of its own (`groups` of agent/step/joint/tolerance) with the baselines as
/// methods.
pub const REPORT_FORMAT_VERSION: u32 = 5;

/// Errors of a prior run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no trace with a decisive label (labels.decisive) among {0} traces read")]
    NoDecisiveLabel(usize),
    #[error("no labelled trace (labels.decisive or labels.faulty_agents) among {0} traces read")]
    NoLabel(usize),
    #[error(transparent)]
    Prior(#[from] PriorError),
}

/// One evaluation protocol's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Protocol {
    pub protocol: String,
    pub description: String,
    /// Each method's report, in the format of `maslens eval locate` (one format for every
    /// localizer's scores), built by [`crate::eval::report`]: the trivial baselines are inside
    /// each (scored on the same cases), and the groups are its `subsets`.
    pub methods: Vec<LocateReport>,
}

/// The evaluation report of `train` and `eval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    #[serde(default = "v1")]
    pub format_version: u32,
    pub traces: usize,
    pub labelled: usize,
    pub skipped: usize,
    pub seed: u64,
    pub bootstrap: usize,
    pub protocols: Vec<Protocol>,
    /// How the trained model's configuration was chosen (training reports only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// Set when the evaluated model was trained on some of these traces: the figures are then a
    /// fit to its training data, and this says so (set by the caller, which knows the model's
    /// training set: `maslens_core::prior::evaluate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_sample: Option<String>,
}

fn v1() -> u32 {
    1
}

impl EvalReport {
    fn new(
        traces: usize,
        labelled: usize,
        skipped: usize,
        ecfg: &EvalConfig,
        protocols: Vec<Protocol>,
    ) -> EvalReport {
        EvalReport {
            format_version: REPORT_FORMAT_VERSION,
            traces,
            labelled,
            skipped,
            seed: ecfg.seed,
            bootstrap: ecfg.bootstrap,
            protocols,
            selection: None,
            in_sample: None,
        }
    }
}

/// Options of [`train`].
#[derive(Debug, Clone, PartialEq)]
pub struct TrainOptions {
    /// Outer cross-validation folds (< 2: no cross-validation).
    pub folds: usize,
    /// Folds of the selection among candidates (inside each outer fold, and on all traces for
    /// the trained model).
    pub inner_folds: usize,
    /// Model training options (seed included: it also seeds the folds); the base of the
    /// candidates.
    pub train: TrainConfig,
    /// Configurations to choose among (empty: [`protocol_settings`] of `train`, each also
    /// without the fault-injected traces when there are some ([`with_injected_choice`]); one:
    /// that configuration, no selection).
    pub candidates: Vec<Setting>,
    /// Bootstrap resamples and seed of the metrics.
    pub eval: EvalConfig,
    /// Also compute the out-of-fold step distributions (the prior-probabilities file).
    pub oof_probs: bool,
    /// The inputs, as given, for the model's provenance note.
    pub inputs: Vec<String>,
}

/// What [`train`] produced.
#[derive(Debug, Clone)]
pub struct Trained {
    /// The final model, trained on every trace, with its provenance note.
    pub model: PriorModel,
    pub report: EvalReport,
    /// Out-of-fold step distributions (when asked for), for [`crate::probs::write`].
    pub oof_probs: Option<Vec<ProbsLine>>,
}

/// Parse an objective name (`pointwise`, `listwise`).
pub fn parse_objective(s: &str) -> Option<Objective> {
    match s {
        "pointwise" => Some(Objective::Pointwise),
        "listwise" => Some(Objective::Listwise),
        _ => None,
    }
}

/// Parse a pair rule name (`independent`, `agent-first`).
pub fn parse_pair_rule(s: &str) -> Option<PairRule> {
    match s {
        "independent" => Some(PairRule::Independent),
        "agent-first" => Some(PairRule::AgentFirst),
        _ => None,
    }
}

/// The command line that reproduces a training run, stored in the model file, and the
/// configuration it chose.
pub fn model_note(opts: &TrainOptions, chosen: &Setting) -> String {
    let c = &chosen.cfg;
    let fixed = opts.candidates.len() == 1;
    let settings = if fixed {
        format!(
            " --alpha {} --agent-alpha {} --objective {}",
            c.alpha,
            c.agent_alpha.unwrap_or(c.alpha),
            match c.objective {
                Objective::Listwise => "listwise",
                Objective::Pointwise => "pointwise",
            },
        )
    } else {
        String::new()
    };
    format!(
        "maslens prior train {} --folds {} --inner-folds {}{settings} --pair-rule {} --seed {}{}; configuration: {}",
        opts.inputs.join(" "),
        opts.folds,
        opts.inner_folds,
        c.pair_rule.name(),
        c.seed,
        if c.agent_head { "" } else { " --no-agent-head" },
        chosen.name,
    )
}

/// The frozen protocol: nested cross-validation of the whole training procedure grouped by task
/// question (when `folds >= 2`), leave-one-group-out with the selection inside, then the
/// selection on every trace and the chosen configuration trained on all of them.
/// `skipped` is the number of unreadable records (reported, not used).
pub fn train(traces: &[&Trace], skipped: usize, opts: &TrainOptions) -> Result<Trained, RunError> {
    let labelled = crate::eval::sides(traces).0.len();
    if labelled == 0 {
        return Err(RunError::NoDecisiveLabel(traces.len()));
    }
    let injected = traces.iter().filter(|t| t.is_injected()).count();
    let injected_note = if injected == 0 {
        String::new()
    } else {
        format!(
            "; {injected} fault-injected traces are offered to every training set and never \
             scored (docs/inject.md){}",
            if opts.candidates.is_empty() {
                ": each selection also weighs every candidate with them for the agent head only and without them"
            } else {
                ""
            }
        )
    };
    let (ecfg, k, inner) = (&opts.eval, opts.folds, opts.inner_folds.max(2));
    let seed = opts.train.seed;
    let candidates = if opts.candidates.is_empty() {
        with_injected_choice(traces, &protocol_settings(&opts.train))
    } else {
        opts.candidates.clone()
    };
    let mut protocols = Vec::new();
    let mut oof_probs = None;
    if k >= 2 {
        let nested = nested_out_of_fold(traces, k, inner, seed, &candidates, |m, t| {
            (
                model_prediction(m, t),
                opts.oof_probs.then(|| crate::probs::line(m, t)),
            )
        })?;
        let (preds, lines): (Vec<Prediction>, Vec<Option<ProbsLine>>) =
            nested.out.into_iter().unzip();
        if opts.oof_probs {
            oof_probs = Some(lines.into_iter().flatten().collect());
        }
        let rule = opts.train.pair_rule;
        let mut methods = vec![scored_pairs(
            report("prior/nested", traces, &preds, ecfg),
            rule.name(),
        )];
        let (lgo, lgo_chosen) = leave_group_out_selected(traces, inner, seed, &candidates)?;
        if !lgo.is_empty() {
            let lgo = report("prior/leave-group-out", traces, &lgo, ecfg);
            methods.push(scored_pairs(lgo, rule.name()));
        }
        let selection = if candidates.len() > 1 {
            format!(
                "each outer training set chooses among {} candidate configurations by grouped \
                 {inner}-fold CV (agent + step hits), chosen per outer fold: {}",
                candidates.len(),
                nested.chosen.join("; ")
            )
        } else {
            format!("one fixed configuration: {}", candidates[0].name)
        };
        let lgo_note = if lgo_chosen.is_empty() {
            String::new()
        } else {
            format!(
                "; leave-group-out = trained (with the same selection) on the other groups only, \
                 chosen: {}",
                lgo_chosen
                    .iter()
                    .map(|(g, c)| format!("{g} <- {c}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        protocols.push(Protocol {
            protocol: format!("nested-cv{k}x{inner}-grouped"),
            description: format!(
                "out-of-fold predictions of the whole training procedure; {k} outer folds \
                 grouped by task question (runs of one question never on both sides), seed \
                 {seed}; {selection}{lgo_note}{injected_note}"
            ),
            methods,
        });
    }
    let selection = select(traces, inner, seed, &candidates)?;
    let chosen = &candidates[selection.chosen];
    let mut model = PriorModel::train(traces, &chosen.cfg)?;
    if oof_probs.is_none() && opts.oof_probs {
        oof_probs = Some(crate::probs::out_of_fold(traces, k.max(2), &chosen.cfg)?);
    }
    let fit: Vec<Prediction> = traces.iter().map(|t| model_prediction(&model, t)).collect();
    protocols.push(Protocol {
        protocol: "training-fit".into(),
        description: "the final model on its own training traces (optimistic; for reference only)"
            .into(),
        methods: vec![scored_pairs(
            report("prior/training-fit", traces, &fit, ecfg),
            chosen.cfg.pair_rule.name(),
        )],
    });
    model.training.note = Some(model_note(opts, chosen));
    model.training.trace_sha256 = training_hashes(traces);
    let mut report = EvalReport::new(traces.len(), labelled, skipped, ecfg, protocols);
    if candidates.len() > 1 {
        report.selection = Some(selection);
    }
    Ok(Trained {
        model,
        report,
        oof_probs,
    })
}

/// The content hashes of the traces a model trains on (both [`crate::eval::sides`]: the scored
/// traces and the training-only ones), sorted and without repeats:
/// [`crate::model::TrainingInfo::trace_sha256`].
fn training_hashes(traces: &[&Trace]) -> Vec<String> {
    let (scored, training_only) = crate::eval::sides(traces);
    let mut hashes: Vec<String> = scored
        .into_iter()
        .chain(training_only)
        .map(maslens_eval::run::steps_sha256)
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    hashes
}

/// The built-in model's name in reports.
const BUILT_IN: &str = "built-in whowhen-v1";

/// Evaluate a fixed model on labelled traces, next to the baselines. `model_name` names it in the
/// protocol description (`None`: the built-in model).
pub fn evaluate(
    traces: &[&Trace],
    skipped: usize,
    model: &PriorModel,
    model_name: Option<&str>,
    ecfg: &EvalConfig,
) -> Result<EvalReport, RunError> {
    let labelled = traces.iter().filter(|t| is_labelled(t)).count();
    if labelled == 0 {
        return Err(RunError::NoLabel(traces.len()));
    }
    let preds: Vec<Prediction> = traces.iter().map(|t| model_prediction(model, t)).collect();
    let mut scored = scored_pairs(
        report("prior", traces, &preds, ecfg),
        model.pair_rule.name(),
    );
    scored.model = Some(model_name.unwrap_or(BUILT_IN).to_string());
    Ok(EvalReport::new(
        traces.len(),
        labelled,
        skipped,
        ecfg,
        vec![Protocol {
            protocol: "fixed-model".into(),
            description: format!(
                "model {} applied to every labelled trace (only meaningful on traces it was not trained on)",
                model_name.unwrap_or(BUILT_IN)
            ),
            methods: vec![scored],
        }],
    ))
}

/// An agent and its probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentProb {
    pub agent: String,
    pub prob: f64,
}

/// The ranked candidates of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    pub trace: String,
    pub steps: usize,
    pub agents: Vec<AgentProb>,
    pub candidates: Vec<Candidate>,
}

impl Ranked {
    /// The text `maslens prior rank` prints: the trace, its three likeliest agents, then one
    /// line per candidate step.
    pub fn text(&self) -> String {
        let agents: Vec<String> = (self.agents.iter().take(3))
            .map(|a| format!("{} {:.2}", a.agent, a.prob))
            .collect();
        let mut out = format!(
            "{} ({} steps)\n  agents: {}\n",
            self.trace,
            self.steps,
            agents.join(", ")
        );
        for c in &self.candidates {
            out.push_str(&format!(
                "  step {:>4}  {:30} p={:.3}  score={:+.2}\n",
                c.step, c.agent, c.prob, c.score
            ));
        }
        out
    }
}

/// The `top` most probable (agent, step) candidates of a trace, and its agent distribution.
pub fn rank(model: &PriorModel, trace: &Trace, top: usize) -> Ranked {
    let mut candidates = model.rank(trace);
    candidates.truncate(top);
    let agents = model
        .agent_distribution(trace)
        .into_iter()
        .map(|(agent, prob)| AgentProb { agent, prob })
        .collect();
    Ranked {
        trace: trace.id.clone(),
        steps: trace.steps.len(),
        agents,
        candidates,
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

fn cell(x: Option<&Accuracy>) -> String {
    x.map_or_else(
        || "-".to_string(),
        |x| {
            format!(
                "{} [{},{}] ({}/{})",
                pct(x.value),
                pct(x.ci95[0]),
                pct(x.ci95[1]),
                x.k,
                x.n
            )
        },
    )
}

/// The last column: step within +-k for each k (in order of k), then joint.
fn tolerance_cell(tolerance: &BTreeMap<String, Accuracy>, joint: Option<&Accuracy>) -> String {
    let mut ks: Vec<(usize, &Accuracy)> = (tolerance.iter())
        .filter_map(|(k, a)| Some((k.parse().ok()?, a)))
        .collect();
    ks.sort_by_key(|(k, _)| *k);
    let mut parts: Vec<String> = (ks.iter())
        .map(|(k, a)| format!("+-{k}: {}", pct(a.value)))
        .collect();
    parts.extend(joint.map(|j| format!("joint: {}", pct(j.value))));
    parts.join("  ")
}

/// The table rows of one protocol: the baselines (from its first method's report: every method
/// of a protocol is scored on the same traces), then each method; each pooled (`all`), then per
/// group when there are several.
fn protocol_rows(p: &Protocol) -> Vec<[String; 5]> {
    let mut rows = Vec::new();
    if let Some(first) = p.methods.first() {
        for (name, b) in &first.baselines {
            let method = format!("baseline/{name}");
            let (agent, step) = (b.agent_accuracy.as_ref(), b.step_accuracy.as_ref());
            rows.push([
                method.clone(),
                "all".into(),
                cell(agent),
                cell(step),
                String::new(),
            ]);
            for (g, sub) in &first.subsets {
                let Some(b) = sub.baselines.get(name) else {
                    continue;
                };
                let (agent, step) = (b.agent_accuracy.as_ref(), b.step_accuracy.as_ref());
                rows.push([
                    method.clone(),
                    g.clone(),
                    cell(agent),
                    cell(step),
                    String::new(),
                ]);
            }
        }
    }
    for m in &p.methods {
        rows.push([
            m.method.clone(),
            "all".into(),
            cell(m.agent_accuracy.as_ref()),
            cell(m.step_accuracy.as_ref()),
            tolerance_cell(&m.tolerance, m.joint_accuracy.as_ref()),
        ]);
        for (g, sub) in &m.subsets {
            rows.push([
                m.method.clone(),
                g.clone(),
                cell(sub.agent_accuracy.as_ref()),
                cell(sub.step_accuracy.as_ref()),
                tolerance_cell(&sub.tolerance, sub.joint_accuracy.as_ref()),
            ]);
        }
    }
    rows
}

/// Which (agent, step) pairs a protocol's methods were scored on (their reports'
/// `config.pair_rule`), as a line under its heading; `None` when no method says.
fn pair_rules_line(p: &Protocol) -> Option<String> {
    let rules: Vec<String> = (p.methods.iter())
        .filter_map(|m| {
            Some(format!(
                "{} {}",
                m.method,
                m.config.get("pair_rule")?.as_str()?
            ))
        })
        .collect();
    (!rules.is_empty()).then(|| {
        format!(
            "pairs scored: {} (independent: agent and step each from its own head, the agent need not \
             act at the step; `maslens locate` and `eval locate` score the coherent pair by default)\n",
            rules.join(", ")
        )
    })
}

/// The report as text: a heading per protocol and a table of method x group.
pub fn render_text(out: &EvalReport) -> String {
    use comfy_table::{presets, CellAlignment, Table};
    let mut s = format!(
        "{} traces ({} labelled, {} skipped); 95% bootstrap intervals, {} resamples, seed {}\n",
        out.traces, out.labelled, out.skipped, out.bootstrap, out.seed
    );
    if let Some(note) = &out.in_sample {
        s.push_str(&format!("IN-SAMPLE: {note}\n"));
    }
    for p in &out.protocols {
        s.push_str(&format!("\n## {}: {}\n", p.protocol, p.description));
        if let Some(line) = pair_rules_line(p) {
            s.push_str(&line);
        }
        let mut table = Table::new();
        table.load_preset(presets::NOTHING).set_header(vec![
            "method",
            "group",
            "agent % [95% CI] (k/n)",
            "step % [95% CI] (k/n)",
            "step within +-k",
        ]);
        for row in protocol_rows(p) {
            table.add_row(row.to_vec());
        }
        for i in [2, 3] {
            if let Some(c) = table.column_mut(i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        for line in table.to_string().lines() {
            s.push_str(line.trim_end());
            s.push('\n');
        }
    }
    if let Some(sel) = &out.selection {
        s.push_str(&format!(
            "\n## selection: the trained model's configuration, chosen by grouped CV on every trace \
             (agent + step hits)\nchosen: {}\n",
            sel.name
        ));
        for sc in &sel.scores {
            s.push_str(&format!(
                "  {:<32} agent {:>3}/{}  step {:>3}/{}{}\n",
                sc.name,
                sc.agent_hits,
                sc.n,
                sc.step_hits,
                sc.n,
                if sc.name == sel.name {
                    "  <- chosen"
                } else {
                    ""
                }
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::synthetic_corpus;

    fn opts(folds: usize) -> TrainOptions {
        TrainOptions {
            folds,
            inner_folds: 3,
            train: TrainConfig {
                alpha: 1.0,
                ..TrainConfig::default()
            },
            candidates: vec![
                Setting::new(
                    "all",
                    TrainConfig {
                        alpha: 1.0,
                        ..TrainConfig::default()
                    },
                ),
                Setting::new(
                    "all",
                    TrainConfig {
                        alpha: 1.0,
                        agent_alpha: Some(5.0),
                        ..TrainConfig::default()
                    },
                ),
            ],
            eval: EvalConfig {
                bootstrap: 50,
                ..EvalConfig::default()
            },
            oof_probs: true,
            inputs: vec!["data/x".into()],
        }
    }

    #[test]
    fn train_reports_protocols_notes_and_oof_probs() {
        let mut data = synthetic_corpus(20, 3);
        for (i, t) in data.iter_mut().enumerate() {
            t.id = format!("{}/{i}", if i % 2 == 0 { "even" } else { "odd" });
        }
        let t = train(&data.iter().collect::<Vec<_>>(), 1, &opts(3)).unwrap();
        let names: Vec<&str> = t.report.protocols[0]
            .methods
            .iter()
            .map(|m| m.method.as_str())
            .collect();
        assert_eq!(names, ["prior/nested", "prior/leave-group-out"]);
        // each method's report is the eval report, the baselines and the groups inside
        let nested = &t.report.protocols[0].methods[0];
        assert_eq!(
            nested.format_version,
            maslens_eval::run::REPORT_FORMAT_VERSION
        );
        let baselines: Vec<&str> = nested.baselines.keys().map(String::as_str).collect();
        assert_eq!(
            baselines,
            ["error-keyword", "first-agent", "last-agent", "random"]
        );
        let groups: Vec<&str> = nested.subsets.keys().map(String::as_str).collect();
        assert_eq!(groups, ["even", "odd"]);
        assert_eq!(
            nested.subsets["odd"].tolerance.len(),
            2,
            "+-1 and +-3 per group"
        );
        // each report says which pairs it scored: the training configuration's pair rule
        let rules: Vec<&str> = (t.report.protocols.iter().flat_map(|p| &p.methods))
            .filter_map(|m| m.config["pair_rule"].as_str())
            .collect();
        assert_eq!(
            rules, ["independent"; 3],
            "nested, leave-group-out, training fit"
        );
        assert_eq!(t.report.protocols[0].protocol, "nested-cv3x3-grouped");
        let d = &t.report.protocols[0].description;
        assert!(d.contains("grouped by task question"), "{d}");
        assert!(
            d.contains("chooses among 2 candidate configurations"),
            "{d}"
        );
        assert!(d.contains("even <- all a=1"), "{d}");
        let sel = t.report.selection.as_ref().unwrap();
        assert_eq!(sel.scores.len(), 2);
        assert_eq!(sel.scores[0].n, 20);
        assert_eq!(t.report.protocols[1].protocol, "training-fit");
        assert_eq!(
            (t.report.skipped, t.report.format_version),
            (1, REPORT_FORMAT_VERSION)
        );
        assert_eq!(t.oof_probs.as_ref().map(Vec::len), Some(20));
        let note = t.model.training.note.clone().unwrap_or_default();
        assert!(
            note.starts_with("maslens prior train data/x --folds 3 --inner-folds 3 --pair-rule"),
            "{note}"
        );
        assert!(
            note.contains(&format!("configuration: {}", sel.name)),
            "{note}"
        );
        // the report round-trips, and renders with every method
        let json = serde_json::to_string(&t.report).unwrap();
        let back: EvalReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t.report);
        let text = render_text(&t.report);
        assert!(text.contains("## nested-cv3x3-grouped: out-of-fold"));
        assert!(text.contains("<- chosen"));
        assert!(text.contains("baseline/error-keyword"));
        assert!(text.contains("prior/nested"));
        assert!(text.contains("joint: "));
        assert!(
            text.contains(
                "pairs scored: prior/nested independent, prior/leave-group-out independent"
            ),
            "{text}"
        );
        assert!(text.contains("agent % [95% CI] (k/n)"));
    }

    #[test]
    fn unlabelled_inputs_are_errors_and_rank_truncates() {
        let plain = Trace::new("u");
        assert!(matches!(
            train(&[&plain], 0, &opts(0)),
            Err(RunError::NoDecisiveLabel(1))
        ));
        let model = crate::load_default().unwrap();
        assert!(matches!(
            evaluate(&[&plain], 0, &model, None, &EvalConfig::default()),
            Err(RunError::NoLabel(1))
        ));
        let data = synthetic_corpus(2, 4);
        let r = rank(&model, &data[0], 2);
        assert_eq!(r.candidates.len(), 2.min(data[0].steps.len()));
        assert_eq!(parse_pair_rule("agent-first"), Some(PairRule::AgentFirst));
        assert_eq!(parse_objective("listwise"), Some(Objective::Listwise));
        assert_eq!(parse_objective("x"), None);
    }
}
