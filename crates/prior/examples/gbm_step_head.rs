//! Issue 15, item 3: does a gradient-boosted step head beat the prior's linear one?
//!
//! `cargo run --release -p maslens-prior --features gbm-experiment --example gbm_step_head -- DIR... [--seeds 7] [--folds 10] [--inner-folds 5]`
//!
//! Step level only. The rows are the prior's own step features ([`maslens_prior::extract`]); the
//! labels are the decisive step (1) against every other step of the trace (0). The protocol is
//! the frozen one of `maslens prior train` (docs/prior.md): outer folds grouped by task question
//! ([`fold_assignment`], same seed, so the same outer folds as the linear head's reported
//! figures), and inside each outer training set a grouped inner CV chooses among the candidate
//! boosters (criterion: step hits; ties to the earlier candidate); the chosen one, trained on
//! the outer training set, predicts the outer fold (argmax over the trace's steps, earliest on
//! ties). The linear head runs the same outer folds through `maslens prior train`'s own nested
//! procedure (`eval::nested_cv`, 18 candidates), and both are printed per fold seed.
//!
//! The boosters are hessboost's (a maintained pure-Rust XGBoost reimplementation): LambdaMART
//! over each trace's steps (`rank:pairwise`, `rank:ndcg`; one query group per trace) and a
//! pointwise `binary:logistic`, at depths 2 and 3 and 30 or 100 rounds (eta 0.1, no row or
//! column sampling, one thread: deterministic).

use hessboost::objective::LambdaRank;
use hessboost::prelude::*;
use maslens_prior::eval::{fold_assignment, group_of, nested_cv, protocol_settings};
use maslens_prior::model::argmax;
use maslens_prior::{extract, TrainConfig, N_FEATURES};
use maslens_trace::import::{read_paths, Format};
use maslens_trace::Trace;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug)]
enum Obj {
    Pairwise,
    Ndcg,
    Logistic,
}

#[derive(Clone, Copy, Debug)]
struct Cand {
    obj: Obj,
    depth: usize,
    rounds: usize,
}

impl Cand {
    fn name(&self) -> String {
        format!("{:?}/d{}/r{}", self.obj, self.depth, self.rounds)
    }
}

fn candidates() -> Vec<Cand> {
    let mut out = Vec::new();
    for obj in [Obj::Pairwise, Obj::Ndcg, Obj::Logistic] {
        for depth in [2, 3] {
            for rounds in [30, 100] {
                out.push(Cand { obj, depth, rounds });
            }
        }
    }
    out
}

/// One labelled trace: its feature rows (row-major, as the booster reads them), their count, and
/// the position of its decisive step.
struct Case<'a> {
    trace: &'a Trace,
    x: Vec<f32>,
    steps: usize,
    label: usize,
}

fn train(cases: &[&Case], c: Cand, seed: u64) -> Result<BoostedModel> {
    let n: usize = cases.iter().map(|k| k.steps).sum();
    let mut x = Vec::with_capacity(n * N_FEATURES);
    let mut y = Vec::with_capacity(n);
    let mut sizes = Vec::with_capacity(cases.len());
    for k in cases {
        x.extend_from_slice(&k.x);
        y.extend((0..k.steps).map(|i| if i == k.label { 1.0 } else { 0.0 }));
        sizes.push(k.steps);
    }
    let mut d = DMatrix::from_dense(&x, n, N_FEATURES)?.with_labels(&y)?;
    let objective = match c.obj {
        Obj::Pairwise => Objective::RankPairwise(LambdaRank::default()),
        Obj::Ndcg => Objective::RankNdcg(LambdaRank::default()),
        Obj::Logistic => Objective::BinaryLogistic(Default::default()),
    };
    if !matches!(c.obj, Obj::Logistic) {
        d = d.with_group_sizes(&sizes)?;
    }
    let params = TrainingParams::builder()
        .objective(objective)
        .max_depth(c.depth)
        .eta(0.1)
        .nthread(1)
        .seed(seed)
        .build()?;
    Ok(Trainer::new(&params, &d, c.rounds).train()?.model)
}

/// The step the model ranks first (earliest on ties, as the linear head's argmax).
fn predict(model: &BoostedModel, k: &Case) -> Result<Option<usize>> {
    let d = DMatrix::from_dense(&k.x, k.steps, N_FEATURES)?;
    let margins: Vec<f64> = model
        .predict_margin(&d, Iterations::Best)?
        .into_vec()
        .into_iter()
        .map(f64::from)
        .collect();
    Ok(argmax(&margins))
}

/// Step hits of candidate `c` by grouped `k`-fold CV over `cases`.
fn cv_hits(cases: &[&Case], c: Cand, k: usize, seed: u64) -> Result<usize> {
    let traces: Vec<&Trace> = cases.iter().map(|x| x.trace).collect();
    let folds = fold_assignment(&traces, k, seed);
    let mut hits = 0;
    for f in 0..k {
        let (te, tr) = split(cases, &folds, f);
        if te.is_empty() {
            continue;
        }
        let m = train(&tr, c, seed)?;
        for x in te {
            if predict(&m, x)? == Some(x.label) {
                hits += 1;
            }
        }
    }
    Ok(hits)
}

/// The cases of fold `f` and the others.
fn split<'a>(
    cases: &[&'a Case<'a>],
    folds: &[usize],
    f: usize,
) -> (Vec<&'a Case<'a>>, Vec<&'a Case<'a>>) {
    let mut test = Vec::new();
    let mut train = Vec::new();
    for (c, g) in cases.iter().zip(folds) {
        if *g == f {
            test.push(*c);
        } else {
            train.push(*c);
        }
    }
    (test, train)
}

