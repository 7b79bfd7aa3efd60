use super::*;
use maslens_trace::Format;

fn refs(traces: &[Trace]) -> Vec<&Trace> {
    traces.iter().collect()
}

fn whowhen(part: &str) -> Vec<Trace> {
    let dir = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/whowhen"
    ))
    .join(part);
    let read = crate::traces::read(&[dir], Format::WhoWhen);
    assert!(read.errors.is_empty(), "{:?}", read.errors);
    read.traces
}

fn fixed(seed: u64) -> TrainRequest {
    TrainRequest {
        folds: 0,
        inner_folds: 2,
        alpha: Some(1.0),
        agent_alpha: None,
        objective: None,
        pair_rule: PairRule::default(),
        agent_head: true,
        seed,
        bootstrap: 50,
        oof_probs: false,
        inputs: vec!["test".into()],
    }
}

#[test]
fn the_built_in_model_on_its_training_traces_says_in_sample() {
    let traces = whowhen("Hand-Crafted");
    let builtin = load_model(None).unwrap();
    let report = evaluate(&refs(&traces), 0, &builtin, &eval_config(7, 50)).unwrap();
    let note = report.in_sample.as_deref().expect("in-sample");
    assert!(
        note.contains(&format!(
            "built-in prior was trained on {0} of these {0}",
            traces.len()
        )),
        "{note}"
    );
    assert!(render_text(&report).contains("IN-SAMPLE: the built-in prior"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["format_version"], 5);
    assert_eq!(json["in_sample"].as_str(), Some(note));
    // the method's own report (the eval report's format) says so too
    let prior = &json["protocols"][0]["methods"][0];
    assert_eq!(
        (prior["method"].as_str(), prior["in_sample"].as_str()),
        (Some("prior"), Some(note))
    );
    assert_eq!(prior["model"], "built-in whowhen-v1");
    // the report says which pairs it scored: the shipped model's pair rule
    assert_eq!(prior["config"]["pair_rule"], builtin.model.pair_rule.name());
    assert!(render_text(&report).contains(&format!(
        "pairs scored: prior {}",
        builtin.model.pair_rule.name()
    )));
}

#[test]
fn a_trained_model_records_its_traces_and_knows_them_again() {
    let mut traces = whowhen("Algorithm-Generated");
    let rest = traces.split_off(40);
    let dir = tempfile::tempdir().unwrap();
    let trained = train(&refs(&traces), 0, &fixed(3)).unwrap();
    let hashes = &trained.model.training.trace_sha256;
    assert!(!hashes.is_empty() && hashes.len() <= traces.len());
    assert!(hashes.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    // The list survives the model file, and an evaluation on the training traces says so.
    let path = dir.path().join("model.json");
    trained.model.save(&path).unwrap();
    let loaded = load_model(Some(&path)).unwrap();
    assert_eq!(&loaded.model.training.trace_sha256, hashes);
    let ecfg = eval_config(7, 50);
    let on_training = evaluate(&refs(&traces), 0, &loaded, &ecfg).unwrap();
    let note = on_training
        .in_sample
        .expect("in-sample on its training traces");
    assert!(
        note.starts_with("this prior model was trained on"),
        "{note}"
    );
    // On traces it never saw (content, not ids: the last 61 differ from the first 40), no note.
    let elsewhere = evaluate(&refs(&rest), 0, &loaded, &ecfg).unwrap();
    let unseen = rest
        .iter()
        .filter(|t| !hashes.contains(&maslens_eval::run::steps_sha256(t)))
        .count();
    assert!(unseen > 0);
    assert_eq!(elsewhere.in_sample.is_none(), unseen == rest.len());
    // A model file from before the list: nothing is known, nothing is claimed.
    let mut old = loaded.clone();
    old.model.training.trace_sha256.clear();
    assert!(evaluate(&refs(&traces), 0, &old, &ecfg)
        .unwrap()
        .in_sample
        .is_none());
}

#[test]
fn giving_any_setting_fixes_the_configuration() {
    let mut req = fixed(0);
    assert!(req.is_fixed());
    assert_eq!(req.options().candidates.len(), 1);
    req.alpha = None;
    assert!(!req.is_fixed());
    assert!(req.options().candidates.is_empty(), "the protocol selects");
    req.objective = Some(Objective::Listwise);
    assert!(req.is_fixed());
    assert_eq!(req.options().train.objective, Objective::Listwise);
}
