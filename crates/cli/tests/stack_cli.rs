//! `maslens eval stack` end to end on real Who&When files (read in place), with pipeline verdicts
//! written here (hand-made, not a model): a "pipeline" whose Judge names the labelled step on
//! half of the cases and the first step on the other half. The nested cross-validation must
//! report the prior, the pipeline and the stack on the same folds, and the weights fit on every
//! case must trust a Judge that is right half the time.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/whowhen");

fn maslens(home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_maslens"));
    c.env("MASLENS_HOME", home).env_remove("MASLENS_CACHE");
    c
}

/// A pipeline verdict naming (agent, step) through its Judge alone.
fn verdict(trace: &str, agent: &str, step: usize) -> Value {
    let finding =
        json!({"agent": agent, "step": step, "rationale": "hand-made", "confidence": 1.0});
    json!({
        "trace": trace, "method": "locate/all-at-once+3eval", "protocol": "all-at-once",
        "variant": "verified", "model": "openai:hand-made", "agent": agent, "step": step,
        "step_excerpt": null, "rationale": "hand-made", "confidence": 1.0, "source": "judge",
        "judge": {"protocol": "all-at-once", "finding": finding, "stats": {},
                  "strategy": {"kind": "full"}, "trail": []},
        "evaluators": [], "vote": null,
        "long_trace": {"strategy": {"kind": "full"}, "judge": null, "evaluators": null,
                       "context_size": null, "trace_tokens": 0},
        "usage": {}, "prompt_versions": ""
    })
}

