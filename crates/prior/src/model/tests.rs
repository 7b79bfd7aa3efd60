use super::*;
use maslens_trace::{AgentKind, DecisiveLabel, Step};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Synthetic labelled traces (a fixture, not data): a planner, two workers and a terminal;
/// the decisive step is the one worker step that introduces a placeholder value and is
/// followed by a failing terminal output. Position is random, so only content can tell.
pub(crate) fn synthetic_corpus(n: usize, seed: u64) -> Vec<Trace> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|k| {
            let mut t = Trace::new(format!("synthetic/{k}"));
            t.task = format!("Compute the total revenue of shop {k} in 2021.");
            t.ensure_agent("Planner", AgentKind::Orchestrator);
            t.ensure_agent("Analyst", AgentKind::Worker);
            t.ensure_agent("Reviewer", AgentKind::Worker);
            t.ensure_agent("terminal", AgentKind::Tool);
            let len = rng.gen_range(6..14);
            let bad = rng.gen_range(1..len - 1);
            let mut steps = Vec::new();
            let mut i = 0;
            while i < len {
                let (agent, content) = if i == bad {
                    (
                        if rng.gen_bool(0.5) {
                            "Analyst"
                        } else {
                            "Reviewer"
                        },
                        format!(
                            "Assume a placeholder revenue of {} as an example.",
                            rng.gen_range(1000..9999)
                        ),
                    )
                } else if i == bad + 1 {
                    ("terminal", "exitcode: 1 Traceback error".to_string())
                } else {
                    match rng.gen_range(0..3) {
                        0 => ("Planner", "Please compute the revenue.".to_string()),
                        1 => ("Analyst", "The revenue table looks fine.".to_string()),
                        _ => ("terminal", "exitcode: 0 ok".to_string()),
                    }
                };
                steps.push(Step {
                    index: i,
                    agent: agent.into(),
                    content,
                    ..Step::default()
                });
                i += 1;
            }
            t.labels.decisive = Some(DecisiveLabel {
                agent: steps[bad].agent.clone(),
                step: bad,
                reason: None,
            });
            t.steps = steps;
            t
        })
        .collect()
}

/// At least 36 of the 40 held-out synthetic traces right at step and at agent level.
fn assert_predicts_held_out(m: &PriorModel, test: &[Trace]) {
    let (mut step_ok, mut agent_ok) = (0, 0);
    for t in test {
        let label = t.labels.decisive.as_ref().unwrap();
        let (a, s) = m.predict(t).unwrap();
        step_ok += usize::from(s == label.step);
        agent_ok += usize::from(a == label.agent);
    }
    assert!(step_ok >= 36, "step {step_ok}/40");
    assert!(agent_ok >= 36, "agent {agent_ok}/40");
}

#[test]
fn learns_a_content_signal_and_generalizes() {
    let train = synthetic_corpus(60, 1);
    let test = synthetic_corpus(40, 2);
    let refs: Vec<&Trace> = train.iter().collect();
    let cfg = TrainConfig {
        alpha: 1.0,
        ..TrainConfig::default()
    };
    let m = PriorModel::train(&refs, &cfg).unwrap();
    assert!(m.agent.is_some());
    assert_predicts_held_out(&m, &test);
}

#[test]
fn listwise_objective_learns_the_signal_too() {
    let train = synthetic_corpus(60, 11);
    let test = synthetic_corpus(40, 12);
    let refs: Vec<&Trace> = train.iter().collect();
    let cfg = TrainConfig {
        alpha: 1.0,
        objective: Objective::Listwise,
        agent_objective: Objective::Listwise,
        ..TrainConfig::default()
    };
    let m = PriorModel::train(&refs, &cfg).unwrap();
    assert_eq!(
        m.step.intercept, 0.0,
        "a conditional logit has no intercept"
    );
    assert_predicts_held_out(&m, &test);
    // deterministic
    assert_eq!(PriorModel::train(&refs, &cfg).unwrap(), m);
}

#[test]
fn listwise_fit_prefers_the_labelled_row_and_shrinks_with_alpha() {
    // one feature that marks the labelled row in every group
    let groups: Vec<(Vec<Vec<f64>>, Vec<usize>)> = (0..20)
        .map(|g| {
            let rows = (0..5)
                .map(|i| vec![f64::from(u8::from(i == g % 5)), (i * g) as f64 % 3.0])
                .collect();
            (rows, vec![g % 5])
        })
        .collect();
    let weak = LinearHead::fit_listwise(&["mark", "noise"], &groups, 1.0).unwrap();
    let strong = LinearHead::fit_listwise(&["mark", "noise"], &groups, 100.0).unwrap();
    assert!(weak.weights[0] > 1.0, "{:?}", weak.weights);
    assert!(weak.weights[0].abs() > weak.weights[1].abs());
    assert!(strong.weights[0] < weak.weights[0]);
    assert!(strong.weights[0] > 0.0);
    // nothing usable: an error, not a panic
    assert!(LinearHead::fit_listwise(&["mark"], &[(vec![vec![1.0]], vec![0])], 1.0).is_err());
    assert!(LinearHead::fit_listwise(&["mark", "noise"], &groups, f64::NAN).is_err());
}

