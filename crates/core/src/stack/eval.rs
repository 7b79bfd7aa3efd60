//! `maslens eval stack`: the nested protocol (stacked against the prior and the pipeline alone on the same folds), the fit of the weights, the verdicts file.

use super::*;
use crate::CoreError;
use maslens_locate::LocateVerdict;
use maslens_trace::Trace;
use serde::Serialize;
use std::path::Path;

/// Options of [`evaluate_and_fit`].
#[derive(Debug, Clone)]
pub struct StackFitOptions {
    /// Outer folds of the nested cross-validation (grouped by task question).
    pub folds: usize,
    /// Folds of every selection inside (the prior's configuration, and the out-of-fold prior
    /// views the weights are chosen on).
    pub inner_folds: usize,
    pub seed: u64,
    pub eval: maslens_prior::EvalConfig,
    /// The prior's candidate configurations (empty: the frozen protocol's,
    /// `maslens_prior::eval::protocol_settings`).
    pub settings: Vec<maslens_prior::eval::Setting>,
    /// The Judge model the verdicts came from (recorded in the weights).
    pub model: String,
    /// The command line, for the weights' note.
    pub command: String,
    /// Further fold seeds: the same nested protocol on other outer folds, pooled hits per seed
    /// ([`StackFitOutput::seeds`]), to see how much one split's differences are noise.
    pub repeat_seeds: Vec<u64>,
}

impl StackFitOptions {
    /// `maslens eval stack`'s options: `folds` outer folds, `inner_folds` inside each, `seed`
    /// for the folds, the bootstrap and the random baseline, the frozen protocol's candidates;
    /// the model is filled in from the verdicts.
    pub fn nested(folds: usize, inner_folds: usize, seed: u64, command: String) -> StackFitOptions {
        StackFitOptions {
            folds,
            inner_folds,
            seed,
            eval: maslens_prior::EvalConfig {
                seed,
                ..Default::default()
            },
            settings: Vec::new(),
            model: String::new(),
            command,
            repeat_seeds: Vec::new(),
        }
    }
}

/// What [`evaluate_and_fit`] measured and fit.
pub struct StackFitOutput {
    /// Nested cross-validation of {prior alone, LLM pipeline alone, stacked} on the same outer
    /// folds, next to the trivial baselines, per group and pooled, with 95% intervals.
    pub report: maslens_prior::run::EvalReport,
    /// The weights fit on every case (out-of-fold prior views), to ship or pass as `--stack`.
    pub weights: StackWeights,
    /// The weights each outer fold chose.
    pub chosen: Vec<StackWeights>,
    /// Pooled hits of the three methods per fold seed: the report's seed first, then
    /// [`StackFitOptions::repeat_seeds`].
    pub seeds: Vec<SeedHits>,
}

/// Pooled hits of {stacked, prior alone, pipeline alone} under one fold seed's nested protocol,
/// each `[agent, step]` of `cases`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedHits {
    pub seed: u64,
    pub cases: usize,
    pub stacked: [usize; 2],
    pub prior: [usize; 2],
    pub llm: [usize; 2],
}

impl SeedHits {
    fn of(seed: u64, protocol: &maslens_prior::run::Protocol) -> SeedHits {
        let hits = |name: &str| -> ([usize; 2], usize) {
            protocol
                .methods
                .iter()
                .find(|m| m.method == name)
                .map_or(([0, 0], 0), |m| {
                    let (agent, step) = (m.agent_accuracy.as_ref(), m.step_accuracy.as_ref());
                    let k = |a: Option<&maslens_eval::metrics::Accuracy>| a.map_or(0, |a| a.k);
                    ([k(agent), k(step)], agent.map_or(0, |a| a.n))
                })
        };
        let (stacked, cases) = hits(STACKED_METHOD);
        SeedHits {
            seed,
            cases,
            stacked,
            prior: hits(PRIOR_METHOD).0,
            llm: hits(LLM_METHOD).0,
        }
    }
}

