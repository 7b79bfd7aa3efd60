//! Tests of the stack.
use super::*;
use maslens_locate::evaluator::{EvaluatorResult, Style};
use maslens_locate::{Finding, LocateVerdict};
use maslens_trace::Trace;
use maslens_trace::{AgentKind, TraceBuilder};

fn trace() -> Trace {
    TraceBuilder::new("x/1")
        .agent("human", AgentKind::Human)
        .steps(&["human", "Planner", "Coder", "Coder"])
        .decisive("Coder", 2)
        .build()
}

fn finding(agent: &str, step: usize, confidence: f64, mismatch: bool) -> Finding {
    Finding {
        agent: Some(agent.into()),
        step: Some(step),
        confidence,
        agent_mismatch: mismatch,
        ..Default::default()
    }
}

fn verdict(evals: Vec<Finding>) -> LocateVerdict {
    let mut v: LocateVerdict = serde_json::from_value(serde_json::json!({
        "trace": "x/1", "method": "m", "protocol": "all-at-once", "variant": "full",
        "model": "fixture", "agent": null, "step": null, "step_excerpt": null,
        "rationale": "", "confidence": 0.0, "source": "none", "judge": null,
        "evaluators": [], "vote": null,
        "long_trace": {"strategy": {"kind": "full"}, "judge": null, "evaluators": null,
                       "context_size": null, "trace_tokens": 0},
        "usage": {}, "prompt_versions": ""
    }))
    .unwrap();
    v.evaluators = evals
        .into_iter()
        .map(|finding| EvaluatorResult {
            style: Style::Base,
            model: "fixture".into(),
            finding,
            stats: Default::default(),
        })
        .collect();
    v
}

fn weights(judge: f64, evaluators: f64, drop: bool) -> StackWeights {
    let l = LevelWeights {
        judge,
        evaluators,
        drop_incoherent: drop,
    };
    StackWeights {
        format: STACK_FORMAT.into(),
        model: None,
        step: l,
        agent: l,
        note: None,
    }
}

#[test]
fn ballots_move_the_answer_away_from_the_prior_only_with_weight() {
    let t = trace();
    let prior = PriorView {
        steps: vec![0.05, 0.6, 0.3, 0.05],
        agents: vec![("Planner".into(), 0.7), ("Coder".into(), 0.3)],
    };
    let v = verdict(vec![
        finding("Coder", 2, 1.0, false),
        finding("Coder", 2, 0.8, false),
    ]);
    let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 0.0, false));
    assert_eq!((a.agent.as_deref(), a.step), (Some("Planner"), Some(1)));
    assert_eq!(a.step_source, StackSource::Stack);
    let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 1.0, false));
    assert_eq!((a.agent.as_deref(), a.step), (Some("Coder"), Some(2)));
    // the model abstained: the prior answers
    let a = combine(
        &t,
        Some(&verdict(vec![])),
        Some(&prior),
        &weights(0.0, 1.0, false),
    );
    assert_eq!(
        (a.step, a.step_source),
        (Some(1), StackSource::PriorFallback)
    );
    let a = combine(&t, None, Some(&prior), &weights(5.0, 5.0, false));
    assert_eq!(a.agent.as_deref(), Some("Planner"));
    // an incoherent ballot is dropped when the weights say so
    let v = verdict(vec![finding("Coder", 2, 1.0, true)]);
    let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 5.0, true));
    assert_eq!(
        (a.step, a.step_source),
        (Some(1), StackSource::PriorFallback)
    );
    let a = combine(&t, Some(&v), Some(&prior), &weights(0.0, 5.0, false));
    assert_eq!(a.step, Some(2));
    // no prior: the ballots alone; neither: no answer
    let a = combine(&t, Some(&v), None, &weights(0.0, 1.0, false));
    assert_eq!((a.step, a.step_source), (Some(2), StackSource::LlmOnly));
    let a = combine(&t, None, None, &weights(1.0, 1.0, false));
    assert_eq!(
        (a.step, a.agent, a.step_source),
        (None, None, StackSource::None)
    );
}

#[test]
fn fit_chooses_weights_that_help_and_stays_near_the_prior_on_ties() {
    let t = trace();
    // the prior is wrong (step 1), the Evaluators right (step 2)
    let wrong_prior = PriorView {
        steps: vec![0.05, 0.6, 0.3, 0.05],
        agents: vec![("Planner".into(), 0.7), ("Coder".into(), 0.3)],
    };
    let right = verdict(vec![finding("Coder", 2, 1.0, false)]);
    let cases = vec![FitCase {
        trace: &t,
        verdict: Some(&right),
        prior: wrong_prior.clone(),
    }];
    let (w, agent_hits, step_hits) = fit(&cases);
    assert_eq!((agent_hits, step_hits), (1, 1));
    assert!(w.step.evaluators > 0.0);
    // the prior is right and the Evaluators wrong: the weights stay at zero
    let wrong = verdict(vec![finding("Planner", 1, 1.0, false)]);
    let right_prior = PriorView {
        steps: vec![0.05, 0.3, 0.6, 0.05],
        agents: vec![("Coder".into(), 0.7), ("Planner".into(), 0.3)],
    };
    let cases = vec![FitCase {
        trace: &t,
        verdict: Some(&wrong),
        prior: right_prior,
    }];
    let (w, _, step_hits) = fit(&cases);
    assert_eq!(step_hits, 1);
    assert_eq!((w.step.judge, w.step.evaluators), (0.0, 0.0));
    assert_eq!(level_grid().len(), 162);
}

#[test]
fn weights_files_load_check_and_fall_back_for_other_models() {
    let w = builtin().unwrap();
    assert_eq!(w.format, STACK_FORMAT);
    let text = serde_json::to_string(&weights(1.0, 2.0, true)).unwrap();
    assert_eq!(
        StackWeights::from_json(&text, "w.json")
            .unwrap()
            .step
            .evaluators,
        2.0
    );
    let bad = text.replace("2.0", "-1.0");
    let e = StackWeights::from_json(&bad, "w.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("w.json") && e.contains("step.evaluators"), "{e}");
    let e = StackWeights::from_json("{}", "w.json")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("w.json"), "{e}");
    let mut fitted = weights(0.0, 0.0, false);
    fitted.model = Some("local:smollm2-135m".into());
    let (same, msg) = fitted.clone().for_model("local:smollm2-135m");
    assert_eq!((same, msg), (fitted.clone(), None));
    let (other, msg) = fitted.for_model("openai:gpt-4o");
    assert_eq!(other, StackWeights::generic());
    assert!(msg.unwrap().contains("maslens eval stack"));
    assert!(StackWeights::load("/nonexistent/w.json").is_err());
}
