//! The `maslens optimize` experiment: for each seed, the unoptimized baseline, the black-box
//! baseline at the same call budget, and credit-guided BCD, all scored on the held-out split;
//! plus the data behind every report section (shift table, per-round and per-label tables,
//! credit heatmap, accuracy against iterations and against LLM calls).

use crate::config::{DebateConfig, PromptSet};
use crate::critic::{turn_eval, Subject};
use crate::data::Mcq;
use crate::debate::{accuracy, run_many, DebateRun, ModelSet};
use crate::optimize::{label_name, BcdResult, BlackBoxResult, Optimizer};
use crate::CreditError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Experiment switches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperimentOptions {
    pub seeds: Vec<u64>,
    /// Run the black-box baseline.
    pub black_box: bool,
    /// Score every iterate / black-box best-so-far on the test set for the curves.
    pub curves: bool,
    /// Run the final-answer critic on the test runs of the baseline and ours (tables 3-6).
    pub final_critic: bool,
}

impl Default for ExperimentOptions {
    fn default() -> Self {
        ExperimentOptions {
            seeds: vec![0],
            black_box: true,
            curves: true,
            final_critic: true,
        }
    }
}

/// Outcome shift of one method against the baseline on the same test questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shift {
    pub wrong_wrong: usize,
    pub right_wrong: usize,
    pub wrong_right: usize,
    pub right_right: usize,
}

impl Shift {
    pub fn between(before: &[DebateRun], after: &[DebateRun]) -> Shift {
        let mut s = Shift::default();
        for (b, a) in before.iter().zip(after) {
            match (b.correct, a.correct) {
                (false, false) => s.wrong_wrong += 1,
                (true, false) => s.right_wrong += 1,
                (false, true) => s.wrong_right += 1,
                (true, true) => s.right_right += 1,
            }
        }
        s
    }
    pub fn total(&self) -> usize {
        self.wrong_wrong + self.right_wrong + self.wrong_right + self.right_right
    }
    pub fn add(&mut self, o: &Shift) {
        self.wrong_wrong += o.wrong_wrong;
        self.right_wrong += o.right_wrong;
        self.wrong_right += o.wrong_right;
        self.right_right += o.right_right;
    }
}

/// The final-answer evaluation of one test question (tables 3-6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalEval {
    pub question_id: String,
    pub correct: bool,
    /// Round at which the debate ended (1-based).
    pub round: usize,
    /// Failure label (`NONE` for correct), `(unlabelled)` on a critic abstention, `(not evaluated)`
    /// without the final critic.
    pub label: String,
    pub score: Option<u8>,
}

/// One point of an accuracy curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Iteration (ours) or candidate index (black box); 0 = initial prompts.
    pub step: usize,
    /// Optimizer calls spent when this point was reached.
    pub calls: u64,
    pub opt_accuracy: f64,
    /// Held-out accuracy (None without curves).
    pub test_accuracy: Option<f64>,
}

/// Everything measured for one seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeedResult {
    pub seed: u64,
    pub baseline_accuracy: f64,
    pub blackbox_accuracy: Option<f64>,
    pub ours_accuracy: f64,
    pub bcd: BcdResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blackbox: Option<BlackBoxResult>,
    pub ours_curve: Vec<CurvePoint>,
    pub blackbox_curve: Vec<CurvePoint>,
    pub shift_ours: Shift,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shift_blackbox: Option<Shift>,
    pub baseline_final: Vec<FinalEval>,
    pub ours_final: Vec<FinalEval>,
    /// Calls spent on held-out evaluation (not part of any optimizer budget).
    pub evaluation_calls: u64,
    /// Test runs of the baseline and of ours (written as traces by the CLI).
    #[serde(skip)]
    pub test_runs: Vec<(String, Vec<DebateRun>)>,
}

/// Accuracy summary of one method over seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodSummary {
    pub method: String,
    pub accuracies: Vec<f64>,
    pub mean: f64,
    pub std: f64,
    /// Mean optimizer calls (None for the unoptimized baseline).
    pub calls: Option<f64>,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Experiment {
    pub name: String,
    pub model: String,
    pub dataset: String,
    pub n_optimization: usize,
    pub n_test: usize,
    pub config: DebateConfig,
    pub options: ExperimentOptions,
    pub prompt_versions: Vec<String>,
    pub summary: Vec<MethodSummary>,
    pub seeds: Vec<SeedResult>,
}