pub(crate) fn view(m: &maslens_prior::PriorModel, t: &Trace) -> PriorView {
    PriorView {
        steps: m.step_distribution(t),
        agents: m.agent_distribution(t),
    }
}

pub(crate) fn describe_weights(w: &StackWeights) -> String {
    let l = |x: &LevelWeights| {
        format!(
            "judge {} evaluators {}{}",
            x.judge,
            x.evaluators,
            if x.drop_incoherent {
                " (incoherent ballots dropped)"
            } else {
                ""
            }
        )
    };
    format!("step: {}; agent: {}", l(&w.step), l(&w.agent))
}

/// Out-of-fold prior views of `labelled` under grouped `k`-fold cross-fitting with `cfg` (the
/// traces in `extra`, agent-level labels only, join every training set).
pub(crate) fn cross_fitted_views(
    labelled: &[&Trace],
    extra: &[&Trace],
    k: usize,
    seed: u64,
    cfg: &maslens_prior::TrainConfig,
    cache: &maslens_prior::model::RowCache,
) -> Result<Vec<PriorView>, CoreError> {
    let folds = maslens_prior::eval::fold_assignment(labelled, k, seed);
    let mut out: Vec<PriorView> = vec![PriorView::default(); labelled.len()];
    for fold in 0..k {
        if !folds.contains(&fold) {
            continue;
        }
        let train = maslens_prior::eval::fold_train(labelled, &folds, fold, extra);
        let alpha = cfg.agent_alpha.unwrap_or(cfg.alpha);
        let Some(m) = maslens_prior::PriorModel::train_cached(&train, cfg, &[alpha], cache)?.pop()
        else {
            continue;
        };
        for (i, t) in labelled.iter().enumerate() {
            if folds[i] == fold {
                out[i] = view(&m, t);
            }
        }
    }
    Ok(out)
}

/// The prior's candidate configurations for fold seed `seed`: the options' own, or the frozen
/// protocol's (offered three ways when fault-injected traces are among `refs`).
pub(crate) fn candidate_settings(
    refs: &[&Trace],
    opts: &StackFitOptions,
    seed: u64,
) -> Vec<maslens_prior::eval::Setting> {
    if opts.settings.is_empty() {
        let base = maslens_prior::eval::protocol_settings(&maslens_prior::TrainConfig {
            seed,
            ..Default::default()
        });
        maslens_prior::eval::with_injected_choice(refs, &base)
    } else {
        opts.settings.clone()
    }
}