#[test]
fn pair_rules() {
    let data = synthetic_corpus(40, 13);
    let refs: Vec<&Trace> = data.iter().collect();
    let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
    assert_eq!(m.pair_rule, PairRule::Independent);
    let mut differ = 0;
    for t in &data {
        let (a1, s1) = m.predict_with(t, PairRule::AgentFirst).unwrap();
        assert_eq!(
            t.steps[s1].agent, a1,
            "agent first: the agent acts at the step"
        );
        let (a2, s2) = m.predict_with(t, PairRule::Independent).unwrap();
        assert_eq!(a1, a2, "both rules take the agent head's agent");
        let best = argmax(&m.step_distribution(t)).unwrap();
        assert_eq!(
            s2, t.steps[best].index,
            "independent: the step head's best step"
        );
        assert_eq!(m.predict(t), Some((a2, s2)));
        differ += usize::from(s1 != s2);
    }
    assert!(differ < data.len());
    // the rule travels with the model file
    let mut m2 = m.clone();
    m2.pair_rule = PairRule::AgentFirst;
    let back = PriorModel::from_json(&m2.to_json(), "m2").unwrap();
    assert_eq!(back.pair_rule, PairRule::AgentFirst);
}

#[test]
fn excluded_features_get_zero_weight() {
    let data = synthetic_corpus(40, 14);
    let refs: Vec<&Trace> = data.iter().collect();
    let cfg = TrainConfig {
        exclude_features: vec!["assume_words".into(), "next_tool_error".into()],
        ..TrainConfig::default()
    };
    let m = PriorModel::train(&refs, &cfg).unwrap();
    let full = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
    for name in ["assume_words", "next_tool_error"] {
        let j = crate::features::feature_index(name).unwrap();
        assert_eq!(m.step.weights[j], 0.0, "{name}");
        assert!(full.step.weights[j] != 0.0, "{name}");
    }
}

#[test]
fn training_is_deterministic_for_a_fixed_seed() {
    let data = synthetic_corpus(40, 3);
    let refs: Vec<&Trace> = data.iter().collect();
    let cfg = TrainConfig::default();
    let a = PriorModel::train(&refs, &cfg).unwrap().to_json();
    let b = PriorModel::train(&refs, &cfg).unwrap().to_json();
    assert_eq!(a, b);
    // input order does not matter either (folds are keyed by trace id)
    let rev: Vec<&Trace> = data.iter().rev().collect();
    let c = PriorModel::train(&rev, &cfg).unwrap();
    let a = PriorModel::from_json(&a, "a").unwrap();
    for (x, y) in a.step.weights.iter().zip(&c.step.weights) {
        assert!((x - y).abs() < 1e-6);
    }
}

