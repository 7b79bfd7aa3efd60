use super::*;

use maslens_llm::testing::ScriptedModel;
use maslens_trace::AgentKind;
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

#[test]
fn prm_range_parses_and_checks() {
    assert_eq!(
        "-4, 4".parse::<PrmRange>(),
        Ok(PrmRange { lo: -4.0, hi: 4.0 })
    );
    assert_eq!("4".parse::<PrmRange>().unwrap_err(), "must look like LO,HI");
    assert!("x,1".parse::<PrmRange>().unwrap_err().contains("LO"));
    assert!("1,0".parse::<PrmRange>().unwrap_err().contains("LO < HI"));
}

fn scan(id: &str, task: &str, outcome: Outcome, ifs: usize) -> TraceScan {
    let events: Vec<_> = (0..ifs)
        .map(|_| {
            json!({"step": 1, "agent": "A", "error_type": "hallucination", "description": "d",
                "evidence": "e", "severity": "high", "confidence": "high", "windows": [0],
                "evidence_check": {"status": "verbatim", "coverage": 1.0, "agent_matches": true}})
        })
        .collect();
    serde_json::from_value(
        json!({"id": id, "task": task, "outcome": outcome, "steps": 10,
            "events": events, "cost": 0.0, "risk": 0.0, "risk_grouped": 0.0, "windows": 1,
            "abstentions": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "calls": 1,
            "seconds": 0.0}),
    )
    .unwrap()
}

#[test]
fn select_warns_about_unknown_outcomes_and_missing_prm() {
    let mut scans = Vec::new();
    for t in 0..6 {
        for c in 0..2 {
            let ok = c == t % 2;
            let outcome = if ok {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            scans.push(scan(
                &format!("t{t}c{c}"),
                &format!("task {t}"),
                outcome,
                usize::from(!ok),
            ));
        }
    }
    scans.push(scan("u", "task 0", Outcome::Unknown, 0));
    let prm: PrmScores = [("t0c0".to_string(), vec![0.5])].into();
    let opts = SelectOptions {
        ns: vec![2],
        trials: 10,
        tune_fraction: 0.0,
        ..Default::default()
    };
    let r = select_from_scans(&scans, Some(&prm), &opts).unwrap();
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("trace u: outcome unknown"));
    assert!(r.warnings[1].starts_with("11 candidate(s) have no PRM scores"));
    let n2 = &r.value.selection.results[0];
    assert_eq!(n2.if_scorer.accuracy, Some(1.0));
    assert!(n2.prm.is_none());
    assert_eq!(r.value.sensitivity.as_ref().unwrap().trials, 10);
    let md = r.value.markdown();
    assert!(
        md.starts_with("# Best-of-N selection\n") && md.contains("| 2 | 6 |"),
        "{md}"
    );
    let json = r.value.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v.get("selection").is_some() && v.get("sensitivity").is_some());
    // Sorted keys: `candidates` before `prm_available` before `results` before `seed`.
    let at = |k: &str| json.find(&format!("\"{k}\"")).unwrap();
    assert!(at("candidates") < at("prm_available") && at("results") < at("seed"));
    let bad = SelectOptions {
        tune_fraction: 1.0,
        ..Default::default()
    };
    assert!(select_from_scans(&scans, None, &bad).is_err());
}

#[test]
fn prm_scores_are_normalized_and_bad_lines_warned() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("prm.jsonl");
    std::fs::write(
        &p,
        "{\"id\":\"a\",\"scores\":[-4,4]}\n{\"id\":\"b\",\"step_scores\":[0]}\nnope\n",
    )
    .unwrap();
    let r = read_prm_scores(&p, Some(PrmRange { lo: -4.0, hi: 4.0 })).unwrap();
    assert_eq!(r.value["a"], vec![0.0, 1.0]);
    assert_eq!(r.value["b"], vec![0.5]);
    assert_eq!(r.warnings.len(), 1);
    assert!(r.warnings[0].contains("prm.jsonl: line 3: "));
    let e = read_prm_scores(&dir.path().join("none.jsonl"), None).unwrap_err();
    assert!(e.to_string().starts_with("cannot read ") && e.to_string().contains("none.jsonl"));
}

#[tokio::test]
async fn repair_scanned_reports_pairs_skips_and_unmatched_scans() {
    let t = trace("a", "t", Outcome::Failure);
    let mut s = scan("a", "t", Outcome::Failure, 2);
    s.events[1].step = 99; // not in the trace: skipped
    let m = ScriptedModel::new("fixture").then("FixedMessage: fixed");
    let scans = [s, scan("gone", "t", Outcome::Failure, 1)];
    let mut got = Vec::new();
    let summary = repair_scanned(&m, &[t], &scans, &RepairOptions::default(), |e| {
        got.push(match e {
            RepairEvent::Plans(p) => format!("{} {}", p[0].intervention, p[1].intervention),
            RepairEvent::Skipped(why) => why.to_string(),
        });
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(got[0], "noop fix");
    assert!(got[1].contains("step 99"), "{got:?}");
    assert_eq!(summary.plans, 2);
    assert_eq!(summary.skipped, 1);
    assert_eq!(summary.unmatched_scans, ["gone"]);
}

#[test]
fn replay_and_advantage_jsonl_warn_and_go_on() {
    let rows = [
            r#"{"task":"t","trace":"f","original_success":false,"intervention":"noop","success":false}"#,
            r#"{"task":"t","trace":"f","original_success":false,"intervention":"fix","success":true}"#,
            r#"{"task":"t","trace":"g","original_success":false,"intervention":"redo","success":true}"#,
            r#"{"task":"t","trace":"h","original_success":false,"intervention":"fix","success":true}"#,
        ]
        .join("\n");
    let r = replay_stats_from_jsonl("r.jsonl", rows.as_bytes(), &ReplayStatsOptions::default())
        .unwrap();
    assert_eq!(r.value[0].rr_fix, Some(1.0));
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert_eq!(
        r.warnings[0],
        "r.jsonl: line 3: field intervention: \"redo\" is not noop or fix"
    );
    assert!(r.warnings[1].starts_with("config all: 1 trace(s) lack a matched noop/fix pair"));

    let groups = "{\"group\":\"g\",\"id\":\"a\",\"success\":true,\"if_cost\":1}\n{\"group\":\"g\",\"id\":\"b\"}\n{\"group\":\"g\",\"id\":\"c\",\"success\":false,\"if_cost\":0}\n";
    let a = advantages_from_jsonl("<stdin>", groups.as_bytes()).unwrap();
    assert_eq!(a.value.len(), 2);
    assert!(a.value[0].advantage > 0.0 && a.value[1].advantage < 0.0);
    assert!(
        a.warnings[0].starts_with("<stdin>: line 2: ")
            && a.warnings[0]
                .ends_with(r#"(expected {"group","id","success":bool,"if_cost":number})"#),
        "{:?}",
        a.warnings
    );
}