/// One fold seed's nested protocol: {baselines, prior alone, pipeline alone, stacked} on the same
/// outer folds, and the weights each outer fold chose.
#[allow(clippy::too_many_arguments)] // private: the data, the seed and the config of one run
pub(crate) fn nested_protocol(
    labelled: &[&Trace],
    agent_only: &[&Trace],
    verdicts: &std::collections::HashMap<String, LocateVerdict>,
    opts: &StackFitOptions,
    seed: u64,
    settings: &[maslens_prior::eval::Setting],
    cache: &maslens_prior::model::RowCache,
    ecfg: &maslens_prior::EvalConfig,
) -> Result<(maslens_prior::run::Protocol, Vec<StackWeights>), CoreError> {
    use maslens_prior::eval::{
        fold_assignment, report, scored_pairs, select_and_train_cached, Prediction,
    };
    let (k, inner) = (opts.folds.max(2), opts.inner_folds.max(2));
    let folds = fold_assignment(labelled, k, seed);
    let n = labelled.len();
    let mut prior_preds: Vec<Option<Prediction>> = vec![None; n];
    let mut llm_preds: Vec<Option<Prediction>> = vec![None; n];
    let mut stack_preds: Vec<Option<Prediction>> = vec![None; n];
    let mut chosen = Vec::new();
    let mut notes = Vec::new();
    for fold in 0..k {
        let test: Vec<usize> = (0..n).filter(|&i| folds[i] == fold).collect();
        if test.is_empty() {
            continue;
        }
        let train_lab: Vec<&Trace> = (0..n)
            .filter(|&i| folds[i] != fold)
            .map(|i| labelled[i])
            .collect();
        let train: Vec<&Trace> = train_lab
            .iter()
            .copied()
            .chain(agent_only.iter().copied())
            .collect();
        let (model, sel) = select_and_train_cached(&train, inner, seed, settings, cache)?;
        let cfg = &settings[sel.chosen].cfg;
        let views = cross_fitted_views(&train_lab, agent_only, inner, seed, cfg, cache)?;
        let (w, _, _) = fit(&fit_cases(&train_lab, views, verdicts));
        notes.push(format!(
            "fold {fold}: prior {}; {}",
            sel.name,
            describe_weights(&w)
        ));
        for i in test {
            let t = labelled[i];
            let v = verdicts.get(&t.id);
            let a = combine(t, v, Some(&view(&model, t)), &w);
            stack_preds[i] = Some(Prediction {
                trace: t.id.clone(),
                agent: a.agent,
                step: a.step,
            });
            prior_preds[i] = Some(maslens_prior::eval::model_prediction(&model, t));
            llm_preds[i] = Some(Prediction {
                trace: t.id.clone(),
                agent: v.and_then(|v| v.agent.clone()),
                step: v.and_then(|v| v.step),
            });
        }
        chosen.push(w);
    }
    let flat =
        |p: Vec<Option<Prediction>>| -> Vec<Prediction> { p.into_iter().flatten().collect() };
    // The pairs each method answers: the prior's by its pair rule, the pipeline's verdict its
    // coherent primary pair, the stack's step and agent levels each on its own.
    let prior_rule = settings
        .first()
        .map_or("independent", |s| s.cfg.pair_rule.name());
    let methods = vec![
        scored_pairs(
            report(PRIOR_METHOD, labelled, &flat(prior_preds), ecfg),
            prior_rule,
        ),
        scored_pairs(
            report(LLM_METHOD, labelled, &flat(llm_preds), ecfg),
            "coherent",
        ),
        scored_pairs(
            report(STACKED_METHOD, labelled, &flat(stack_preds), ecfg),
            "independent",
        ),
    ];
    let with_verdict = labelled
        .iter()
        .filter(|t| verdicts.contains_key(&t.id))
        .count();
    let protocol = maslens_prior::run::Protocol {
        protocol: format!("nested-cv{k}x{inner}-grouped"),
        description: format!(
            "the same {k} outer folds for every method, grouped by task question (seed {seed});              inside each outer training set the prior's configuration is chosen among {} by              grouped {inner}-fold CV and the stack's weights on prior views cross-fitted over              {inner} folds; llm pipeline = the verdicts of model {} ({with_verdict} of {n} cases              have one, the rest count as abstentions); chosen per outer fold: {}",
            settings.len(),
            opts.model,
            notes.join(" | ")
        ),
        methods,
    };
    Ok((protocol, chosen))
}

