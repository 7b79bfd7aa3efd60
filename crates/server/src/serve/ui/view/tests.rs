use super::*;
use maslens_trace::TraceBuilder;

#[test]
fn buckets_cover_the_unit_interval() {
    assert_eq!(bucket(0.0), 0);
    assert_eq!(bucket(0.09), 0);
    assert_eq!(bucket(0.1), 1);
    assert_eq!(bucket(0.99), 9);
    assert_eq!(bucket(1.0), 9);
    assert_eq!(bucket(7.0), 9);
    assert_eq!(bucket(-1.0), 0);
    assert_eq!(bucket(f64::NAN), 0);
}

#[test]
fn highlight_marks_terms_case_insensitively_and_keeps_text() {
    let t = terms("Paris  \"louvre\"");
    let segs = highlight("The LOUVRE is in paris, ünïcode Paris.", &t);
    let joined: String = segs.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(joined, "The LOUVRE is in paris, ünïcode Paris.");
    let marked: Vec<&str> = segs
        .iter()
        .filter(|s| s.mark)
        .map(|s| s.text.as_str())
        .collect();
    assert_eq!(marked, ["LOUVRE", "paris", "Paris"]);
    // Phrases mark their words; OR between words is no word to mark.
    assert_eq!(
        terms(r#""the Louvre" OR paris or OR"#),
        ["the", "louvre", "paris", "or"]
    );
    assert_eq!(terms("w1 w2 w3 w4 w5 w6 w7 w8 w9 w1").len(), 8);
    // No terms, or a term inside a multi-byte character, never splits a character.
    assert_eq!(highlight("ünï", &terms("")).len(), 1);
    assert!(highlight("ü<script>", &terms("<script>"))
        .iter()
        .any(|s| s.mark));
}

#[test]
fn cited_steps_are_later_steps_the_rationale_names() {
    assert_eq!(
        cited_steps(
            "Fixed in step 7 by the Orchestrator; see also Steps 9 and step #12, not step 2.",
            Some(3)
        ),
        [7, 9, 12]
    );
    assert!(cited_steps("no numbers here", Some(1)).is_empty());
    assert_eq!(cited_steps("step 4", None), [4]);
}

#[test]
fn dates_round_trip() {
    for (s, ns) in [
        ("1970-01-01", 0_i64),
        ("2026-12-01", 1_796_083_200_000_000_000),
    ] {
        assert_eq!(parse_date(s), Some(ns));
        assert_eq!(&format_ns(ns)[..10], s);
    }
    assert_eq!(
        format_ns(1_796_083_200_000_000_000 + 3_723_000_000_000),
        "2026-12-01 01:02:03"
    );
    assert_eq!(parse_date("2026-13-01"), None);
    assert_eq!(parse_date("x"), None);
}

#[test]
fn trace_view_lanes_focus_and_strip() {
    let trace = TraceBuilder::new("t1")
        .task("q")
        .step("Planner", "plan the work")
        .step("Coder", "write <b>code</b>")
        .step("Planner", "check")
        .build();
    let summary = RunSummary {
        id: "t1".into(),
        source: "import".into(),
        system: None,
        task: None,
        outcome: None,
        n_steps: 3,
        n_spans: 0,
        agents: None,
        has_root: false,
        first_ns: None,
        last_ns: None,
        received_ns: 0,
        state: "complete".into(),
        located_agent: None,
        located_step: None,
        risk: None,
        trace_hash: Some("h".into()),
        error: None,
        warnings: Vec::new(),
    };
    let prior = Diagnosis {
        id: "d1".into(),
        created_ns: 1,
        body: maslens_store::NewDiagnosis {
            run_id: "t1".into(),
            method: "prior".into(),
            agent: Some("Coder".into()),
            step: Some(1),
            trace_hash: Some("old".into()),
            result: serde_json::json!({"probs": [0.2, 0.6, 0.2]}),
            ..Default::default()
        },
    };
    let v = trace_view(&trace, &summary, &[prior], None, "code");
    assert_eq!(v.lanes.len(), 2);
    assert_eq!(v.steps[1].lane, 1);
    assert!(v.steps[1].decisive && !v.steps[0].decisive);
    assert!(v.steps[1].matched);
    assert_eq!(
        v.strip.iter().map(|c| c.bucket).collect::<Vec<_>>(),
        [3, 9, 3]
    );
    let focus = v.focus.expect("focus");
    assert!(focus.stale, "judged an older trace version");
}

fn stored(method: &str, result: Value) -> Diagnosis {
    Diagnosis {
        id: method.into(),
        created_ns: 1,
        body: maslens_store::NewDiagnosis {
            run_id: "t1".into(),
            method: method.into(),
            result,
            ..Default::default()
        },
    }
}

/// Issue 37 item 7 (d, e): a scan's flagged events come with their step, agent, confidence
/// and why; compare tells "not scanned" from "scanned, 0 found".
#[test]
fn flagged_events_and_not_scanned() {
    let flagged = serde_json::json!({"step": 9, "agent": "Coder", "error_type": "hallucination",
            "confidence": "high", "severity": "low", "description": "d", "evidence": "e",
            "evidence_check": {"status": "unsupported", "coverage": 0.25, "agent_matches": true},
            "flags": ["evidence not found in step 9 (coverage 0.25)"]});
    let doubted = diagnosis_view(
        &stored(
            "scan",
            serde_json::json!({"events": [], "flagged": [flagged, {"step": 1}]}),
        ),
        None,
    );
    assert_eq!(doubted.flagged.len(), 2);
    let f = &doubted.flagged[0];
    assert_eq!((f.step, f.agent.as_str()), (Some(9), "Coder"));
    assert_eq!((f.confidence.as_str(), f.coverage), ("high", Some(0.25)));
    assert_eq!(f.evidence_status.as_deref(), Some("unsupported"));
    assert_eq!(f.reasons, ["evidence not found in step 9 (coverage 0.25)"]);
    // A malformed entry shows what it has.
    assert_eq!(doubted.flagged[1].step, Some(1));
    assert!(doubted.flagged[1].reasons.is_empty());
    let clean = diagnosis_view(
        &stored("scan", serde_json::json!({"events": [], "flagged": []})),
        None,
    );
    let locate = diagnosis_view(&stored("locate", serde_json::json!({})), None);
    let row = |a: &DiagnosisView, b: &DiagnosisView| {
        compare_rows(a, b)
            .into_iter()
            .find(|r| r.field == "implicit failures")
            .map(|r| (r.a, r.b, r.differs))
    };
    assert_eq!(
        row(&clean, &locate),
        Some(("0".into(), "not scanned".into(), true))
    );
    assert_eq!(
        row(&doubted, &clean),
        Some(("0 (2 flagged, not counted)".into(), "0".into(), true))
    );
}

#[test]
fn heatmap_from_a_credit_table() {
    let t = serde_json::json!({
        "roles": ["A", "B"], "rounds": ["round 1", "round 2"],
        "cell": [[0.95, null], [0.1, 0.5]], "cell_n": [[2, 0], [2, 2]],
        "role_credit": [0.95, 0.3], "round_credit": [0.5, null]
    });
    let h = heatmap(&t).expect("heatmap");
    assert_eq!(h.rows[0].1[0].bucket, 9);
    assert_eq!(h.rows[0].1[1].v, None);
    assert_eq!(h.rows[1].2.bucket, 3);
    assert_eq!(h.round_credit[1].v, None);
    let one = |n: &str, value| Lowest {
        names: vec![n.to_string()],
        value,
    };
    assert_eq!(h.weakest, Some(one("B", 0.3)));
    assert_eq!(h.weakest_round, Some(one("round 1", 0.5)));
    assert!(heatmap(&serde_json::json!({"roles": 3})).is_none());
}

#[test]
fn tied_weakest_roles_are_all_named() {
    let t = serde_json::json!({
        "roles": ["A", "B", "C"], "rounds": ["round 1"],
        "cell": [[0.3], [0.3], [0.9]], "role_credit": [0.3, 0.3, 0.9], "round_credit": [0.5]
    });
    let h = heatmap(&t).expect("heatmap");
    let w = h.weakest.expect("weakest");
    assert_eq!(
        (w.names, w.value),
        (vec!["A".to_string(), "B".to_string()], 0.3)
    );
}

#[test]
fn stored_per_trace_credit_gets_a_table_each_and_systems_apart() {
    let credit = |id: &str, agents: &[&str]| {
        serde_json::json!({
            "trace_id": id, "mode": "generic", "segmenting": "auto",
            "agents": agents, "segments": ["round 1"],
            "q": [[0.5], [0.5]], "p": [[0.5], [0.5]], "c": [[0.2], [0.8]],
            "labels": [[null], [null]], "segment_score": [0.6], "abstentions": 0, "calls": 2
        })
    };
    let body = serde_json::json!({"traces": [
        credit("t1", &["Planner", "Coder"]), credit("t2", &["Solver", "Critic"]),
        credit("t3", &["Coder", "Planner"]), {"not": "a trace credit"}
    ]});
    let credits = trace_credits(&body);
    assert_eq!(credits.len(), 3);
    let h = trace_heatmap(&credits[0]).expect("per-trace table");
    assert_eq!(h.rows[0].0, "Planner");
    assert_eq!(h.rows[0].1[0].v, Some(0.2));
    let systems = system_heatmaps(&credits);
    assert_eq!(systems.iter().map(|s| s.traces).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(systems[1].heat.rows.len(), 2);
    assert!(system_heatmaps(&credits[..1]).is_empty());
}

/// A red-team finding: a 16 MiB step and 8 long near-miss terms took 28 s of a server worker
/// (every position tried every term). The marks are found by one substring search per term now:
/// 4 MiB and the same kind of terms take well under a second even in a debug build. Terms
/// longer than 64 characters are not marked, and a step gets at most 2,000 marks.
#[test]
fn highlighting_is_linear_and_bounded() {
    let text = "a".repeat(4 << 20);
    let near_misses: Vec<String> = (0..8).map(|i| format!("{}{i}", "a".repeat(60))).collect();
    let started = std::time::Instant::now();
    let segs = highlight(&text, &near_misses);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(segs.len(), 1, "no term occurs");
    let long = vec!["a".repeat(65)];
    assert_eq!(highlight(&text[..1000], &long).len(), 1, "too long to mark");
    let marks = highlight(&"ab ".repeat(5000), &["ab".to_string()]);
    assert_eq!(marks.iter().filter(|s| s.mark).count(), MAX_MARKS);
    assert_eq!(marks.concat_text(), "ab ".repeat(5000));
}

trait ConcatText {
    fn concat_text(&self) -> String;
}

impl ConcatText for Vec<Seg> {
    fn concat_text(&self) -> String {
        self.iter().map(|s| s.text.as_str()).collect()
    }
}
