use super::*;
use crate::model::tests::synthetic_corpus;
use crate::model::InjectedUse;
use maslens_trace::{AgentKind, TraceBuilder};

fn labelled(id: &str, agents: &[(&str, AgentKind)], label: (&str, usize)) -> Trace {
    let mut b = TraceBuilder::new(id);
    for (a, k) in agents {
        b = b.agent(a, *k).step(a, "");
    }
    b.decisive(label.0, label.1).build()
}

fn pred(trace: &str, agent: &str, step: usize) -> Prediction {
    Prediction {
        trace: trace.into(),
        agent: Some(agent.into()),
        step: Some(step),
    }
}

#[test]
fn reports_score_exactly_next_to_the_baselines() {
    use AgentKind::*;
    let t = labelled(
        "g/1",
        &[
            ("human", Human),
            ("A", Worker),
            ("term", Tool),
            ("B", Worker),
            ("term", Tool),
        ],
        ("A", 1),
    );
    let cfg = EvalConfig {
        bootstrap: 100,
        ..EvalConfig::default()
    };
    let hits = |r: &LocateReport| {
        let (a, s) = (r.agent_accuracy.unwrap(), r.step_accuracy.unwrap());
        (a.k, a.n, s.k)
    };
    let r = report("m", &[&t], &[pred("g/1", "B", 3)], &cfg);
    assert_eq!(
        (r.method.as_str(), r.format_version),
        ("m", maslens_eval::run::REPORT_FORMAT_VERSION)
    );
    assert_eq!(hits(&r), (0, 1, 0));
    assert_eq!(r.tolerance["1"].k, 0, "|3-1| = 2 > 1");
    assert_eq!(r.tolerance["3"].k, 1, "|3-1| = 2 <= 3");
    // the baselines on the same case: first-agent names A at step 1, last-agent B at 3
    let base = |name: &str| r.baselines[name].step_accuracy.unwrap().k;
    assert_eq!((base("first-agent"), base("last-agent")), (1, 0));
    let r = report("m", &[&t], &[pred("g/1", "A", 1)], &cfg);
    assert_eq!(hits(&r), (1, 1, 1));
    let joint = r.joint_accuracy.unwrap();
    assert_eq!((joint.k, joint.n), (1, 1));
    // a trace without prediction counts as wrong, as an abstention
    let r = report("m", &[&t], &[], &cfg);
    assert_eq!((hits(&r), r.abstentions), ((0, 1, 0), 1));
}

#[test]
fn faulty_agent_labels_score_the_agent_level_only() {
    let t = TraceBuilder::new("aegis/1")
        .agent("Solver", AgentKind::Worker)
        .faulty("solver", None)
        .build();
    assert!(is_labelled(&t));
    let cfg = EvalConfig {
        bootstrap: 50,
        ..EvalConfig::default()
    };
    let r = report("m", &[&t], &[pred("aegis/1", "Solver", 0)], &cfg);
    let agent = r.agent_accuracy.unwrap();
    assert_eq!((agent.k, agent.n), (1, 1));
    assert_eq!(r.step_accuracy.map_or(0, |a| a.n), 0);
    assert_eq!(r.joint_accuracy.map_or(0, |a| a.n), 0);
    assert!(!is_labelled(&Trace::new("none")));
}

#[test]
fn folds_are_balanced_and_order_independent() {
    let data = synthetic_corpus(23, 1);
    let refs: Vec<&Trace> = data.iter().collect();
    let f = fold_assignment(&refs, 5, 7);
    let mut counts = [0usize; 5];
    for x in &f {
        counts[*x] += 1;
    }
    assert!(counts.iter().all(|c| *c == 4 || *c == 5), "{counts:?}");
    let rev: Vec<&Trace> = data.iter().rev().collect();
    let g = fold_assignment(&rev, 5, 7);
    let rev_back: Vec<usize> = g.into_iter().rev().collect();
    assert_eq!(f, rev_back);
    assert_ne!(
        f,
        fold_assignment(&refs, 5, 8),
        "another seed, another split"
    );
}

#[test]
fn folds_keep_runs_of_one_question_together() {
    let mut data = synthetic_corpus(24, 5);
    for (i, t) in data.iter_mut().enumerate() {
        t.task = format!("Question {} of the benchmark?", i / 2);
    }
    // a question id wins over the text: 0 and 23 are one question, 1 another
    data[0].metadata.insert("question_ID".into(), "q-1".into());
    data[23].metadata.insert("question_ID".into(), "q-1".into());
    data[1]
        .metadata
        .insert("question_ID".into(), "other".into());
    let refs: Vec<&Trace> = data.iter().collect();
    for seed in 0..8 {
        let f = fold_assignment(&refs, 5, seed);
        assert_eq!(f[0], f[23], "seed {seed}");
        for q in 1..11 {
            assert_eq!(f[2 * q], f[2 * q + 1], "seed {seed}, question {q}");
        }
        let mut counts = [0usize; 5];
        for x in &f {
            counts[*x] += 1;
        }
        assert!(counts.iter().all(|c| (4..=6).contains(c)), "{counts:?}");
    }
    // fewer questions than folds: folds by trace
    for t in data.iter_mut() {
        t.task = "the same task".into();
        t.metadata.clear();
    }
    let refs: Vec<&Trace> = data.iter().collect();
    let f = fold_assignment(&refs, 5, 1);
    assert!((0..5).all(|k| f.contains(&k)));
}