/// Measure the stacked localizer by nested cross-validation, grouped by task question, and fit
/// its weights: for each outer fold, the prior's configuration is chosen and the prior trained on
/// the outer training traces only; the stack's weights are chosen on those traces with prior
/// views cross-fitted inside them; the outer fold is then answered by the prior alone, by the
/// pipeline alone (its verdict as given) and by the stack. `verdicts` are the LLM pipeline's
/// verdicts by trace id (a labelled trace without one counts as an abstention of the pipeline).
/// The weights returned are fit on every case with cross-fitted prior views.
pub fn evaluate_and_fit(
    traces: &[Trace],
    verdicts: &std::collections::HashMap<String, LocateVerdict>,
    opts: &StackFitOptions,
) -> Result<StackFitOutput, CoreError> {
    use maslens_prior::eval::select_cached;
    let refs: Vec<&Trace> = traces.iter().collect();
    let (labelled, agent_only) = maslens_prior::eval::sides(&refs);
    if labelled.len() < 2 * opts.folds.max(2) {
        return Err(CoreError::Invalid(format!(
            "{} traces with a decisive label: the nested cross-validation needs at least {}",
            labelled.len(),
            2 * opts.folds.max(2)
        )));
    }
    let (k, inner, seed) = (opts.folds.max(2), opts.inner_folds.max(2), opts.seed);
    let cache = maslens_prior::model::RowCache::new(&refs);
    let settings = candidate_settings(&refs, opts, seed);
    let (protocol, chosen) = nested_protocol(
        &labelled,
        &agent_only,
        verdicts,
        opts,
        seed,
        &settings,
        &cache,
        &opts.eval,
    )?;
    let mut seeds = vec![SeedHits::of(seed, &protocol)];
    for &s in &opts.repeat_seeds {
        if seeds.iter().any(|h| h.seed == s) {
            continue;
        }
        let settings = candidate_settings(&refs, opts, s);
        let ecfg = maslens_prior::EvalConfig {
            seed: s,
            ..opts.eval.clone()
        };
        let (p, _) = nested_protocol(
            &labelled,
            &agent_only,
            verdicts,
            opts,
            s,
            &settings,
            &cache,
            &ecfg,
        )?;
        seeds.push(SeedHits::of(s, &p));
    }
    let n = labelled.len();
    let with_verdict = labelled
        .iter()
        .filter(|t| verdicts.contains_key(&t.id))
        .count();
    let ecfg = &opts.eval;
    // The weights to ship: chosen on every case, with cross-fitted prior views of the
    // configuration the prior's selection chooses on every case.
    let sel = select_cached(&refs, inner, seed, &settings, &cache)?;
    let views = cross_fitted_views(
        &labelled,
        &agent_only,
        k,
        seed,
        &settings[sel.chosen].cfg,
        &cache,
    )?;
    let (mut weights, agent_hits, step_hits) = fit(&fit_cases(&labelled, views, verdicts));
    weights.model = Some(opts.model.clone());
    weights.note = Some(format!(
        "fit by `{}` on {n} labelled cases ({with_verdict} with a pipeline verdict): agent {agent_hits}/{n}, \
         step {step_hits}/{n} on the fitting cases with prior views cross-fitted over {k} grouped folds \
         (prior configuration {}); nested CV figures in the command's report",
        opts.command, sel.name
    ));
    let report = maslens_prior::run::EvalReport {
        format_version: maslens_prior::run::REPORT_FORMAT_VERSION,
        traces: traces.len(),
        labelled: n,
        skipped: 0,
        seed: ecfg.seed,
        bootstrap: ecfg.bootstrap,
        protocols: vec![protocol],
        selection: None,
        in_sample: None,
    };
    Ok(StackFitOutput {
        report,
        weights,
        chosen,
        seeds,
    })
}

/// Everything `maslens eval stack` takes.
#[derive(Debug, Clone)]
pub struct EvalStackOptions {
    /// `whowhen:DIR`, `aegis:FILE`, or a path (labelled traces).
    pub dataset: String,
    /// Only cases whose id starts with this.
    pub subset: Option<String>,
    /// The pipeline's settings (protocol, variant, Evaluators; the method is ignored).
    pub locate: crate::locate::LocateOptions,
    /// The Judge's model spec and the LLM options (cache, budgets, backend).
    pub model: String,
    pub llm: maslens_llm::OpenOptions,
    /// Verdict files (`verdicts.jsonl` of `maslens eval locate`, or `maslens locate --json`
    /// lines) read instead of running the pipeline.
    pub verdicts: Vec<std::path::PathBuf>,
    pub fit: StackFitOptions,
}

/// A finished `maslens eval stack`.
pub struct EvalStackOutput {
    pub fit: StackFitOutput,
    /// The pipeline's verdicts by trace id (run or read).
    pub verdicts: std::collections::HashMap<String, LocateVerdict>,
    /// Records skipped and cases whose pipeline failed, as messages.
    pub problems: Vec<String>,
    /// The Judge's model stack, when the pipeline ran (for a usage summary).
    pub judge: Option<maslens_llm::Stack>,
}