/// Mean and sample standard deviation (0 for fewer than two values).
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    if xs.len() < 2 {
        return (m, 0.0);
    }
    let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64;
    (m, v.sqrt())
}

struct TestEvaluator<'a> {
    models: ModelSet,
    cfg: &'a Arc<DebateConfig>,
    test: &'a [Mcq],
    seed: u64,
    cache: HashMap<PromptSet, Vec<DebateRun>>,
}

impl TestEvaluator<'_> {
    async fn runs(&mut self, p: &PromptSet) -> Result<Vec<DebateRun>, CreditError> {
        if let Some(r) = self.cache.get(p) {
            return Ok(r.clone());
        }
        let r = run_many(&self.models, self.cfg, p, self.test, self.seed).await?;
        self.cache.insert(p.clone(), r.clone());
        Ok(r)
    }
}

/// Final-answer critic over test runs.
async fn final_evals(
    models: &ModelSet,
    cfg: &DebateConfig,
    runs: &[DebateRun],
    critic: bool,
) -> Result<Vec<FinalEval>, CreditError> {
    let model = models.get(cfg.optimizer.model.as_deref())?;
    let mut out = Vec::with_capacity(runs.len());
    for r in runs {
        let text = r
            .final_text
            .clone()
            .or_else(|| r.states.last().map(|s| s.text.clone()))
            .unwrap_or_default();
        let (label, score) = if critic {
            let o = &cfg.optimizer;
            let e = turn_eval(
                model.as_ref(),
                Subject::Aggregator,
                &r.question,
                &text,
                r.correct,
                &o.critic_decoding,
                o.critic_repair,
                "critic/final",
            )
            .await?;
            (label_name(&e), Some(e.score))
        } else {
            (
                (if r.correct { "NONE" } else { "(not evaluated)" }).to_string(),
                None,
            )
        };
        out.push(FinalEval {
            question_id: r.question.id.clone(),
            correct: r.correct,
            round: r.rounds_run,
            label,
            score,
        });
    }
    Ok(out)
}

