//! `maslens optimize` on the SIMULATED multi-agent system (`--simulation`: a deterministic test
//! environment, not a model) and `maslens credit` through the binary. The LLM answers of
//! `maslens credit` come from the fixture OpenAI-compatible server
//! (`maslens_llm::testing::server::FakeServer`: hand-written replies, **not a model**); the
//! embedded-model run is in `credit_e2e.rs`.

mod common;
use common::*;

use maslens_llm::testing::server::{last_user, FakeServer, Handler, Reply};
use maslens_trace::Trace;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

fn simulate(dir: &Path) -> Output {
    let out = dir.join("sim");
    maslens(
        dir,
        &[
            "optimize",
            "--simulation",
            "--seeds",
            "1,2",
            "--sim-questions",
            "160",
            "--opt-size",
            "40",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    )
    .output()
    .unwrap()
}

#[test]
fn optimize_simulation_writes_every_report_section() {
    let dir = tempfile::tempdir().unwrap();
    let o = simulate(dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let methods: Vec<&str> = summary["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, vec!["baseline", "black-box", "ours"]);
    let acc = |i: usize| summary["summary"][i]["mean"].as_f64().unwrap();
    assert!(acc(2) > acc(0), "ours {} vs baseline {}", acc(2), acc(0));
    let out = dir.path().join("sim");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for section in [
        "Accuracy on the held-out set",
        "Outcome shift",
        "Overall statistics",
        "by the round at which the debate ended",
        "Failure-pattern distribution",
        "by round and failure pattern (ours)",
        "Role utterances by round",
        "Credit, seed 1, iteration 1",
        "Verbalized BCD iterations",
        "Prompts before and after",
    ] {
        assert!(md.contains(section), "missing {section}");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.matches("<svg").count() >= 4,
        "heatmap, two curves and label plots"
    );
    assert!(html.contains("Role x round credit") && html.contains("accuracy vs LLM calls"));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["seeds"].as_array().unwrap().len(), 2);
    // Held-out runs are maslens traces with rounds and phases.
    let traces = std::fs::read_to_string(out.join("traces/ours-seed1.jsonl")).unwrap();
    let first: Trace = serde_json::from_str(traces.lines().next().unwrap()).unwrap();
    assert_eq!(first.source.format, "debate");
    assert_eq!(first.steps.len(), 8);
    assert_eq!(first.steps[3].phase.as_deref(), Some("aggregation"));
    assert_eq!(first.steps[7].round, Some(1));
    assert_eq!(traces.lines().count(), 120);
}

/// Fixture replies: consistent AgentTurnEval verdicts (from the gold letter and the answer in
/// the request), flat peer and window scores.
fn fixture() -> Handler {
    Arc::new(|body: &Value, _| {
        let u = last_user(body);
        let after = |needle: &str| {
            u.split(needle)
                .nth(1)
                .map(|s| s.trim_start().chars().next().unwrap_or('?'))
        };
        let text = if u.contains("Agents to score:") {
            let names: Vec<&str> = u
                .split("Agents to score: ")
                .nth(1)
                .unwrap_or("")
                .split(". Return")
                .next()
                .unwrap_or("")
                .split(", ")
                .collect();
            let scores: serde_json::Map<String, Value> =
                names.iter().map(|n| (n.to_string(), json!(3))).collect();
            if u.contains("Messages of window") {
                json!({"scores": scores, "segment_score": 2}).to_string()
            } else {
                json!({"scores": scores}).to_string()
            }
        } else if u.contains("Gold correct answer:") {
            let gold = after("Gold correct answer:");
            let ans =
                after("<agent_answer>\nAnswer:").or_else(|| after("<aggregation_output>\nAnswer:"));
            if gold.is_some() && gold == ans {
                json!({"correctness": "correct", "failure_pattern": "NONE", "explanation": "fine", "score": 5}).to_string()
            } else {
                json!({"correctness": "incorrect", "failure_pattern": "KNOWLEDGE_DEFICIT", "explanation": "wrong", "score": 1}).to_string()
            }
        } else if u.contains("Messages of the agent") {
            json!({"failure_pattern": "NONE", "explanation": "useful", "score": 4}).to_string()
        } else {
            "not json".to_string()
        };
        Reply::Text(text)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_on_debate_and_whowhen_traces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let o = tokio::task::spawn_blocking(move || simulate(&d))
        .await
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let server = FakeServer::start(fixture()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let traces = dir.path().join("sim/traces/baseline-seed1.jsonl");
    let out = dir.path().join("credit.json");
    let html = dir.path().join("credit.html");
    let verdicts = dir.path().join("verdicts.jsonl");
    let o = run(maslens(
        dir.path(),
        &[
            "credit",
            traces.to_str().unwrap(),
            "--limit",
            "4",
            "--model",
            &spec,
            "--cache-mode",
            "off",
            "--out",
            out.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
            "--traces-out",
            verdicts.to_str().unwrap(),
            "--db",
            dir.path().join("m.db").to_str().unwrap(),
            "-q",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // `--db`: the credit run is stored as written to --out.
    let store = maslens_store::Store::open(&maslens_store::url_from_arg(
        dir.path().join("m.db").to_str().unwrap(),
    ))
    .await
    .unwrap();
    let stored = store
        .reports(maslens_store::diagnosis::ReportKind::Credit)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].3, v);
    assert_eq!(
        v["table"]["roles"],
        json!(["analyst", "skeptic", "synthesizer"])
    );
    assert_eq!(v["table"]["rounds"], json!(["round 1", "round 2"]));
    let t0 = &v["traces"][0];
    assert_eq!(t0["mode"], "debate-mcq");
    // c = 0.5*q + 0.5*0.6 with q in {1.0, 0.2}
    for c in t0["c"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap())
    {
        let c = c.as_f64().unwrap();
        assert!((c - 0.8).abs() < 1e-9 || (c - 0.4).abs() < 1e-9, "{c}");
    }
    assert!(v["table"]["round_credit"][0].as_f64().is_some());
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    let first: Trace = serde_json::from_str(
        std::fs::read_to_string(&verdicts)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first.labels.verdicts[0].method, "credit/role-segment");

    // A Who&When trace has no rounds or phases: fixed windows, generic critics.
    let ww = data("whowhen/Algorithm-Generated/1.json");
    let out2 = dir.path().join("ww.json");
    let o = run(maslens(
        dir.path(),
        &[
            "credit",
            ww.to_str().unwrap(),
            "--window",
            "4",
            "--model",
            &spec,
            "--cache-mode",
            "off",
            "--out",
            out2.to_str().unwrap(),
            "-q",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out2).unwrap()).unwrap();
    let t = &v["traces"][0];
    assert_eq!(t["mode"], "generic");
    assert_eq!(t["segmenting"], "windows");
    assert_eq!(t["segments"][0], "window 1");
    // q = 0.8 and p = 0.6 everywhere an agent acted -> c = 0.7; segment score 0.4.
    let cs: Vec<f64> = t["c"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().filter_map(Value::as_f64))
        .collect();
    assert!(
        !cs.is_empty() && cs.iter().all(|c| (c - 0.7).abs() < 1e-9),
        "{cs:?}"
    );
    assert!((v["table"]["round_credit"][0].as_f64().unwrap() - 0.4).abs() < 1e-9);
    assert!(
        v.get("systems").is_none(),
        "one system: its table is the run's"
    );
    // Two systems (a debate and a Who&When run share no agent): a table each, never one table
    // whose roles mix both.
    let (out3, html3) = (dir.path().join("two.json"), dir.path().join("two.html"));
    let o = run(maslens(
        dir.path(),
        &[
            "credit",
            ww.to_str().unwrap(),
            traces.to_str().unwrap(),
            "--limit",
            "2",
            "--window",
            "4",
            "--model",
            &spec,
            "--cache-mode",
            "off",
            "--out",
            out3.to_str().unwrap(),
            "--html",
            html3.to_str().unwrap(),
            "-q",
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out3).unwrap()).unwrap();
    let systems = v["systems"].as_array().expect("a table per system");
    assert_eq!(systems.len(), 2, "{v}");
    assert_eq!(
        systems[1]["table"]["roles"],
        json!(["analyst", "skeptic", "synthesizer"])
    );
    let ww_roles = systems[0]["table"]["roles"].as_array().unwrap();
    assert!(!ww_roles.iter().any(|r| r == "analyst"), "{ww_roles:?}");
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains("come from 2 multi-agent systems"), "{md}");
    assert!(
        md.contains("System 1 of 2") && md.contains("System 2 of 2"),
        "{md}"
    );
    let page = std::fs::read_to_string(&html3).unwrap();
    assert_eq!(page.matches("<svg").count(), 2, "a heat map per system");
    // Unreadable input: a clear error, the run goes on with the readable files.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let o = run(maslens(
        dir.path(),
        &[
            "credit",
            bad.to_str().unwrap(),
            ww.to_str().unwrap(),
            "--window",
            "50",
            "--model",
            &spec,
            "--cache-mode",
            "off",
            "-q",
        ],
    ))
    .await;
    // Exit 1: the command ran and scored the readable trace, but skipped a file.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad.json"), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("window 1"));
}

/// Issue 17 item 5: `--sweep` runs one experiment per setting on the same split, and
/// `only_round` (the one-round-at-a-time ablation) lets Phase B rewrite only that round's
/// aggregator.
#[test]
fn optimize_sweep_runs_every_setting_and_only_round_restricts_phase_b() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let o = maslens(
        dir.path(),
        &[
            "optimize",
            "--simulation",
            "--seeds",
            "1",
            "--sim-questions",
            "120",
            "--opt-size",
            "40",
            "--blocks",
            "aggregators-only",
            "--buffer-m",
            "1",
            "--tau",
            "0.9",
            "--no-black-box",
            "--no-curves",
            "--no-final-critic",
            "--sweep",
            "round=1,2",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let sweep: Value = serde_json::from_slice(&o.stdout).unwrap();
    let labels: Vec<&str> = sweep
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["setting"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["only_round=1", "only_round=2"]);
    let md = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    assert!(
        md.contains("| only_round=1 |") && md.contains("| only_round=2 |"),
        "{md}"
    );
    let mut rewritten = Vec::new();
    for r in [1, 2] {
        let report: Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("only_round={r}/report.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(report["config"]["optimizer"]["only_round"], r);
        let targets: Vec<String> = report["seeds"][0]["bcd"]["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|it| it["rewrites"].as_array().unwrap().clone())
            .map(|w| w["target"].as_str().unwrap().to_string())
            .filter(|t| t.starts_with("aggregator:"))
            .collect();
        for t in &targets {
            assert_eq!(
                t,
                &format!("aggregator:round {r}"),
                "only round {r} may change"
            );
        }
        rewritten.push(targets.len());
    }
    assert!(
        rewritten.iter().any(|n| *n > 0),
        "some aggregator was rewritten: {rewritten:?}"
    );
    // A round the debate does not have is refused before anything runs.
    let o = maslens(
        dir.path(),
        &["optimize", "--simulation", "--only-round", "9"],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--only-round 9"), "{}", stderr(&o));
}
