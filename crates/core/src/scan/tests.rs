use super::*;

use maslens_eval::run::Silent;
use maslens_implicit::settings::Counting;
use maslens_implicit::{ScanOptions, ScanSettings, Weights};
use maslens_llm::testing::ScriptedModel;
use maslens_trace::{AgentKind, Outcome};
use serde_json::json;

fn trace(id: &str, task: &str, outcome: Outcome) -> Trace {
    maslens_trace::TraceBuilder::new(id)
        .task(task)
        .outcome(outcome)
        .agent("Solver", AgentKind::Worker)
        .step("Solver", "2 + 2 = 5")
        .step("Solver", "Checking: 2 + 2 = 4.")
        .step("Solver", "FINAL 4")
        .build()
}

fn detection() -> String {
    detection_with(&[])
}

/// The detector's answer: the supported reasoning error at step 0, then `extra` events.
fn detection_with(extra: &[serde_json::Value]) -> String {
    let mut events = vec![json!({"error_step": 0, "error_agent": "Solver",
            "error_type": "reasoning_error", "error_description": "d", "error_evidence": "2 + 2 = 5",
            "severity": "low", "confidence": "high"})];
    events.extend_from_slice(extra);
    json!({ "implicit_failures": events }).to_string()
}

/// What a run told its progress, one line per call.
#[derive(Default)]
struct Recorded(std::sync::Mutex<Vec<String>>);

impl Recorded {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Progress for Recorded {
    fn start(&self, cases: usize) {
        self.push(format!("start {cases}"));
    }
    fn case_done(&self) {
        self.push("done".into());
    }
    fn summary(&self, _id: &str, line: &str) {
        self.push(line.into());
    }
    fn error(&self, id: &str, message: &str) {
        self.push(format!("error {id}: {message}"));
    }
    fn stopped(&self, id: &str, why: &str) {
        self.push(format!("stopped {id}: {why}"));
    }
    fn finish(&self) {
        self.push("finish".into());
    }
}

#[tokio::test]
async fn scan_traces_records_settings_scans_and_failures() {
    // Fixture: one detection answer (then the script runs out, so the second trace fails),
    // absorption by rule.
    let m = ScriptedModel::new("fixture")
        .on(
            "implicit/absorb_user",
            r#"{"absorption_pattern":"self_corrected","confidence":"high","rationale":"r"}"#,
        )
        .then(detection());
    let traces = [
        trace("a", "t", Outcome::Failure),
        trace("b", "t", Outcome::Success),
    ];
    let opts = ScanOptions::default();
    let progress = Recorded::default();
    let file = scan_traces(&[&m], &traces, &opts, &progress).await.unwrap();
    assert_eq!(file.format_version, SCAN_FILE_VERSION);
    assert_eq!(file.model, "fixture");
    assert!(file.judges.is_empty());
    assert_eq!(file.traces.len(), 1);
    assert_eq!(file.traces[0].events.len(), 1);
    assert_eq!(file.report.traces, 1);
    assert_eq!(file.errors.len(), 1);
    assert!(file.errors[0].starts_with("b: "), "{:?}", file.errors);
    let cfg = file.config.as_ref().unwrap();
    assert_eq!(cfg.min_judges, Some(1));
    assert_eq!(cfg.overlap_steps, 2);
    let lines = progress.lines();
    assert_eq!(lines[..2], ["start 2", "done"], "{lines:?}");
    assert!(
        lines[2].starts_with("[1/2] a: 1 IF(s), 0 flagged, risk "),
        "{lines:?}"
    );
    assert!(lines[3].starts_with("error b: "), "{lines:?}");
    assert_eq!(lines[4..], ["done", "finish"], "{lines:?}");
    assert!(matches!(
        scan_traces(&[], &traces, &opts, &Silent).await,
        Err(ImplicitError::Config(_))
    ));
}

/// Issue 17 item 11: `--counting paper` counts every detected event, and the report says
/// which counting ran and how many counted events the evidence check doubted.
#[tokio::test]
async fn paper_counting_counts_what_the_check_would_drop_and_says_so() {
    let t = trace("s1", "Add 2 and 2.", Outcome::Success);
    // The second event quotes nothing the trace says: the evidence check doubts it.
    let detected = detection_with(&[json!({"error_step": 2, "error_agent": "Solver",
            "error_type": "hallucination", "error_description": "d",
            "error_evidence": "the moon is cheese", "severity": "low", "confidence": "high"})]);
    let mut risks = Vec::new();
    // (counting, counted IFs, flagged, counted but doubted, report line)
    for (counting, events, flagged, doubted, line) in [
        (Counting::Maslens, 1, 1, 0, "Counting: maslens"),
        (Counting::Paper, 2, 0, 1, "Counting: paper"),
    ] {
        let m = ScriptedModel::new("fixture")
            .on(
                "implicit/absorb_user",
                r#"{"absorption_pattern":"peer_repair","confidence":"high","rationale":"r"}"#,
            )
            .then(detected.clone());
        let opts = ScanOptions {
            weights: Weights::default(),
            settings: ScanSettings {
                counting,
                ..Default::default()
            },
        };
        let file = scan_traces(&[&m], std::slice::from_ref(&t), &opts, &Silent)
            .await
            .unwrap();
        let md = maslens_implicit::report::markdown(&file.report, &file.traces);
        assert_eq!(file.traces[0].events.len(), events, "{counting:?}");
        assert_eq!(
            (file.report.flagged, file.report.counted_unsupported),
            (flagged, doubted),
            "{counting:?}"
        );
        assert!(md.contains(line), "{md}");
        risks.push(file.traces[0].risk);
        if counting == Counting::Paper {
            assert!(
                md.contains("1 counted IFs have evidence the check did not find"),
                "{md}"
            );
            let cfg = file.config.as_ref().unwrap();
            assert_eq!(cfg.counting, Counting::Paper);
            assert_eq!(cfg.events_per_window(), 100);
        }
    }
    assert!(risks[1] > risks[0], "{risks:?}");
}

/// A spent budget stops the scan at that trace: the progress hears `stopped` (no error, no
/// `done`), the file keeps the reason, and no later trace is scanned.
#[tokio::test]
async fn a_spent_budget_stops_the_scan_and_says_where() {
    let m = std::sync::Arc::new(ScriptedModel::new("fixture").then(detection()));
    let limits = maslens_llm::budget::Budget {
        max_calls: Some(0),
        ..Default::default()
    };
    let budgeted = maslens_llm::budget::BudgetModel::new(m.clone(), limits, None).unwrap();
    let traces = [
        trace("a", "t", Outcome::Failure),
        trace("b", "t", Outcome::Failure),
    ];
    let progress = Recorded::default();
    let file = scan_traces(&[&budgeted], &traces, &ScanOptions::default(), &progress)
        .await
        .unwrap();
    let lines = progress.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], "start 2");
    assert!(
        lines[1].starts_with("stopped a: budget exhausted (")
            && lines[1].ends_with("reporting the 0 traces scanned"),
        "{lines:?}"
    );
    assert_eq!(lines[2], "finish");
    assert!(file.traces.is_empty());
    assert_eq!(file.errors.len(), 1, "{:?}", file.errors);
    assert!(
        file.errors[0].starts_with("a: budget exhausted: "),
        "{:?}",
        file.errors
    );
    assert_eq!(m.n_calls(), 0);
}