/// Run the experiment on an optimization / test split.
pub async fn run_experiment(
    models: &ModelSet,
    cfg: Arc<DebateConfig>,
    opt_set: &[Mcq],
    test_set: &[Mcq],
    dataset: &str,
    options: ExperimentOptions,
) -> Result<Experiment, CreditError> {
    let mut seeds = Vec::new();
    for &seed in &options.seeds {
        tracing::info!(seed, "experiment seed");
        let eval_meter = crate::debate::call_meter();
        let mut ev = TestEvaluator {
            models: models.metered(&eval_meter),
            cfg: &cfg,
            test: test_set,
            seed,
            cache: HashMap::new(),
        };
        let baseline_runs = ev.runs(&cfg.prompts()).await?;
        let baseline_accuracy = accuracy(&baseline_runs);

        let ours = Optimizer::new(models, cfg.clone(), seed)?;
        let bcd = ours.bcd(opt_set).await?;
        let ours_runs = ev.runs(&bcd.best).await?;
        let ours_accuracy = accuracy(&ours_runs);

        let mut ours_curve = Vec::new();
        for (k, (p, acc, calls)) in bcd.iterates.iter().enumerate() {
            let test_accuracy = if options.curves {
                Some(accuracy(&ev.runs(p).await?))
            } else {
                None
            };
            ours_curve.push(CurvePoint {
                step: k,
                calls: *calls,
                opt_accuracy: *acc,
                test_accuracy,
            });
        }

        let (blackbox, blackbox_accuracy, blackbox_curve, shift_blackbox) = if options.black_box {
            let bb_opt = Optimizer::new(models, cfg.clone(), seed)?;
            let bb = bb_opt.black_box(opt_set, bcd.calls).await?;
            let bb_runs = ev.runs(&bb.best).await?;
            let mut curve = Vec::new();
            let mut best: Option<(PromptSet, f64)> = None;
            for (k, (p, acc, calls)) in bb.candidates.iter().enumerate() {
                if best.as_ref().is_none_or(|(_, a)| acc > a) {
                    best = Some((p.clone(), *acc));
                }
                let (bp, bacc) = best.clone().unwrap_or((p.clone(), *acc));
                let test_accuracy = if options.curves {
                    Some(accuracy(&ev.runs(&bp).await?))
                } else {
                    None
                };
                curve.push(CurvePoint {
                    step: k,
                    calls: *calls,
                    opt_accuracy: bacc,
                    test_accuracy,
                });
            }
            let acc = accuracy(&bb_runs);
            let shift = Shift::between(&baseline_runs, &bb_runs);
            (Some(bb), Some(acc), curve, Some(shift))
        } else {
            (None, None, Vec::new(), None)
        };
        let baseline_final =
            final_evals(&ev.models, &cfg, &baseline_runs, options.final_critic).await?;
        let ours_final = final_evals(&ev.models, &cfg, &ours_runs, options.final_critic).await?;
        seeds.push(SeedResult {
            seed,
            baseline_accuracy,
            blackbox_accuracy,
            ours_accuracy,
            shift_ours: Shift::between(&baseline_runs, &ours_runs),
            bcd,
            blackbox,
            ours_curve,
            blackbox_curve,
            shift_blackbox,
            baseline_final,
            ours_final,
            evaluation_calls: eval_meter.total().answered(),
            test_runs: vec![
                ("baseline".into(), baseline_runs),
                ("ours".into(), ours_runs),
            ],
        });
    }
    let summary = summarize(&seeds);
    Ok(Experiment {
        name: cfg.name.clone(),
        model: models.default.id().to_string(),
        dataset: dataset.to_string(),
        n_optimization: opt_set.len(),
        n_test: test_set.len(),
        config: (*cfg).clone(),
        options,
        prompt_versions: crate::optimize::PROMPT_VERSIONS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        summary,
        seeds,
    })
}

fn summarize(seeds: &[SeedResult]) -> Vec<MethodSummary> {
    let mk = |method: &str, accs: Vec<f64>, calls: Option<Vec<f64>>| {
        let (mean, std) = mean_std(&accs);
        MethodSummary {
            method: method.into(),
            accuracies: accs,
            mean,
            std,
            calls: calls.map(|c| mean_std(&c).0),
        }
    };
    let mut out = vec![mk(
        "baseline",
        seeds.iter().map(|s| s.baseline_accuracy).collect(),
        None,
    )];
    let bb: Vec<f64> = seeds.iter().filter_map(|s| s.blackbox_accuracy).collect();
    if !bb.is_empty() {
        let calls = seeds
            .iter()
            .filter_map(|s| s.blackbox.as_ref().map(|b| b.calls as f64))
            .collect();
        out.push(mk("black-box", bb, Some(calls)));
    }
    out.push(mk(
        "ours",
        seeds.iter().map(|s| s.ours_accuracy).collect(),
        Some(seeds.iter().map(|s| s.bcd.calls as f64).collect()),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_std_and_shift() {
        let (m, s) = mean_std(&[0.5, 0.7]);
        assert!((m - 0.6).abs() < 1e-12 && (s - 0.1414213562).abs() < 1e-9);
        assert_eq!(mean_std(&[0.3]), (0.3, 0.0));
        let mk = |c: bool| DebateRun {
            question: Mcq {
                id: "q".into(),
                question: "q".into(),
                options: vec![],
                answer: 'A',
                subject: None,
            },
            utterances: vec![],
            states: vec![],
            final_text: None,
            final_answer: None,
            correct: c,
            rounds_run: 1,
            calls: 0,
            usage: Default::default(),
        };
        let before = vec![mk(true), mk(true), mk(false), mk(false)];
        let after = vec![mk(true), mk(false), mk(true), mk(false)];
        let s = Shift::between(&before, &after);
        assert_eq!(
            (s.right_right, s.right_wrong, s.wrong_right, s.wrong_wrong),
            (1, 1, 1, 1)
        );
        assert_eq!(s.total(), 4);
    }
}
