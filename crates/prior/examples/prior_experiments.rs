//! Model-selection experiments for the prior on labelled traces (the ablation table of
//! `docs/prior.md`).
//!
//! `cargo run --release -p maslens-prior --example prior_experiments -- DIR... [--folds K] [--seeds 1,2,3] [--only NAME] [--nested]`
//!
//! For every candidate configuration (objective, L2 weights, agent head on/off) it runs the
//! same deterministic K-fold protocol as `maslens prior train` (folds by FNV-1a(seed, trace id),
//! pooled over all groups) and prints, per group, out-of-fold agent and step accuracy under
//! four pair rules computed from the same fold models:
//!   * `agent-first`: most probable agent (agent head), then its most probable step;
//!   * `step-first`: the most probable step (step head) and the agent acting there;
//!   * `independent`: the agent head's best agent and the step head's best step;
//!   * `joint0.5`: the step maximizing ln p(step) + 0.5 ln p(agent acting there), and that agent.
//!
//! Every figure printed is a cross-validated estimate on the given traces; picking the best
//! row of this table and reporting it is selection on the same CV (optimistic), which is why
//! `--nested` exists: it picks each outer fold's configuration by an inner CV on that fold's
//! training traces only and reports the outer out-of-fold result (honest for the selection).

use maslens_prior::eval::{fold_assignment, group_of};
use maslens_prior::model::argmax;
use maslens_prior::{AgentAggregation, Objective, PairRule, PriorModel, TrainConfig};
use maslens_trace::import::{read_paths, Format};
use maslens_trace::Trace;
use std::collections::BTreeMap;
use std::path::PathBuf;

const RULES: [&str; 4] = ["agent-first", "step-first", "independent", "joint0.5"];

/// (agent, step) per rule.
type Preds = [(Option<String>, Option<usize>); 4];

fn predict_all(model: &PriorModel, t: &Trace) -> Preds {
    let a = model.predict_with(t, PairRule::AgentFirst);
    let probs = model.step_distribution(t);
    let b = argmax(&probs).map(|i| (t.steps[i].agent.clone(), t.steps[i].index));
    let agents: std::collections::HashMap<String, f64> =
        model.agent_distribution(t).into_iter().collect();
    let joint = |lambda: f64| {
        let z: Vec<f64> = probs
            .iter()
            .zip(&t.steps)
            .map(|(p, s)| {
                p.max(1e-300).ln()
                    + lambda
                        * agents
                            .get(&s.agent)
                            .copied()
                            .unwrap_or(0.0)
                            .max(1e-300)
                            .ln()
            })
            .collect();
        argmax(&z).map(|i| (t.steps[i].agent.clone(), t.steps[i].index))
    };
    let c = model.predict_with(t, PairRule::Independent);
    let d = joint(0.5);
    let split = |p: Option<(String, usize)>| match p {
        Some((a, s)) => (Some(a), Some(s)),
        None => (None, None),
    };
    [split(a), split(b), split(c), split(d)]
}

fn cv(traces: &[&Trace], k: usize, seed: u64, cfg: &TrainConfig) -> Vec<Preds> {
    let folds = fold_assignment(traces, k, seed);
    let mut out: Vec<Option<Preds>> = vec![None; traces.len()];
    for fold in 0..k {
        let train: Vec<&Trace> = traces
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .collect();
        let model = match PriorModel::train(&train, cfg) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("fold {fold}: {e}");
                continue;
            }
        };
        for (i, t) in traces.iter().enumerate() {
            if folds[i] == fold {
                out[i] = Some(predict_all(&model, t));
            }
        }
    }
    out.into_iter()
        .map(|p| p.unwrap_or(std::array::from_fn(|_| (None, None))))
        .collect()
}

/// (agent hits, step hits) per rule for the traces selected by `keep`.
fn hits(traces: &[&Trace], preds: &[Preds], keep: impl Fn(&Trace) -> bool) -> [(usize, usize); 4] {
    let mut h = [(0, 0); 4];
    for (t, p) in traces.iter().zip(preds) {
        if !keep(t) {
            continue;
        }
        let Some(label) = t.labels.decisive.as_ref() else {
            continue;
        };
        for r in 0..4 {
            h[r].0 += usize::from(p[r].0.as_deref() == Some(label.agent.as_str()));
            h[r].1 += usize::from(p[r].1 == Some(label.step));
        }
    }
    h
}

/// Step features added in the second round (held out by the `old-features` variants).
const NEW_FEATURES: &[&str] = maslens_prior::eval::SECOND_ROUND_FEATURES;