impl EvalStackOutput {
    /// The pipeline's verdicts as JSONL, one line per trace in id order (what `--verdicts` reads
    /// back).
    pub fn verdicts_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut ids: Vec<&String> = self.verdicts.keys().collect();
        ids.sort();
        let mut text = String::new();
        for id in ids {
            text.push_str(&serde_json::to_string(&self.verdicts[id])?);
            text.push('\n');
        }
        Ok(text)
    }

    /// The report, the weights fit on every case and the pooled hits per fold seed, as one JSON
    /// object (`--json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "report": self.fit.report,
            "weights": self.fit.weights,
            "seeds": self.fit.seeds,
        })
    }

    /// The report as text, then the weights fit on every case and, when they were written to
    /// `written` (`-o`), how to use them; no final newline.
    pub fn render_text(&self, written: Option<&Path>) -> Result<String, serde_json::Error> {
        let weights = &self.fit.weights;
        let text = maslens_prior::run::render_text(&self.fit.report);
        let mut out = text.strip_suffix('\n').unwrap_or(&text).to_string();
        if self.fit.seeds.len() > 1 {
            out.push_str("\n\n");
            out.push_str(&render_seed_table(&self.fit.seeds));
        }
        out.push_str(&format!(
            "\n\nweights fit on every case (model {}): {}",
            weights.model.as_deref().unwrap_or("?"),
            serde_json::to_string(&(&weights.step, &weights.agent))?
        ));
        if let Some(path) = written {
            out.push_str(&format!(
                "\nwritten to {} (use: maslens locate --stack {})",
                path.display(),
                path.display()
            ));
        }
        Ok(out)
    }
}

/// Read pipeline verdicts from JSONL files: lines that are a `LocateVerdict`, a stacked
/// verdict holding one in `pipeline`, or the one verdict holding either in `payload`. Other lines are skipped with a message naming file and line.
pub fn read_verdicts(
    paths: &[std::path::PathBuf],
) -> Result<
    (
        std::collections::HashMap<String, LocateVerdict>,
        Vec<String>,
    ),
    CoreError,
> {
    let mut map = std::collections::HashMap::new();
    let mut problems = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .map_err(CoreError::io(format!("reading {}", path.display())))?;
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let at = format!("{}: line {}", path.display(), i + 1);
            let value: serde_json::Value = match serde_json::from_str(line) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{at}: not JSON: {e}; skipped"));
                    continue;
                }
            };
            // The one verdict (`maslens locate --json`, `verdicts.jsonl`) holds the method's
            // verdict in `payload`; a stacked one holds the pipeline's in `pipeline`.
            let detail = match value.get("payload") {
                Some(p) if p.is_object() => p.clone(),
                _ => value,
            };
            let inner = detail.get("pipeline").cloned().unwrap_or(detail);
            match serde_json::from_value::<LocateVerdict>(inner) {
                Ok(v) => {
                    if map.contains_key(&v.trace) {
                        problems.push(format!(
                            "{at}: a second verdict for trace {:?}; the first is kept",
                            v.trace
                        ));
                    } else {
                        map.insert(v.trace.clone(), v);
                    }
                }
                Err(e) => problems.push(format!(
                    "{at}: not a locate verdict (field error: {e}); skipped"
                )),
            }
        }
    }
    Ok((map, problems))
}

