//! Tests on the real Who&When traces in `../shared/data/whowhen` (read in place).

use maslens_prior::eval::{cross_validate, report, EvalConfig};
use maslens_prior::{load_default, PriorModel, TrainConfig};
use maslens_trace::import::{read_path, Format};
use maslens_trace::Trace;
use std::path::Path;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/whowhen");

fn load() -> Vec<Trace> {
    let mut out = Vec::new();
    for sub in ["Algorithm-Generated", "Hand-Crafted"] {
        for item in read_path(&Path::new(DATA).join(sub), Format::Auto) {
            out.push(item.expect("Who&When dev files import").trace);
        }
    }
    out
}

#[test]
fn shipped_model_is_reproducible() {
    let traces = load();
    assert_eq!(traces.len(), 98);
    let refs: Vec<&Trace> = traces.iter().collect();
    let shipped = load_default().unwrap();
    // The configuration the frozen protocol chose (recorded in the file), trained again.
    let cfg = shipped
        .training
        .config(shipped.pair_rule, shipped.agent.is_some());
    let trained = PriorModel::train(&refs, &cfg).unwrap();
    assert_eq!(shipped.training.traces, 98);
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
    assert!(
        close(&trained.step.weights, &shipped.step.weights),
        "the shipped model is stale: retrain it with the command in crates/prior/models/README.md"
    );
    let (ta, sa) = (trained.agent.unwrap(), shipped.agent.unwrap());
    assert!(close(&ta.weights, &sa.weights));
    assert!((trained.step.intercept - shipped.step.intercept).abs() < 1e-6);
}

#[test]
fn cross_validated_prior_beats_the_trivial_baselines() {
    let traces = load();
    let refs: Vec<&Trace> = traces.iter().collect();
    let cfg = EvalConfig {
        bootstrap: 200,
        ..EvalConfig::default()
    };
    let preds = cross_validate(&refs, 5, &TrainConfig::default()).unwrap();
    let prior = report("prior", &refs, &preds, &cfg);
    let hits = |a: Option<maslens_prior::Accuracy>| a.map_or(0, |a| a.k);
    let (agent, step) = (hits(prior.agent_accuracy), hits(prior.step_accuracy));
    assert_eq!(prior.baselines.len(), maslens_eval::baselines::NAMES.len());
    for (b, base) in &prior.baselines {
        let (b_agent, b_step) = (hits(base.agent_accuracy), hits(base.step_accuracy));
        assert!(agent > b_agent, "{b}: agent {agent} vs {b_agent}");
        assert!(step > b_step, "{b}: step {step} vs {b_step}");
    }
}

#[test]
fn ranks_a_long_trace_quickly() {
    let traces = load();
    let longest = traces.iter().max_by_key(|t| t.steps.len()).unwrap();
    assert!(longest.steps.len() >= 100);
    let model = load_default().unwrap();
    let started = std::time::Instant::now();
    let ranked = model.rank(longest);
    assert_eq!(ranked.len(), longest.steps.len());
    assert!(started.elapsed().as_secs_f64() < 1.0);
}