/// Step hits per group of the nested protocol with the GBM candidates, for one fold seed; and
/// what each outer fold chose.
fn gbm_nested(
    refs: &[&Case],
    outer: usize,
    inner: usize,
    seed: u64,
) -> Result<(BTreeMap<String, usize>, Vec<String>)> {
    let traces: Vec<&Trace> = refs.iter().map(|c| c.trace).collect();
    let folds = fold_assignment(&traces, outer, seed);
    let mut hits: BTreeMap<String, usize> = BTreeMap::new();
    let mut chosen = Vec::new();
    for f in 0..outer {
        let (te, tr) = split(refs, &folds, f);
        if te.is_empty() {
            continue;
        }
        let mut best: Option<(usize, Cand)> = None;
        for c in candidates() {
            let h = cv_hits(&tr, c, inner, seed)?;
            if best.is_none_or(|(b, _)| h > b) {
                best = Some((h, c));
            }
        }
        let Some((_, c)) = best else { continue };
        chosen.push(c.name());
        let m = train(&tr, c, seed)?;
        for x in te {
            if predict(&m, x)? == Some(x.label) {
                *hits.entry(group_of(x.trace)).or_default() += 1;
            }
        }
    }
    Ok((hits, chosen))
}

/// The same for the linear head: `maslens prior train`'s nested protocol (18 candidates,
/// selection by agent + step hits), its step answers scored.
fn linear_nested(refs: &[&Case], outer: usize, inner: usize, seed: u64) -> BTreeMap<String, usize> {
    let traces: Vec<&Trace> = refs.iter().map(|c| c.trace).collect();
    let base = TrainConfig {
        seed,
        ..TrainConfig::default()
    };
    let mut hits: BTreeMap<String, usize> = BTreeMap::new();
    match nested_cv(&traces, outer, inner, seed, &protocol_settings(&base)) {
        Ok(n) => {
            for (p, x) in n.out.iter().zip(refs) {
                let truth = x.trace.steps[x.label].index;
                if p.step == Some(truth) {
                    *hits.entry(group_of(x.trace)).or_default() += 1;
                }
            }
        }
        Err(e) => eprintln!("linear head, seed {seed}: {e}"),
    }
    hits
}

fn main() -> Result<()> {
    let mut inputs = Vec::new();
    let (mut seeds, mut outer, mut inner) = (vec![7u64], 10usize, 5usize);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let num = |v: &str| -> u64 {
            v.parse().unwrap_or_else(|_| {
                eprintln!("{} needs a number, got {v:?}", args[i]);
                std::process::exit(2)
            })
        };
        let value = args.get(i + 1).map(String::as_str).unwrap_or("");
        match args[i].as_str() {
            "--seeds" => seeds = value.split(',').map(num).collect(),
            "--folds" => outer = num(value) as usize,
            "--inner-folds" => inner = num(value) as usize,
            path => {
                inputs.push(PathBuf::from(path));
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let mut traces = Vec::new();
    for item in read_paths(&inputs, Format::Auto) {
        match item {
            Ok(i) => traces.push(i.trace),
            Err(e) => eprintln!("warning: skipped: {e}"),
        }
    }
    let cases: Vec<Case> = traces
        .iter()
        .filter_map(|t| {
            let d = t.labels.decisive.as_ref()?;
            let label = t.steps.iter().position(|s| s.index == d.step)?;
            let rows = extract(t);
            Some(Case {
                trace: t,
                x: rows.iter().flatten().map(|v| *v as f32).collect(),
                steps: rows.len(),
                label,
            })
        })
        .collect();
    let refs: Vec<&Case> = cases.iter().collect();
    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    for c in &cases {
        *totals.entry(group_of(c.trace)).or_default() += 1;
    }
    println!(
        "{} labelled traces; step hits of the nested protocol ({outer} outer x {inner} inner folds, \
         grouped by task question), per fold seed",
        cases.len()
    );
    let groups: Vec<String> = totals.iter().map(|(g, n)| format!("{g} (n={n})")).collect();
    println!("seed  head    {}", groups.join("  "));
    let mut sums: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for &seed in &seeds {
        let (gbm, chosen) = gbm_nested(&refs, outer, inner, seed)?;
        let lin = linear_nested(&refs, outer, inner, seed);
        for (head, hits) in [("linear", &lin), ("gbm", &gbm)] {
            let cells: Vec<String> = totals
                .keys()
                .map(|g| {
                    let k = hits.get(g).copied().unwrap_or(0);
                    *sums.entry((head, g.clone())).or_default() += k;
                    format!("{k}")
                })
                .collect();
            println!("{seed:>4}  {head:<6}  {}", cells.join("  "));
        }
        eprintln!("seed {seed}: the GBM folds chose {}", chosen.join(", "));
    }
    for head in ["linear", "gbm"] {
        let cells: Vec<String> = totals
            .iter()
            .map(|(g, n)| {
                let k =
                    sums.get(&(head, g.clone())).copied().unwrap_or(0) as f64 / seeds.len() as f64;
                format!("{k:.1} ({:.1}%)", 100.0 * k / *n as f64)
            })
            .collect();
        println!("mean  {head:<6}  {}", cells.join("  "));
    }
    Ok(())
}
