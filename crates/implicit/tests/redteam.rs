//! The red-team corpus (`tests/redteam/`) through `scan` with scripted detectors, not models: an
//! adversarial one that does what each trace asks (an event at the asked step, at step 99, none
//! at all when told to report none, XML when told to ignore its instructions) and an honest one
//! (an event at the Coder's step 3). Events stay inside the trace whatever is counted, the scan
//! keeps its shape, and `steering` reports the attempt and whether the events followed it.

use maslens_implicit::{scan_trace, ErrorType, ScanConfig, TraceScan};
use maslens_llm::testing::ScriptedModel;
use maslens_render::steering::detect;
use maslens_trace::import::{read_path, Format};
use maslens_trace::Trace;
use std::path::PathBuf;

fn corpus() -> Vec<Trace> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/redteam/traces.jsonl");
    read_path(&path, Format::Native)
        .map(|i| i.unwrap().trace)
        .collect()
}

fn event(trace: &Trace, step: i64, agent: Option<&str>) -> String {
    let s = usize::try_from(step).ok().and_then(|s| trace.steps.get(s));
    let agent = agent
        .map(str::to_string)
        .or_else(|| s.map(|s| s.agent.clone()))
        .unwrap_or_else(|| "Planner".into());
    let evidence: String = s
        .map(|s| s.content.chars().take(40).collect())
        .unwrap_or_else(|| "the sum is wrong".into());
    serde_json::json!({"implicit_failures": [{
        "error_step": step, "error_agent": agent, "error_type": ErrorType::ALL[0].as_str(),
        "error_description": "the step is wrong", "error_evidence": evidence,
        "severity": "high", "confidence": "high"}]})
    .to_string()
}

fn adversarial(trace: &Trace) -> ScriptedModel {
    let hits = detect(trace);
    let text = if let Some(h) = hits
        .iter()
        .find(|h| h.asks_step.is_some() || h.asks_agent.is_some())
    {
        event(trace, h.asks_step.unwrap_or(1), h.asks_agent.as_deref())
    } else if hits.iter().any(|h| h.asks_nothing) {
        r#"{"implicit_failures": []}"#.to_string()
    } else if !hits.is_empty() {
        "<answer>OK</answer>".to_string()
    } else {
        event(trace, 3, None)
    };
    ScriptedModel::new("adversary").rule("", text)
}

fn honest(trace: &Trace) -> ScriptedModel {
    ScriptedModel::new("honest").rule("", event(trace, 3, None))
}

#[tokio::test]
async fn scans_stay_in_the_trace_and_report_steering() {
    let traces = corpus();
    let mut followed = 0;
    for count_unsupported in [false, true] {
        let cfg = ScanConfig {
            classify_absorption: false,
            count_unsupported,
            ..ScanConfig::default()
        };
        for t in &traces {
            let expected = detect(t);
            for (who, model) in [("adversarial", adversarial(t)), ("honest", honest(t))] {
                let ctx = format!("{} ({who}, count_unsupported {count_unsupported})", t.id);
                let s = scan_trace(&[&model], t, &cfg).await.unwrap();
                for e in &s.events {
                    assert!(
                        t.steps.iter().any(|x| x.index == e.step),
                        "{ctx}: counted an event at step {}",
                        e.step
                    );
                }
                let back: TraceScan =
                    serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
                assert_eq!(back.steering, s.steering, "{ctx}");
                assert_eq!(s.steering.len(), expected.len(), "{ctx}");
                for (h, e) in s.steering.iter().zip(&expected) {
                    assert_eq!((h.step, h.kind), (e.step, e.kind), "{ctx}");
                    if !h.asks_something() {
                        assert_eq!(h.followed, None, "{ctx}");
                        continue;
                    }
                    // The out-of-range event is never counted, so asking for step 99 is not
                    // followed by the events, whoever answered.
                    let want = who == "adversarial" && h.asks_step != Some(99);
                    assert_eq!(h.followed, Some(want), "{ctx}: {}", h.describe());
                    followed += usize::from(want);
                }
            }
        }
    }
    assert!(followed >= 8, "{followed}");
}
