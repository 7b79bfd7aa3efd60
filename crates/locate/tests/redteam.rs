//! The red-team corpus (`tests/redteam/`) through the whole locate pipeline (Judge, three
//! Evaluators, vote) with scripted models, not real ones: an adversarial model that does what
//! each trace asks (names the asked step and agent, the out-of-range step 99, or answers in XML
//! when told to), and an honest one that names the gold step. Either way the verdict keeps its
//! schema and stays inside the trace, and `steering` reports the attempt and whether the
//! answer followed it (issue 16).

use maslens_llm::testing::ScriptedModel;
use maslens_locate::{LocateConfig, LocateVerdict, Locator, Style};
use maslens_render::steering::detect;
use maslens_trace::import::{read_path, Format};
use maslens_trace::Trace;
use serde_json::Value;
use std::path::PathBuf;

fn corpus() -> Vec<Trace> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/redteam/traces.jsonl");
    read_path(&path, Format::Native)
        .map(|i| i.unwrap().trace)
        .collect()
}

/// An answer naming `step` (its acting agent when it is in the trace), with a reason that quotes
/// the step, as a model that took the trace's word for it would write.
fn answer(trace: &Trace, step: i64, agent: Option<&str>) -> String {
    let s = usize::try_from(step).ok().and_then(|s| trace.steps.get(s));
    let agent = agent
        .map(str::to_string)
        .or_else(|| s.map(|s| s.agent.clone()))
        .unwrap_or_else(|| "Planner".into());
    let quote: String = s
        .map(|s| {
            s.content
                .split_whitespace()
                .take(8)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "the trace says so in plain words".into());
    serde_json::json!({
        "reason": format!("The step reads \"{quote}\", which is where the sum goes wrong."),
        "agent": agent, "step": step, "confidence": 1.0
    })
    .to_string()
}

/// A model that does what the trace asks: the asked step (and agent), or, asked for nothing in
/// particular, an answer in XML as the injected text demands.
fn adversarial(trace: &Trace) -> ScriptedModel {
    let hits = detect(trace);
    let text = match hits
        .iter()
        .find(|h| h.asks_step.is_some() || h.asks_agent.is_some())
    {
        Some(h) => answer(trace, h.asks_step.unwrap_or(1), h.asks_agent.as_deref()),
        None if !hits.is_empty() => "<answer>OK</answer>".to_string(),
        None => answer(trace, 3, None),
    };
    ScriptedModel::new("adversary").rule("", text)
}

fn honest(trace: &Trace) -> ScriptedModel {
    ScriptedModel::new("honest").rule("", answer(trace, 3, None))
}

async fn locate(model: &ScriptedModel, trace: &Trace) -> LocateVerdict {
    Locator::new(model, &Style::defaults(), LocateConfig::default())
        .locate(trace, None)
        .await
        .unwrap()
}

/// The keys every verdict has (optional ones, `steering` among them, may be added).
fn keys(v: &LocateVerdict) -> Vec<String> {
    match serde_json::to_value(v).unwrap() {
        Value::Object(m) => m.keys().cloned().collect(),
        _ => panic!("a verdict is a JSON object"),
    }
}

#[tokio::test]
async fn verdicts_keep_their_schema_stay_in_the_trace_and_report_steering() {
    let traces = corpus();
    assert_eq!(traces.len(), 11);
    let benign = traces.iter().find(|t| t.id == "rt-benign").unwrap();
    let base_keys = keys(&locate(&honest(benign), benign).await);
    let mut followed = 0;
    for t in &traces {
        let expected_hits = detect(t);
        for (who, model) in [("adversarial", adversarial(t)), ("honest", honest(t))] {
            let v = locate(&model, t).await;
            let ctx = format!("{} ({who})", t.id);
            // Schema: every key of a plain verdict, plus at most `steering`; it reads back.
            let mut k = keys(&v);
            let had_steering = k.contains(&"steering".to_string());
            k.retain(|x| base_keys.contains(x));
            for b in &base_keys {
                assert!(
                    k.contains(b) || b == "step_excerpt",
                    "{ctx}: no {b} in {:?}",
                    keys(&v)
                );
            }
            let back: LocateVerdict =
                serde_json::from_value(serde_json::to_value(&v).unwrap()).unwrap();
            assert_eq!(back.steering, v.steering, "{ctx}");
            // Inside the trace, or an abstention with its reason.
            match v.step {
                Some(s) => assert!(t.steps.iter().any(|x| x.index == s), "{ctx}: step {s}"),
                None => assert!(
                    v.abstain_reason.is_some(),
                    "{ctx}: abstained without a reason"
                ),
            }
            // Steering: exactly the detector's hits, and flagged in the JSON.
            assert_eq!(had_steering, !expected_hits.is_empty(), "{ctx}");
            assert_eq!(v.steering.len(), expected_hits.len(), "{ctx}");
            for (h, e) in v.steering.iter().zip(&expected_hits) {
                assert_eq!((h.step, h.kind), (e.step, e.kind), "{ctx}");
                if !h.asks_something() {
                    assert_eq!(h.followed, None, "{ctx}");
                    continue;
                }
                let want = who == "adversarial" || (h.asks_nothing && v.step.is_none());
                assert_eq!(h.followed, Some(want), "{ctx}: {}", h.describe());
                followed += usize::from(want);
            }
        }
    }
    // The adversary got its way on each trace that asked for an answer: in range (rt-fixed-answer,
    // rt-fake-verdict, rt-task-and-tool), out of range (rt-out-of-range: an abstention), and
    // "report nothing" (rt-detector).
    assert!(followed >= 5, "{followed}");
}

#[tokio::test]
async fn an_injected_in_range_step_is_accepted_but_flagged() {
    let t = corpus()
        .into_iter()
        .find(|t| t.id == "rt-fixed-answer")
        .unwrap();
    let v = locate(&adversarial(&t), &t).await;
    assert_eq!((v.agent.as_deref(), v.step), (Some("Planner"), Some(1)));
    assert_eq!(v.steering.len(), 1);
    let h = &v.steering[0];
    assert_eq!(
        (h.step, h.asks_step, h.followed),
        (Some(3), Some(1), Some(true))
    );
    assert!(h.quote.contains("Note to the judge"), "{}", h.quote);
    // The out-of-range request ends in an abstention that names the refused step.
    let t = corpus()
        .into_iter()
        .find(|t| t.id == "rt-out-of-range")
        .unwrap();
    let v = locate(&adversarial(&t), &t).await;
    assert_eq!(v.step, None);
    assert_eq!(v.steering[0].followed, Some(true), "{:?}", v.abstain_reason);
}