fn configs() -> Vec<(String, TrainConfig)> {
    let base = TrainConfig::default();
    let v1_features: Vec<String> = NEW_FEATURES.iter().map(|s| s.to_string()).collect();
    let point = |alpha: f64, agent_alpha: f64, exclude: &[String]| TrainConfig {
        alpha,
        agent_alpha: Some(agent_alpha),
        objective: Objective::Pointwise,
        agent_objective: Objective::Pointwise,
        exclude_features: exclude.to_vec(),
        ..base.clone()
    };
    let list = |alpha: f64, agent_alpha: f64| TrainConfig {
        alpha,
        agent_alpha: Some(agent_alpha),
        objective: Objective::Listwise,
        agent_objective: Objective::Listwise,
        ..base.clone()
    };
    let mut out = vec![(
        "v1 step features, pointwise a=50/50".to_string(),
        point(50.0, 50.0, &v1_features),
    )];
    for (a, b) in [
        (50.0, 50.0),
        (150.0, 10.0),
        (150.0, 50.0),
        (150.0, 150.0),
        (400.0, 50.0),
    ] {
        out.push((format!("pointwise a={a}/{b}"), point(a, b, &[])));
    }
    for (a, b) in [(30.0, 10.0), (100.0, 10.0), (300.0, 10.0), (300.0, 30.0)] {
        out.push((format!("listwise a={a}/{b}"), list(a, b)));
    }
    // no agent head: agents ranked by the sum or the max of their steps' probabilities
    for (name, how) in [
        ("sum", AgentAggregation::Sum),
        ("max", AgentAggregation::Max),
    ] {
        out.push((
            format!("no agent head, {name} of step probs, a=150"),
            TrainConfig {
                agent_head: false,
                agent_aggregation: how,
                ..point(150.0, 50.0, &[])
            },
        ));
    }
    out
}

/// The selection grid of `--nested`: pointwise heads, step and agent L2 weights.
fn grid() -> Vec<TrainConfig> {
    let mut out = Vec::new();
    for alpha in [50.0, 150.0, 400.0] {
        for agent_alpha in [10.0, 50.0, 150.0] {
            out.push(TrainConfig {
                alpha,
                agent_alpha: Some(agent_alpha),
                objective: Objective::Pointwise,
                agent_objective: Objective::Pointwise,
                ..TrainConfig::default()
            });
        }
    }
    out
}

/// Nested CV: each outer fold picks its configuration from [`grid`] by an inner `inner`-fold
/// CV on its own training traces (criterion: agent hits + step hits under the independent
/// pair rule, i.e. the agent head's and the step head's own hits), then predicts the outer fold. Returns the outer predictions and the choices.
fn nested(traces: &[&Trace], k: usize, inner: usize, seed: u64) -> (Vec<Preds>, Vec<String>) {
    let folds = fold_assignment(traces, k, seed);
    let grid = grid();
    let mut out: Vec<Option<Preds>> = vec![None; traces.len()];
    let mut chosen = Vec::new();
    for fold in 0..k {
        let train: Vec<&Trace> = traces
            .iter()
            .zip(&folds)
            .filter(|(_, f)| **f != fold)
            .map(|(t, _)| *t)
            .collect();
        let mut best: Option<(usize, usize)> = None;
        for (c, cfg) in grid.iter().enumerate() {
            let cfg = TrainConfig {
                seed,
                ..cfg.clone()
            };
            let p = cv(&train, inner, seed, &cfg);
            let h = hits(&train, &p, |_| true);
            let score = h[2].0 + h[2].1;
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((c, score));
            }
        }
        let Some((c, _)) = best else { continue };
        let cfg = TrainConfig {
            seed,
            ..grid[c].clone()
        };
        chosen.push(format!(
            "a={} agent a={}",
            cfg.alpha,
            cfg.agent_alpha.unwrap_or(cfg.alpha)
        ));
        match PriorModel::train(&train, &cfg) {
            Ok(model) => {
                for (i, t) in traces.iter().enumerate() {
                    if folds[i] == fold {
                        out[i] = Some(predict_all(&model, t));
                    }
                }
            }
            Err(e) => eprintln!("fold {fold}: {e}"),
        }
    }
    (
        out.into_iter()
            .map(|p| p.unwrap_or(std::array::from_fn(|_| (None, None))))
            .collect(),
        chosen,
    )
}