#[test]
fn nested_cross_validation_selects_inside_each_outer_fold() {
    let mut data = synthetic_corpus(30, 2);
    for (i, t) in data.iter_mut().enumerate() {
        t.id = format!("{}/{i}", if i % 2 == 0 { "even" } else { "odd" });
    }
    let refs: Vec<&Trace> = data.iter().collect();
    let good = Setting::new(
        "all",
        TrainConfig {
            alpha: 1.0,
            ..TrainConfig::default()
        },
    );
    // every step feature held at zero: nothing to learn from
    let useless = Setting::new(
        "none",
        TrainConfig {
            alpha: 1.0,
            exclude_features: crate::FEATURE_NAMES.iter().map(|s| s.to_string()).collect(),
            ..TrainConfig::default()
        },
    );
    let settings = [useless.clone(), good.clone()];
    let sel = select(&refs, 3, 7, &settings).unwrap();
    assert_eq!(
        (sel.chosen, sel.name.as_str()),
        (1, good.name.as_str()),
        "{sel:?}"
    );
    assert!(sel.scores[1].step_hits > sel.scores[0].step_hits, "{sel:?}");
    let nested = nested_cv(&refs, 3, 3, 7, &settings).unwrap();
    assert_eq!(nested.out.len(), 30);
    assert_eq!(nested.chosen, vec![good.name.clone(); 3]);
    let ecfg = EvalConfig {
        bootstrap: 100,
        ..EvalConfig::default()
    };
    let r = report("prior/nested", &refs, &nested.out, &ecfg);
    let step = r.step_accuracy.unwrap();
    assert!(step.value > 0.8, "{step:?}");
    let (lgo, chosen) = leave_group_out_selected(&refs, 3, 7, &settings).unwrap();
    assert_eq!(lgo.len(), 30);
    assert_eq!(chosen.len(), 2);
    // the agent weights of one step setting share their trainings and still differ
    let cfg = TrainConfig {
        alpha: 1.0,
        ..TrainConfig::default()
    };
    let models = PriorModel::train_agent_variants(&refs, &cfg, &[0.1, 1e6]).unwrap();
    assert_eq!(models[0].step, models[1].step);
    assert_ne!(models[0].agent, models[1].agent);
    assert_eq!(models[1].training.agent_alpha, Some(1e6));
    assert_eq!(protocol_settings(&TrainConfig::default()).len(), 18);
}

/// `n` synthetic traces marked fault-injected, each its own task question.
fn injected_corpus(n: usize) -> Vec<Trace> {
    let mut injected = synthetic_corpus(n, 9);
    for (i, t) in injected.iter_mut().enumerate() {
        t.id = format!("injected/{i}");
        t.task = format!("Injected question {i}?");
        t.metadata
            .insert(maslens_trace::INJECTION_KEY.into(), serde_json::json!({}));
    }
    injected
}

#[test]
fn injected_traces_train_every_fold_and_are_never_scored() {
    let mut data = synthetic_corpus(20, 2);
    let injected = injected_corpus(20);
    let plain: Vec<&Trace> = data.iter().collect();
    let oof_plain = out_of_fold(&plain, 4, &TrainConfig::default(), |m, _| m.step.clone()).unwrap();
    data.extend(injected);
    let refs: Vec<&Trace> = data.iter().collect();
    let (scored, train_only) = sides(&refs);
    assert_eq!((scored.len(), train_only.len()), (20, 20));
    assert!(scored.iter().all(|t| !t.is_injected()));
    assert!(refs
        .iter()
        .filter(|t| is_labelled(t))
        .all(|t| !t.is_injected()));
    // Same folds over the scored traces, and every fold's model saw the injected traces.
    let oof = out_of_fold(&refs, 4, &TrainConfig::default(), |m, _| m.step.clone()).unwrap();
    assert_eq!(oof.len(), 20);
    assert!(oof.iter().zip(&oof_plain).all(|(a, b)| a != b));
    let settings = [Setting::new(
        "all",
        TrainConfig {
            alpha: 1.0,
            ..TrainConfig::default()
        },
    )];
    let nested = nested_cv(&refs, 4, 2, 7, &settings).unwrap();
    assert_eq!(nested.out.len(), 20);
    assert!(nested.out.iter().all(|p| !p.trace.starts_with("injected/")));
    let ecfg = EvalConfig {
        bootstrap: 20,
        ..EvalConfig::default()
    };
    let r = report("prior/nested", &refs, &nested.out, &ecfg);
    assert_eq!(r.step_accuracy.unwrap().n, 20);
}