/// Run `maslens eval stack`: the pipeline's verdicts for every labelled case (read, or run with
/// the LLM cache), then [`evaluate_and_fit`].
pub async fn eval_stack(
    opts: &EvalStackOptions,
    progress: &dyn maslens_eval::run::Progress,
) -> Result<EvalStackOutput, CoreError> {
    let (path, format) = crate::traces::parse_dataset(&opts.dataset);
    let ds = crate::traces::load_dataset(&path, format, opts.subset.as_deref());
    let mut problems = ds.problems();
    let traces: Vec<Trace> = ds.cases.into_iter().map(|c| c.trace).collect();
    if traces.is_empty() {
        return Err(CoreError::Invalid(format!(
            "no labelled traces in {}",
            path.display()
        )));
    }
    let mut fit_opts = opts.fit.clone();
    let mut judge = None;
    let verdicts = if opts.verdicts.is_empty() {
        // The pipeline as the stacked method runs it (no prior voter, prior-guided narrowing of
        // long traces), narrowed by out-of-fold step distributions: grouped cross-fitting with the
        // prior's default configuration, so no case is narrowed by a prior trained on it.
        let mut lopts = opts.locate.clone();
        lopts.method = crate::locate::Method::Stacked;
        let refs: Vec<&Trace> = traces.iter().collect();
        let (labelled, agent_only) = maslens_prior::eval::sides(&refs);
        let cfg = maslens_prior::TrainConfig {
            seed: fit_opts.seed,
            ..Default::default()
        };
        let views = cross_fitted_views(
            &labelled,
            &agent_only,
            fit_opts.folds.max(2),
            fit_opts.seed,
            &cfg,
            &maslens_prior::model::RowCache::new(&refs),
        )?;
        let narrowing: std::collections::HashMap<String, Vec<f64>> = labelled
            .iter()
            .zip(views)
            .map(|(t, v)| (t.id.clone(), v.steps))
            .collect();
        let models = crate::locate::Models::open(&opts.model, &opts.llm, &lopts).await?;
        let any_aegis = traces.iter().any(|t| t.source.format == "aegis");
        let llm = crate::locate::LlmLocalizer {
            models: &models,
            config: lopts.config(lopts.wants_error_modes(any_aegis)),
            styles: lopts.evaluators.clone(),
            prior: Some(crate::locate::PriorSource::File(narrowing)),
        };
        let mut map = std::collections::HashMap::new();
        progress.start(traces.len());
        for t in &traces {
            progress.case(&t.id);
            match llm.verdict(t).await {
                Ok(v) => {
                    map.insert(t.id.clone(), v);
                }
                Err(
                    e @ maslens_locate::LocateError::Llm {
                        source: maslens_llm::LlmError::Budget(_),
                        ..
                    },
                ) => {
                    progress.finish();
                    return Err(CoreError::Invalid(format!(
                        "stopped: {e} (rerun to continue: answers so far are cached)"
                    )));
                }
                Err(e) => {
                    progress.error(&t.id, &e.to_string());
                    problems.push(format!("{}: the pipeline failed: {e}", t.id));
                }
            }
            progress.case_done();
        }
        progress.finish();
        fit_opts.model = models.judge.model.id().to_string();
        judge = Some(models.judge);
        map
    } else {
        let (map, skipped) = read_verdicts(&opts.verdicts)?;
        problems.extend(skipped);
        let mut models: Vec<&str> = map.values().map(|v| v.model.as_str()).collect();
        models.sort();
        models.dedup();
        if models.len() > 1 {
            problems.push(format!(
                "the verdicts come from several models ({}): the weights are recorded for {}",
                models.join(", "),
                models[0]
            ));
        }
        if let Some(m) = models.first() {
            fit_opts.model = m.to_string();
        }
        map
    };
    let fit = evaluate_and_fit(&traces, &verdicts, &fit_opts)?;
    Ok(EvalStackOutput {
        fit,
        verdicts,
        problems,
        judge,
    })
}

/// The labelled cases of a fit: each trace with its pipeline verdict (when there is one) and its
/// out-of-fold prior view.
fn fit_cases<'a>(
    traces: &[&'a Trace],
    views: Vec<PriorView>,
    verdicts: &'a std::collections::HashMap<String, LocateVerdict>,
) -> Vec<FitCase<'a>> {
    traces
        .iter()
        .zip(views)
        .map(|(t, prior)| FitCase {
            trace: t,
            verdict: verdicts.get(&t.id),
            prior,
        })
        .collect()
}