fn main() {
    let mut inputs: Vec<PathBuf> = Vec::new();
    let mut k = 10;
    let mut seeds: Vec<u64> = vec![7];
    let mut only: Option<String> = None;
    let mut nested_cv = false;
    let mut dump = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--folds" => k = args.next().and_then(|v| v.parse().ok()).unwrap_or(k),
            "--seeds" => {
                seeds = args
                    .next()
                    .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
                    .unwrap_or(seeds)
            }
            "--only" => only = args.next(),
            "--nested" => nested_cv = true,
            "--dump" => dump = true,
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let mut traces = Vec::new();
    for item in read_paths(&inputs, Format::Auto) {
        match item {
            Ok(i) => traces.push(i.trace),
            Err(e) => eprintln!("warning: skipped: {e}"),
        }
    }
    let refs: Vec<&Trace> = traces
        .iter()
        .filter(|t| t.labels.decisive.is_some())
        .collect();
    let mut groups: BTreeMap<String, usize> = BTreeMap::new();
    for t in &refs {
        *groups.entry(group_of(t)).or_default() += 1;
    }
    if dump {
        // Per trace, out of fold (first seed, shipped defaults): the label's rank among the
        // trace's steps under the step head, and the predicted agent and step.
        let seed = seeds[0];
        let cfg = TrainConfig {
            seed,
            ..TrainConfig::default()
        };
        let folds = fold_assignment(&refs, k, seed);
        for fold in 0..k {
            let train: Vec<&Trace> = refs
                .iter()
                .zip(&folds)
                .filter(|(_, f)| **f != fold)
                .map(|(t, _)| *t)
                .collect();
            let Ok(model) = PriorModel::train(&train, &cfg) else {
                continue;
            };
            for (i, t) in refs.iter().enumerate() {
                if folds[i] != fold {
                    continue;
                }
                let Some(label) = t.labels.decisive.as_ref() else {
                    continue;
                };
                let probs = model.step_distribution(t);
                let rank = 1 + probs
                    .iter()
                    .filter(|p| **p > probs.get(label.step).copied().unwrap_or(0.0))
                    .count();
                let (a, s) = model.predict(t).unwrap_or_default();
                println!(
                    "{:<24} n={:<4} label {:>3} {:<28} rank {:>3} | pred {:>3} {:<28} {}{}",
                    t.id,
                    t.steps.len(),
                    label.step,
                    label.agent,
                    rank,
                    s,
                    a,
                    if a == label.agent { "A" } else { "-" },
                    if s == label.step { "S" } else { "-" },
                );
            }
        }
        return;
    }
    if nested_cv {
        println!(
            "nested CV: {k} outer folds, 5 inner folds, grid of {} configurations; cells: agent/step hits per rule ({})",
            grid().len(),
            RULES.join(", ")
        );
        for &seed in &seeds {
            let (preds, chosen) = nested(&refs, k, 5, seed);
            let mut line = format!("seed {seed:<3}");
            let mut keys: Vec<String> = groups.keys().cloned().collect();
            keys.push("all".into());
            for g in &keys {
                let h = hits(&refs, &preds, |t| g == "all" || group_of(t) == *g);
                let cells: Vec<String> = h.iter().map(|(a, s)| format!("{a:>2}/{s:>2}")).collect();
                line.push_str(&format!(" | {} {}", &g[..g.len().min(4)], cells.join(" ")));
            }
            println!("{line}\n  chosen per outer fold: {}", chosen.join("; "));
        }
        return;
    }
    println!(
        "{} labelled traces, {k}-fold CV pooled, fold seeds {seeds:?}; cells: agent/step hits per rule ({}), mean over seeds",
        refs.len(),
        RULES.join(", ")
    );
    for (name, cfg) in configs() {
        if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        let started = std::time::Instant::now();
        let mut keys: Vec<String> = groups.keys().cloned().collect();
        keys.push("all".into());
        let mut sums: BTreeMap<String, [(f64, f64); 4]> = BTreeMap::new();
        for &seed in &seeds {
            let cfg = TrainConfig {
                seed,
                ..cfg.clone()
            };
            let preds = cv(&refs, k, seed, &cfg);
            for g in &keys {
                let h = hits(&refs, &preds, |t| g == "all" || group_of(t) == *g);
                let e = sums.entry(g.clone()).or_insert([(0.0, 0.0); 4]);
                for r in 0..4 {
                    e[r].0 += h[r].0 as f64 / seeds.len() as f64;
                    e[r].1 += h[r].1 as f64 / seeds.len() as f64;
                }
            }
        }
        let mut line = format!("{name:<42}");
        for g in &keys {
            let n = groups.get(g).copied().unwrap_or(refs.len());
            let cells: Vec<String> = sums[g]
                .iter()
                .map(|(a, s)| format!("{a:>4.1}/{s:>4.1}"))
                .collect();
            line.push_str(&format!(
                " | {} n={n} {}",
                &g[..g.len().min(4)],
                cells.join(" ")
            ));
        }
        line.push_str(&format!(" [{:.1}s]", started.elapsed().as_secs_f64()));
        println!("{line}");
    }
}