#[test]
fn eval_stack_reports_three_methods_on_the_same_folds_and_fits_weights() {
    let dir = tempfile::tempdir().unwrap();
    // The verdicts: the labelled step for every other case, the first step for the rest.
    let mut lines = String::new();
    let mut n = 0;
    for sub in ["Algorithm-Generated", "Hand-Crafted"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(format!("{DATA}/{sub}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            let raw: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            let id = format!("{sub}/{}", f.file_stem().unwrap().to_string_lossy());
            let history = raw["history"].as_array().unwrap();
            let who = |i: usize| -> String {
                let h = &history[i];
                h["name"]
                    .as_str()
                    .or(h["role"].as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let step: usize = raw["mistake_step"].as_str().unwrap().parse().unwrap();
            let (a, s) = if n % 2 == 0 {
                (who(step), step)
            } else {
                (who(0), 0)
            };
            lines.push_str(&verdict(&id, &a, s).to_string());
            lines.push('\n');
            n += 1;
        }
    }
    lines.push_str("not a verdict\n");
    let vfile = dir.path().join("verdicts.jsonl");
    std::fs::write(&vfile, lines).unwrap();
    let weights = dir.path().join("stack.json");
    let report = dir.path().join("report.json");
    let out = maslens(dir.path())
        .args([
            "--json",
            "eval",
            "stack",
            &format!("whowhen:{DATA}"),
            "--subset",
            "Algorithm-Generated/1",
            "--verdicts",
            vfile.to_str().unwrap(),
            "--folds",
            "3",
            "--inner-folds",
            "2",
            "-o",
            weights.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
            "--repeat-seeds",
            "3,7",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // the bad line is reported (file and line), and makes the exit code 1
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("verdicts.jsonl: line 99"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["report"]["protocols"][0];
    assert_eq!(p["protocol"], "nested-cv3x2-grouped");
    let d = p["description"].as_str().unwrap();
    assert!(d.contains("grouped by task question"), "{d}");
    assert!(d.contains("model openai:hand-made"), "{d}");
    let methods: Vec<&str> = p["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["prior (nested)", "llm pipeline", "stacked (nested)"]
    );
    let rules: Vec<&str> = (p["methods"].as_array().unwrap().iter())
        .map(|m| m["config"]["pair_rule"].as_str().unwrap())
        .collect();
    assert_eq!(
        rules[1..],
        ["coherent", "independent"],
        "the verdict's pair; the stack's levels"
    );
    // each method's report is the eval report, with the baselines on the same cases inside
    assert!(
        p["methods"][2]["baselines"]["first-agent"]["step_accuracy"]["n"]
            == p["methods"][2]["step_accuracy"]["n"]
    );
    let step = |m: &str| -> u64 {
        let r = p["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["method"] == m)
            .unwrap();
        let s = &r["step_accuracy"];
        assert!(s["ci95"][0].as_f64().unwrap() <= s["value"].as_f64().unwrap());
        s["k"].as_u64().unwrap()
    };
    let cases = p["methods"][0]["step_accuracy"]["n"].as_u64().unwrap();
    assert!(cases >= 15, "{cases}");
    // the hand-made Judge is right on every other case
    assert!(step("llm pipeline") >= cases / 2 - 1);
    // the weights written are the ones printed, fit for the verdicts' model, and they trust
    // the Judge at the step level
    let w: Value = serde_json::from_str(&std::fs::read_to_string(&weights).unwrap()).unwrap();
    assert_eq!(w, v["weights"]);
    assert_eq!(w["model"], "openai:hand-made");
    assert!(w["step"]["judge"].as_f64().unwrap() > 0.0, "{w}");
    assert!(w["note"].as_str().unwrap().contains("eval stack"), "{w}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r, v["report"]);

    // the fold seeds: the report's (7) first, 7 again not repeated, then 3; the report's row is
    // the report's pooled hits
    let seeds = v["seeds"].as_array().unwrap();
    assert_eq!(seeds.len(), 2, "{seeds:?}");
    assert_eq!(
        (seeds[0]["seed"].as_u64(), seeds[1]["seed"].as_u64()),
        (Some(7), Some(3))
    );
    assert_eq!(
        seeds[0]["stacked"][1].as_u64().unwrap(),
        step("stacked (nested)")
    );
    assert_eq!(
        seeds[0]["prior"][1].as_u64().unwrap(),
        step("prior (nested)")
    );
    assert_eq!(seeds[0]["llm"][1].as_u64().unwrap(), step("llm pipeline"));
    assert_eq!(seeds[0]["cases"].as_u64().unwrap(), cases);
    // a repeated seed gives what a run with that --seed reports; the text shows the table
    let report3 = dir.path().join("report3.json");
    let out = maslens(dir.path())
        .args([
            "eval",
            "stack",
            &format!("whowhen:{DATA}"),
            "--subset",
            "Algorithm-Generated/1",
            "--verdicts",
            vfile.to_str().unwrap(),
            "--folds",
            "3",
            "--inner-folds",
            "2",
            "--seed",
            "3",
            "--report",
            report3.to_str().unwrap(),
            "--repeat-seeds",
            "7",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let r3: Value = serde_json::from_str(&std::fs::read_to_string(&report3).unwrap()).unwrap();
    let hits = |m: &str| -> [u64; 2] {
        let g = &r3["protocols"][0]["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["method"] == m)
            .unwrap();
        [
            g["agent_accuracy"]["k"].as_u64().unwrap(),
            g["step_accuracy"]["k"].as_u64().unwrap(),
        ]
    };
    let pair = |x: &Value| [x[0].as_u64().unwrap(), x[1].as_u64().unwrap()];
    assert_eq!(hits("stacked (nested)"), pair(&seeds[1]["stacked"]));
    assert_eq!(hits("prior (nested)"), pair(&seeds[1]["prior"]));
    assert_eq!(hits("llm pipeline"), pair(&seeds[1]["llm"]));
    let row = |h: &Value| {
        let f = |k: &str| format!("{} / {}", h[k][0], h[k][1]);
        format!(
            "| {} | {} | {} | {} | {} |",
            h["seed"],
            h["cases"],
            f("stacked"),
            f("prior"),
            f("llm")
        )
    };
    for h in seeds {
        assert!(text.contains(&row(h)), "{text}");
    }
    assert!(text.contains("| sum of 2 |"), "{text}");
}