#[test]
fn selection_chooses_where_injected_traces_train() {
    let mut data = synthetic_corpus(24, 2);
    // Injected traces whose labels point at the first step instead of the placeholder
    // step: training on them teaches the wrong cue.
    let mut injected = injected_corpus(48);
    for t in &mut injected {
        let first = t.steps[0].agent.clone();
        if let Some(l) = t.labels.decisive.as_mut() {
            (l.agent, l.step) = (first, 0);
        }
    }
    let plain: Vec<&Trace> = data.iter().collect();
    let base = TrainConfig {
        alpha: 1.0,
        ..TrainConfig::default()
    };
    let oof_plain = out_of_fold(&plain, 4, &base, |m, _| m.step.clone()).unwrap();
    let plain_data = data.clone();
    let plain_refs: Vec<&Trace> = plain_data.iter().collect();
    let one = [Setting::new("all", base.clone())];
    assert_eq!(with_injected_choice(&plain, &one), one.to_vec());
    data.extend(injected);
    let refs: Vec<&Trace> = data.iter().collect();
    // Without injected traces a model is the one trained on the plain corpus.
    let without = TrainConfig {
        injected: InjectedUse::Unused,
        ..base.clone()
    };
    let oof = out_of_fold(&refs, 4, &without, |m, _| m.step.clone()).unwrap();
    assert_eq!(oof, oof_plain);
    let with = PriorModel::train(&refs, &base).unwrap();
    assert_eq!(with.training.injected_traces, 48);
    assert_eq!(
        PriorModel::train(&refs, &without)
            .unwrap()
            .training
            .injected_traces,
        0
    );
    // The choice doubles the candidates only when there are injected traces.
    let both = with_injected_choice(&refs, &one);
    assert_eq!(both.len(), 3);
    assert_eq!(both[1].name, "all a=1 agent a=50 injected for agents only");
    assert_eq!(both[2].name, "all a=1 agent a=50 without injected");
    assert_eq!(both[2].name, Setting::new("all", without).name);
    // For the agent head only: the step head is the plain corpus's, the agent head saw them.
    let agents_only = PriorModel::train(&refs, &both[1].cfg).unwrap();
    let plain_model = PriorModel::train(&plain_refs, &base).unwrap();
    assert_eq!(agents_only.step, plain_model.step);
    assert_ne!(agents_only.agent, plain_model.agent);
    assert_eq!(agents_only.training.injected_traces, 48);
    assert_eq!(agents_only.training.injected_use, InjectedUse::AgentHead);
    assert_eq!(agents_only.training.traces, 24);
    // The selection sees that the misleading steps hurt.
    let sel = select(&refs, 3, 7, &both).unwrap();
    assert_ne!(sel.chosen, 0, "{sel:?}");
    assert!(sel.scores[2].step_hits > sel.scores[0].step_hits, "{sel:?}");
    let nested = nested_cv(&refs, 3, 3, 7, &both).unwrap();
    assert_eq!(nested.out.len(), 24);
    assert!(
        nested.chosen.iter().all(|c| c != &both[0].name),
        "{:?}",
        nested.chosen
    );
}

#[test]
fn cross_validation_and_reports() {
    let mut data = synthetic_corpus(30, 2);
    for (i, t) in data.iter_mut().enumerate() {
        t.id = format!("{}/{i}", if i % 2 == 0 { "even" } else { "odd" });
    }
    let refs: Vec<&Trace> = data.iter().collect();
    let cfg = TrainConfig {
        alpha: 1.0,
        ..TrainConfig::default()
    };
    let preds = cross_validate(&refs, 3, &cfg).unwrap();
    assert_eq!(preds.len(), 30);
    let ecfg = EvalConfig {
        bootstrap: 200,
        ..EvalConfig::default()
    };
    let r = report("prior", &refs, &preds, &ecfg);
    let subsets: Vec<&str> = r.subsets.keys().map(String::as_str).collect();
    assert_eq!(subsets, ["even", "odd"]);
    assert_eq!(r.subsets["even"].step_accuracy.unwrap().n, 15);
    let step = r.step_accuracy.unwrap();
    assert_eq!(step.n, 30);
    assert!(step.value > 0.8);
    let lgo = leave_group_out(&refs, &cfg).unwrap();
    assert_eq!(lgo.len(), 30);
    assert!(cross_validate(&refs, 1, &cfg).is_err());
    assert_eq!(r.baselines.len(), maslens_eval::baselines::NAMES.len());
    assert_eq!(group_of(&Trace::new("plain")), "default");
}
