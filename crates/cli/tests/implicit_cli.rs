//! `maslens scan`, `select`, `repair`, `replay-stats` and `advantages` through the binary.
//! LLM answers come from the fixture OpenAI-compatible server
//! (`maslens_llm::testing::server::FakeServer`: hand-written replies, **not a model**); the
//! embedded-model runs are in `implicit_e2e.rs`.

mod common;
use common::*;

use maslens_llm::testing::server::{last_user, FakeServer, Reply};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// First line of the content of step `k` in a rendered prompt (what a careful judge quotes).
fn step_line(prompt: &str, k: usize) -> Option<String> {
    let at = prompt.find(&format!("Step {k} | agent: "))?;
    let rest = &prompt[at..];
    let body = &rest[rest.find('\n')? + 1..];
    let line = body.lines().find(|l| l.trim().len() > 10)?;
    Some(line.trim().chars().take(60).collect())
}

/// Fixture replies: the detector reports one IF at step 1 quoting that step, and one at step 0
/// with an invented quote (to be flagged); absorption says unresolved propagation; repair
/// returns a labelled correction.
fn fixture_handler(prompts: Arc<Mutex<Vec<String>>>) -> maslens_llm::testing::server::Handler {
    Arc::new(move |body: &Value, _| {
        let u = last_user(body);
        prompts.lock().unwrap().push(u.clone());
        let text = if u.starts_with("Analyze this multi-agent execution trace") {
            let quote = step_line(&u, 1).unwrap_or_default();
            let agent = u
                .find("Step 1 | agent: ")
                .map(|i| {
                    u[i + 16..]
                        .split([':', ' ', '\n'])
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default();
            json!({"implicit_failures": [
                {"error_step": 1, "error_agent": agent, "error_type": "wrong_action", "error_description": "fixture",
                 "error_evidence": quote, "severity": "medium", "confidence": "high"},
                {"error_step": 0, "error_agent": "Nobody", "error_type": "hallucination", "error_description": "fixture",
                 "error_evidence": "zebra quantum marmalade telescope", "severity": "low", "confidence": "low"}
            ], "summary": {"total_implicit_failures": 2, "overall_process_assessment": "fixture"}})
            .to_string()
        } else if u.starts_with("Classify how the execution trace handles") {
            r#"{"absorption_pattern":"unresolved_propagation","confidence":"medium","rationale":"fixture"}"#.to_string()
        } else if u.contains("Produce a single corrected version") {
            "FixedMessage: fixture correction".to_string()
        } else {
            "not json".to_string()
        };
        Reply::Text(text)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_reports_then_repair_writes_matched_plans() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let server = FakeServer::start(fixture_handler(prompts.clone()))
        .await
        .unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let ww1 = data("whowhen/Algorithm-Generated/1.json");
    let ww2 = data("whowhen/Hand-Crafted/10.json");
    let aegis = data("aegis/sample.jsonl");
    let out = dir.path().join("scan.json");
    let md = dir.path().join("scan.md");
    let o = run(maslens(
        dir.path(),
        &[
            "scan",
            ww1.to_str().unwrap(),
            ww2.to_str().unwrap(),
            aegis.to_str().unwrap(),
            "--limit",
            "3",
            "--model",
            &spec,
            "--cache-mode",
            "off",
            "--out",
            out.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
            "--db",
            dir.path().join("m.db").to_str().unwrap(),
            "-q",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let traces = v["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 3);
    // `--db`: each scan stored as a diagnosis with its counted event, weighted.
    let store = maslens_store::Store::open(&maslens_store::url_from_arg(
        dir.path().join("m.db").to_str().unwrap(),
    ))
    .await
    .unwrap();
    for t in traces {
        let d = store.diagnoses(t["id"].as_str().unwrap()).await.unwrap();
        assert_eq!(d.len(), 1, "{}", t["id"]);
        assert_eq!(d[0].body.method, "scan");
        assert_eq!(d[0].body.events.len(), 1);
        assert!(d[0].body.events[0].severity.unwrap() > 0.0);
        assert_eq!(d[0].body.risk, t["risk"].as_f64());
    }
    for t in traces {
        // One supported IF counted, the invented one flagged and not counted.
        assert_eq!(t["events"].as_array().unwrap().len(), 1, "{}", t["id"]);
        assert_eq!(t["flagged"].as_array().unwrap().len(), 1);
        let e = &t["events"][0];
        assert_eq!(e["step"], 1);
        assert_eq!(e["absorption"]["label"], "unresolved_propagation");
        // wrong_action (1.1) * unresolved_propagation (1.4) / L
        let l = t["steps"].as_f64().unwrap();
        assert!((t["risk"].as_f64().unwrap() - 1.54 / l).abs() < 1e-9);
        assert!(t["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    }
    let report = &v["report"];
    assert_eq!(report["traces"], 3);
    let all = report["strata"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["outcome"] == "all")
        .unwrap();
    assert_eq!(all["prevalence"], 1.0);
    assert_eq!(all["intensity"], 1.0);
    assert_eq!(report["propagated_share"], 1.0);
    assert_eq!(report["flagged"], 3);
    // Issue 17 item 13: the process metrics of MASIF tables 6 and 9 over the scanned traces.
    let tokens: u64 = traces
        .iter()
        .map(|t| t["trace_tokens"].as_u64().unwrap())
        .sum();
    let process = &report["process"];
    assert_eq!(process["trace_tokens"].as_u64(), Some(tokens));
    assert_eq!(process["ifs_per_task"], 1.0);
    let per_1k = process["ifs_per_1k_tokens"].as_f64().unwrap();
    assert!((per_1k - 3000.0 / tokens as f64).abs() < 1e-9, "{per_1k}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("## Prevalence and intensity by outcome")
            && md.contains("| wrong_action | 3 | 100.0% |")
            && md.contains("## Process metrics (MASIF tables 6 and 9)"),
        "{md}"
    );
    // Detection: 3 calls; absorption: one per counted IF.
    assert_eq!(
        server
            .counts
            .received
            .load(std::sync::atomic::Ordering::SeqCst),
        6
    );
    // Absorption prompts carry no label field names.
    for p in prompts.lock().unwrap().iter() {
        for marker in [
            "mistake_agent",
            "mistake_reason",
            "ground_truth",
            "is_correct",
            "faulty_agents",
        ] {
            assert!(!p.contains(marker), "prompt contains {marker}");
        }
    }

    // Repair the counted IFs of the two Who&When traces.
    let plans = dir.path().join("plans.jsonl");
    let o = run(maslens(
        dir.path(),
        &[
            "repair",
            ww1.to_str().unwrap(),
            ww2.to_str().unwrap(),
            "--scan",
            out.to_str().unwrap(),
            "--model",
            &spec,
            "--cache-mode",
            "off",
            "--out",
            plans.to_str().unwrap(),
            "-q",
        ],
    ))
    .await;
    // One scanned trace (Aegis) is not among the repair inputs: a problem, not an error.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let lines: Vec<Value> = std::fs::read_to_string(&plans)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["intervention"], "noop");
    assert_eq!(lines[1]["intervention"], "fix");
    assert_eq!(lines[1]["step"]["content"], "fixture correction");
    assert_eq!(lines[0]["prefix"].as_array().unwrap().len(), 1);
    assert_eq!(lines[0]["prefix"], lines[1]["prefix"]);
    assert_ne!(lines[0]["step"]["content"], lines[1]["step"]["content"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_missing_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let o = run(maslens(
        dir.path(),
        &[
            "scan",
            missing.to_str().unwrap(),
            "--model",
            "openai:x@http://127.0.0.1:9/v1",
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope.json"), "{}", stderr(&o));
}

/// A hand-written scan file: 10 tasks x 4 candidates; the successful candidate has no IFs,
/// the failures one propagated hallucination each.
fn write_scan_fixture(path: &Path, prm: &Path) {
    let mut lines = String::new();
    let mut prm_lines = String::new();
    for t in 0..10 {
        for i in 0..4 {
            let ok = i == t % 4;
            let events: Vec<Value> = if ok {
                vec![]
            } else {
                vec![
                    json!({"step": 1, "agent": "A", "error_type": "hallucination", "description": "d", "evidence": "e",
                    "severity": "high", "confidence": "high",
                    "evidence_check": {"status": "verbatim", "coverage": 1.0, "agent_matches": true},
                    "windows": [0], "absorption": {"label": "unresolved_propagation", "rationale": "r"}}),
                ]
            };
            let id = format!("t{t}-c{i}");
            let scan = json!({"id": id, "task": format!("task {t}"), "outcome": if ok {"success"} else {"failure"},
                "steps": 10, "events": events, "cost": 0.0, "risk": 0.0, "risk_grouped": 0.0, "windows": 1,
                "abstentions": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "calls": 1, "seconds": 0.0});
            lines.push_str(&format!("{scan}\n"));
            // PRInTS-style raw scores in [-4, 4]: misleading (failures look better).
            let last = if ok { -2.4 } else { 2.4 };
            prm_lines.push_str(&format!("{}\n", json!({"id": id, "scores": [3.2, last]})));
        }
    }
    std::fs::write(path, lines).unwrap();
    std::fs::write(prm, prm_lines).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_reports_if_prm_random_and_sensitivity() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scans.jsonl");
    let prm = dir.path().join("prm.jsonl");
    write_scan_fixture(&scan, &prm);
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "select",
            "--scan",
            scan.to_str().unwrap(),
            "--prm",
            prm.to_str().unwrap(),
            "--prm-range",
            "-4,4",
            "--n",
            "4,8",
            "--trials",
            "100",
            "--seed",
            "3",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let n4 = &v["selection"]["results"][0];
    assert_eq!(n4["n"], 4);
    assert_eq!(n4["tuning_tasks"], 2);
    assert_eq!(n4["test_tasks"], 8);
    assert_eq!(n4["if_scorer"]["accuracy"], 1.0);
    assert_eq!(n4["prm"]["accuracy"], 0.0);
    assert_eq!(n4["random_expected"], 0.25);
    assert_eq!(n4["prm_if"]["accuracy"], 1.0);
    assert_eq!(v["selection"]["results"][1]["test_tasks"], 0);
    // The all-n/a row says why (each task has 4 candidates).
    assert!(
        stderr(&o).contains("note: N = 8: n/a, no test task has 8 candidates"),
        "{}",
        stderr(&o)
    );
    let s = &v["sensitivity"];
    assert_eq!(s["trials"], 100);
    // Two distinct risk values (0 and 0.182): perturbations never reorder them.
    assert_eq!(s["global_min"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advantages_are_hand_computed_and_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("groups.jsonl");
    std::fs::write(
        &input,
        [
            r#"{"group":"g1","id":"a","success":true,"if_cost":0.5}"#,
            r#"{"group":"g2","id":"x","success":true,"if_cost":3}"#,
            r#"{"group":"g1","id":"b","success":true,"if_cost":1.5}"#,
            r#"{"group":"g1","id":"c","success":false,"if_cost":0}"#,
            r#"{"group":"g2","id":"y","success":true,"if_cost":1}"#,
            r#"{"group":"g1","id":"d","success":false,"if_cost":7}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let o = run(maslens(
        dir.path(),
        &["advantages", input.to_str().unwrap()],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = out.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "x", "b", "c", "y", "d"]);
    // g1: y = [1,1,0,0], s = sqrt(1/3); base = 0.5 / (s + 1e-6) = 0.8660239037870368;
    // z(a) = +0.5, z(b) = -0.5. g2 is all-success: zero.
    let base = 0.8660239037870368;
    let adv: Vec<f64> = out
        .iter()
        .map(|v| v["advantage"].as_f64().unwrap())
        .collect();
    let want = [base * 1.5, 0.0, base * 0.5, -base, 0.0, -base];
    for (a, w) in adv.iter().zip(want) {
        assert!((a - w).abs() < 1e-9, "{adv:?}");
    }
    // A bad record is named (file, line, field) and left out; exit code 1.
    std::fs::write(&input, "{\"group\":\"g\",\"id\":\"a\",\"success\":true}\n{\"group\":\"g\",\"id\":\"b\",\"success\":false,\"if_cost\":1}\n").unwrap();
    let o = run(maslens(
        dir.path(),
        &["advantages", input.to_str().unwrap()],
    ))
    .await;
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("groups.jsonl: line 1") && err.contains("if_cost"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_stats_averages_positions_then_traces() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("replays.jsonl");
    let mut lines = Vec::new();
    let mut row = |config: &str,
                   task: &str,
                   trace: &str,
                   step: usize,
                   orig: bool,
                   iv: &str,
                   ok: bool| {
        lines.push(json!({"config": config, "task": task, "trace": trace, "if_step": step, "original_success": orig, "intervention": iv, "success": ok}).to_string());
    };
    // Config A: failed f1 (2 positions: fix 1/2), f2 (fix 1/1), f3 (fix 0/1); noop never rescues.
    for (trace, task, step, fix) in [
        ("f1", "t1", 2, true),
        ("f1", "t1", 5, false),
        ("f2", "t2", 1, true),
        ("f3", "t3", 4, false),
    ] {
        row("A", task, trace, step, false, "noop", false);
        row("A", task, trace, step, false, "fix", fix);
    }
    // Successful s1: both keep success.
    row("A", "t4", "s1", 1, true, "noop", true);
    row("A", "t4", "s1", 1, true, "fix", true);
    row("B", "u1", "g1", 0, false, "noop", true);
    row("B", "u1", "g1", 0, false, "fix", true);
    std::fs::write(&input, lines.join("\n")).unwrap();
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "replay-stats",
            input.to_str().unwrap(),
            "--resamples",
            "2000",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let a = &v[0];
    assert_eq!(a["config"], "A");
    assert_eq!(a["traces"], 4);
    assert_eq!(a["if_positions"], 5);
    // RR_fix = mean(0.5, 1, 0) = 0.5; RR_noop = 0; SPR 1 -> 1.
    assert_eq!(a["rr_noop"], 0.0);
    assert!((a["rr_fix"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(a["spr_noop"], 1.0);
    assert_eq!(a["spr_fix"], 1.0);
    let d = &a["delta_rr"];
    assert!((d["estimate"].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert!(d["lo"].as_f64().unwrap() >= 0.0 && d["hi"].as_f64().unwrap() <= 1.0);
    assert_eq!(d["resamples"], 2000);
    assert_eq!(v[1]["config"], "B");
    assert_eq!(v[1]["delta_rr"]["estimate"], 0.0);
}

/// A trace scan line for `process-stats` (hand-made, not a model's).
fn process_scan(task: &str, success: bool, cost: f64, ifs: usize, tokens: u64) -> String {
    let events: Vec<Value> = (0..ifs)
        .map(|_| {
            json!({"step": 1, "agent": "A", "error_type": "hallucination", "description": "d",
            "evidence": "e", "severity": "high", "confidence": "high",
            "evidence_check": {"status": "verbatim", "coverage": 1.0, "agent_matches": true}})
        })
        .collect();
    json!({"id": format!("{task}-{cost}"), "task": task,
        "outcome": if success {"success"} else {"failure"}, "steps": 4, "events": events,
        "cost": cost, "risk": 0.0, "risk_grouped": 0.0, "windows": 1, "abstentions": [],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "calls": 1, "seconds": 0.0,
        "trace_tokens": tokens})
    .to_string()
}

/// Issue 17 item 13: `process-stats` gives table 9's metrics for one scan and table 6's
/// comparison for two, paired by task, with exact permutation p-values and Holm adjustment
/// (three tasks: 8 swaps; hand-computed in `maslens_implicit::process`'s tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_stats_reports_densities_and_holm_adjusted_permutation_tests() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("grpo.jsonl");
    let new = dir.path().join("if-grpo.jsonl");
    std::fs::write(
        &base,
        [
            process_scan("t1", true, 1.0, 1, 1000),
            process_scan("t2", true, 2.0, 2, 1000),
            process_scan("t3", false, 3.0, 3, 1000),
        ]
        .join("\n"),
    )
    .unwrap();
    std::fs::write(
        &new,
        [
            process_scan("t1", true, 0.0, 0, 1000),
            process_scan("t2", true, 1.0, 1, 1000),
            process_scan("t3", true, 1.0, 1, 1000),
            process_scan("t4", true, 9.0, 9, 1000),
        ]
        .join("\n"),
    )
    .unwrap();
    let o = run(maslens(
        dir.path(),
        &["--json", "process-stats", base.to_str().unwrap()],
    ))
    .await;
    let m = stdout_json(&o);
    assert_eq!(m["traces"], 3);
    assert_eq!(m["if_cost_per_task"], 2.0);
    assert_eq!(m["if_cost_per_1k_tokens"], 2.0); // 1000 * 6 / 3000
    let out = dir.path().join("cmp.json");
    let o = run(maslens(
        dir.path(),
        &[
            "process-stats",
            base.to_str().unwrap(),
            new.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 new-only tasks left out"),
        "{}",
        stderr(&o)
    );
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("| IF Cost / Task | 2.00 -> 0.67 | -66.67% | 0.2500 | 1.0000 |"),
        "{md}"
    );
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        (c["tasks"].as_u64(), c["exact"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(c["permutations"], 8);
    let acc = &c["tests"][0];
    assert_eq!(acc["metric"], "accuracy");
    assert_eq!(acc["p"], 1.0);
    // A bad line is skipped with a warning naming it (exit 1), or stops the run with --strict.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        format!("{}\nnot json\n", process_scan("t1", true, 1.0, 1, 10)),
    )
    .unwrap();
    let o = run(maslens(
        dir.path(),
        &["process-stats", bad.to_str().unwrap()],
    ))
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad.jsonl"), "{}", stderr(&o));
    let o = run(maslens(
        dir.path(),
        &["process-stats", bad.to_str().unwrap(), "--strict"],
    ))
    .await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
