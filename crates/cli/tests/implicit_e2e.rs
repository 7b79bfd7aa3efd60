//! End-to-end runs of the implicit-failure commands with the embedded SmolLM2-135M-Instruct
//! (`maslens model pull smollm2-135m` / `scripts/fetch-model.sh`). Slow: named `e2e_*`.
//! The model is far too small to judge well; these tests check the pipeline: schema-valid
//! events, reports, replay plans, advantages.
#![cfg(feature = "local")]

use maslens_implicit::TraceScan;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/"
    ))
    .join(rel)
}

/// Runs the binary with the embedded model and a per-test cache. `MASLENS_HOME` is left alone
/// so the model store is found.
fn maslens(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_maslens"))
        .env("MASLENS_CACHE", dir.join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MASLENS_MODEL")
        .args(args)
        .args(["--model", "local:smollm2-135m", "--threads", "2", "-q"])
        .output()
        .unwrap()
}

fn ok(o: &Output) {
    // 0, or 1 when some trace had problems (e.g. an abstention is not a problem, an unreadable
    // record is); never 2.
    assert!(
        matches!(o.status.code(), Some(0) | Some(1)),
        "exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn e2e_scan_whowhen_and_aegis_gives_schema_valid_events_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scan.json");
    let ww = data("whowhen/Algorithm-Generated/47.json");
    let aegis = data("aegis/sample.jsonl");
    let o = maslens(
        dir.path(),
        &[
            "scan",
            ww.to_str().unwrap(),
            aegis.to_str().unwrap(),
            "--limit",
            "2",
            "--detect-max-tokens",
            "512",
            "--max-events",
            "2",
            "--absorb-max-tokens",
            "160",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    ok(&o);
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("## Prevalence and intensity by outcome"),
        "{md}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["model"], "local:smollm2-135m");
    let traces: Vec<TraceScan> =
        serde_json::from_value(v["traces"].clone()).expect("per-trace scans deserialize");
    assert_eq!(traces.len(), 2, "{}", String::from_utf8_lossy(&o.stderr));
    for t in &traces {
        assert!(
            t.usage.prompt_tokens > 0 && t.calls >= 1,
            "{}: no model call recorded",
            t.id
        );
        // Every counted event passed the schema (type, levels) and the evidence check.
        for e in &t.events {
            assert!(
                e.supported(),
                "{}: counted event without supported evidence: {e:?}",
                t.id
            );
            assert!(t.steps > 0 && e.absorption.is_some());
        }
        let by_hand = maslens_implicit::Weights::default().risk(t.weighted_events(), t.steps);
        assert!((t.risk - by_hand).abs() < 1e-12);
    }
    assert_eq!(v["report"]["traces"], 2);
}

#[test]
fn e2e_repair_select_and_advantages_on_small_fixtures() {
    let dir = tempfile::tempdir().unwrap();
    // Hand-written scan fixture: one IF at step 2 (the terminal's output) of a short trace.
    let ww = data("whowhen/Algorithm-Generated/47.json");
    let scan = json!({"id": "Algorithm-Generated/47", "task": "t", "outcome": "failure", "steps": 6,
        "events": [{"step": 2, "agent": "Computer_terminal", "error_type": "failed_tool_use", "description": "the code did not run",
            "evidence": "", "severity": "medium", "confidence": "high",
            "evidence_check": {"status": "verbatim", "coverage": 1.0, "agent_matches": true}, "windows": [0]}],
        "cost": 0.35, "risk": 0.058, "risk_grouped": 0.058, "windows": 1, "abstentions": [],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "calls": 0, "seconds": 0.0});
    let scan_path = dir.path().join("scan.jsonl");
    std::fs::write(&scan_path, format!("{scan}\n")).unwrap();
    let plans = dir.path().join("plans.jsonl");
    let o = maslens(
        dir.path(),
        &[
            "repair",
            ww.to_str().unwrap(),
            "--scan",
            scan_path.to_str().unwrap(),
            "--max-tokens",
            "96",
            "--out",
            plans.to_str().unwrap(),
        ],
    );
    ok(&o);
    let lines: Vec<Value> = std::fs::read_to_string(&plans)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(lines[0]["intervention"], "noop");
    assert_eq!(lines[1]["intervention"], "fix");
    assert_eq!(lines[1]["prefix"].as_array().unwrap().len(), 2);
    assert!(!lines[1]["step"]["content"]
        .as_str()
        .unwrap()
        .trim()
        .is_empty());
    assert_eq!(lines[1]["model"], "local:smollm2-135m");

    // select and advantages need no model; they run on the same kind of small fixtures.
    let mut many = String::new();
    for t in 0..5 {
        for i in 0..4 {
            let mut s = scan.clone();
            s["id"] = json!(format!("t{t}-{i}"));
            s["task"] = json!(format!("task {t}"));
            s["outcome"] = json!(if i == 0 { "success" } else { "failure" });
            if i == 0 {
                s["events"] = json!([]);
            }
            many.push_str(&format!("{s}\n"));
        }
    }
    std::fs::write(&scan_path, many).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args([
            "--json",
            "select",
            "--scan",
            scan_path.to_str().unwrap(),
            "--n",
            "4",
            "--trials",
            "50",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["selection"]["results"][0]["if_scorer"]["accuracy"], 1.0);

    let adv_in = dir.path().join("adv.jsonl");
    std::fs::write(&adv_in, "{\"group\":\"g\",\"id\":\"a\",\"success\":true,\"if_cost\":0.35}\n{\"group\":\"g\",\"id\":\"b\",\"success\":false,\"if_cost\":0}\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args(["advantages", adv_in.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
    let out: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        out[0]["advantage"].as_f64().unwrap() > 0.0 && out[1]["advantage"].as_f64().unwrap() < 0.0
    );
}