#[test]
fn distributions_sum_to_one_and_rank_is_sorted() {
    let data = synthetic_corpus(30, 4);
    let refs: Vec<&Trace> = data.iter().collect();
    let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
    let t = &data[0];
    let d = m.step_distribution(t);
    assert_eq!(d.len(), t.steps.len());
    assert!((d.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    let agents = m.agent_distribution(t);
    assert!((agents.iter().map(|(_, p)| p).sum::<f64>() - 1.0).abs() < 1e-9);
    let r = m.rank(t);
    assert_eq!(r.len(), t.steps.len());
    assert!(r.windows(2).all(|w| w[0].score >= w[1].score));
    assert!((r.iter().map(|c| c.prob).sum::<f64>() - 1.0).abs() < 1e-9);
    for c in &r {
        assert_eq!(t.steps[c.step].agent, c.agent);
    }
    let (a, s) = m.predict(t).unwrap();
    assert_eq!(t.steps[s].agent, a, "predicted pair is consistent");
    assert!(m.predict(&Trace::new("empty")).is_none());
    assert!(m.rank(&Trace::new("empty")).is_empty());
}

#[test]
fn focus_steps_keep_the_top_steps_and_their_neighbours() {
    let data = synthetic_corpus(30, 8);
    let refs: Vec<&Trace> = data.iter().collect();
    let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
    let t = &data[0];
    let probs = m.step_distribution(t);
    let best = argmax(&probs).unwrap();
    assert_eq!(m.focus_steps(t, 1, 0), vec![best]);
    let f = m.focus_steps(t, 2, 1);
    assert!(f.contains(&best));
    assert!(f.windows(2).all(|w| w[0] < w[1]));
    assert!(f.len() <= 6 && f.len() >= 2);
    assert_eq!(m.focus_steps(t, 1000, 0).len(), t.steps.len());
    assert!(m.focus_steps(&Trace::new("e"), 3, 1).is_empty());
}

#[test]
fn save_load_round_trip_and_invalid_models() {
    let data = synthetic_corpus(30, 5);
    let refs: Vec<&Trace> = data.iter().collect();
    let m = PriorModel::train(&refs, &TrainConfig::default()).unwrap();
    let dir = std::env::temp_dir().join(format!("maslens-prior-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.json");
    m.save(&path).unwrap();
    assert_eq!(PriorModel::load(&path).unwrap(), m);
    let _ = std::fs::remove_dir_all(&dir);

    let err = PriorModel::load("/nonexistent/model.json").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/model.json"));
    let err = PriorModel::from_json("{", "x.json").unwrap_err();
    assert!(err.to_string().starts_with("x.json"));
    let mut bad = m.clone();
    bad.step.features.pop();
    let err = PriorModel::from_json(&bad.to_json(), "y.json").unwrap_err();
    assert!(err.to_string().contains("step.features"), "{err}");
    let mut bad = m.clone();
    bad.step.weights[0] = 0.0;
    bad.format = "other".into();
    assert!(PriorModel::from_json(&bad.to_json(), "z").is_err());
    // a NaN cannot even be written as JSON number; a negative scale is caught
    let mut bad = m;
    bad.step.scale[0] = -1.0;
    assert!(PriorModel::from_json(&bad.to_json(), "z")
        .unwrap_err()
        .to_string()
        .contains("scale"));
}

#[test]
fn faulty_agent_labels_train_the_agent_head() {
    use maslens_trace::FaultyAgent;
    let data = synthetic_corpus(30, 9);
    // the same kind of traces with agent-level labels only (names differ in case)
    let mut extra = synthetic_corpus(10, 10);
    for t in &mut extra {
        let d = t.labels.decisive.take().unwrap();
        t.labels.faulty_agents.push(FaultyAgent {
            agent: d.agent.to_uppercase(),
            error_mode: None,
            strategy: None,
            description: None,
        });
    }
    let cfg = TrainConfig::default();
    let only: Vec<&Trace> = data.iter().collect();
    let both: Vec<&Trace> = data.iter().chain(&extra).collect();
    let a = PriorModel::train(&only, &cfg).unwrap();
    let b = PriorModel::train(&both, &cfg).unwrap();
    assert_eq!(b.training.agent_only_traces, 10);
    assert_eq!(b.training.skipped, 0);
    assert_eq!(a.step, b.step, "the step head uses decisive labels only");
    assert_ne!(a.agent, b.agent);
    // the conditional logit takes them too (a trace whose faulty agent never acts is
    // skipped by the listwise head, not a panic)
    let listwise = TrainConfig {
        objective: Objective::Listwise,
        agent_objective: Objective::Listwise,
        ..TrainConfig::default()
    };
    let mut odd = extra[0].clone();
    odd.labels.faulty_agents[0].agent = "nobody".into();
    let with_odd: Vec<&Trace> = data.iter().chain(&extra).chain([&odd]).collect();
    let c = PriorModel::train(&only, &listwise).unwrap();
    let d = PriorModel::train(&with_odd, &listwise).unwrap();
    assert_eq!(d.training.agent_only_traces, 11);
    assert_eq!(c.step, d.step);
    assert_ne!(c.agent, d.agent);
}

#[test]
fn training_needs_labels() {
    let mut t = Trace::new("x");
    t.ensure_agent("a", AgentKind::Worker);
    t.steps.push(Step {
        index: 0,
        agent: "a".into(),
        ..Step::default()
    });
    let err = PriorModel::train(&[&t], &TrainConfig::default()).unwrap_err();
    assert!(err.to_string().contains("no usable labelled traces"));
    // a label pointing past the last step is skipped, not a panic
    t.labels.decisive = Some(DecisiveLabel {
        agent: "a".into(),
        step: 5,
        reason: None,
    });
    assert!(PriorModel::train(&[&t], &TrainConfig::default()).is_err());
    let bad_alpha = TrainConfig {
        alpha: f64::NAN,
        ..TrainConfig::default()
    };
    let data = synthetic_corpus(20, 6);
    let refs: Vec<&Trace> = data.iter().collect();
    assert!(PriorModel::train(&refs, &bad_alpha).is_err());
}

#[test]
fn helpers() {
    assert_eq!(argmax(&[0.1, 0.5, 0.5]), Some(1));
    assert_eq!(argmax(&[]), None);
    let s = softmax(&[1000.0, 1000.0]);
    assert!((s[0] - 0.5).abs() < 1e-12);
    assert!(softmax(&[]).is_empty());
}

#[test]
fn shipped_default_model_loads() {
    let m = crate::load_default().unwrap();
    assert_eq!(m.format, MODEL_FORMAT);
    assert!(m.training.traces > 0);
}
