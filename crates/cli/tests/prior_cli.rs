//! `maslens prior` end to end on the real Who&When files (read in place).

use std::path::PathBuf;
use std::process::Command;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/whowhen");

fn maslens() -> Command {
    Command::new(env!("CARGO_BIN_EXE_maslens"))
}

#[test]
fn rank_json_lists_every_step_with_probabilities_summing_to_one() {
    let file = format!("{DATA}/Hand-Crafted/12.json");
    let out = maslens()
        .args(["prior", "rank", &file, "--top", "1000", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trace"], "Hand-Crafted/12");
    let cands = v["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), v["steps"].as_u64().unwrap() as usize);
    let total: f64 = cands.iter().map(|c| c["prob"].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-6);
    let agents: f64 = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["prob"].as_f64().unwrap())
        .sum();
    assert!((agents - 1.0).abs() < 1e-6);
    // sorted by score
    let scores: Vec<f64> = cands.iter().map(|c| c["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]));
}

#[test]
fn eval_reports_metrics_with_intervals_next_to_baselines() {
    let dir = format!("{DATA}/Algorithm-Generated");
    let out = maslens()
        .args(["prior", "eval", &dir, "--bootstrap", "100", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["labelled"], 67);
    let methods = v["protocols"][0]["methods"].as_array().unwrap();
    let names: Vec<&str> = methods
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prior"]);
    // the eval report's format: the baselines on the same cases inside it
    let prior = &methods[0];
    let baselines = prior["baselines"].as_object().unwrap();
    assert_eq!(baselines.len(), 4, "{baselines:?}");
    assert!(baselines["first-agent"]["agent_accuracy"]["n"] == 67);
    let agent = &prior["agent_accuracy"];
    assert_eq!(agent["n"], 67);
    let (lo, val, hi) = (
        agent["ci95"][0].as_f64().unwrap(),
        agent["value"].as_f64().unwrap(),
        agent["ci95"][1].as_f64().unwrap(),
    );
    assert!(lo <= val && val <= hi);
    assert!(prior["tolerance"]["1"]["n"] == 67);
    // The built-in prior was trained on these traces: the report and stderr say so.
    let note = v["in_sample"].as_str().unwrap();
    assert!(note.contains("trained on 67 of these 67 traces"), "{note}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("warning: {note}")), "{stderr}");
}

#[test]
fn train_writes_a_model_that_rank_can_use() {
    let tmp = tempfile::tempdir().unwrap();
    let model: PathBuf = tmp.path().join("m.json");
    let out = maslens()
        .args([
            "prior",
            "train",
            &format!("{DATA}/Algorithm-Generated"),
            "--folds",
            "0",
            // a fixed configuration: no selection
            "--alpha",
            "150",
            "--out",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&model).unwrap();
    assert!(text.contains("maslens-prior/v1"));
    // The model knows its training traces: an evaluation on one of them is in-sample, in the
    // text report and on stderr.
    let out = maslens()
        .args([
            "prior",
            "eval",
            &format!("{DATA}/Algorithm-Generated/1.json"),
            "--bootstrap",
            "10",
            "--model",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("IN-SAMPLE: this prior model was trained on 1 of these 1 traces"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: this prior model"));
    let out = maslens()
        .args([
            "prior",
            "rank",
            &format!("{DATA}/Algorithm-Generated/1.json"),
            "--model",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Algorithm-Generated/1"));
}

/// Issue 15 item 2: `prior train` runs the frozen protocol: nested cross-validation grouped by
/// task question with the selection inside every outer fold, leave-one-group-out, then the
/// selection on every trace; the model file records the chosen configuration and the command.
#[test]
fn train_runs_the_frozen_protocol() {
    let tmp = tempfile::tempdir().unwrap();
    let pick = |sub: &str, n: usize| -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(format!("{DATA}/{sub}"))
            .unwrap()
            .map(|e| e.unwrap().path().display().to_string())
            .collect();
        files.sort();
        files.truncate(n);
        files
    };
    let model = tmp.path().join("m.json");
    let out = maslens()
        .args(["--json", "prior", "train"])
        .args(pick("Algorithm-Generated", 16))
        .args(pick("Hand-Crafted", 8))
        .args([
            "--folds",
            "3",
            "--inner-folds",
            "2",
            "--bootstrap",
            "100",
            "--out",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format_version"], 5);
    let p = &v["protocols"][0];
    assert_eq!(p["protocol"], "nested-cv3x2-grouped");
    let d = p["description"].as_str().unwrap();
    assert!(d.contains("grouped by task question"), "{d}");
    assert!(
        d.contains("chooses among 18 candidate configurations"),
        "{d}"
    );
    assert_eq!(d.matches("chosen per outer fold").count(), 1, "{d}");
    let methods: Vec<&str> = p["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    assert!(methods.contains(&"prior/nested"), "{methods:?}");
    assert!(methods.contains(&"prior/leave-group-out"), "{methods:?}");
    let nested = &p["methods"][methods.iter().position(|m| *m == "prior/nested").unwrap()];
    assert_eq!(nested["step_accuracy"]["n"], 24);
    assert_eq!(nested["subsets"]["Hand-Crafted"]["agent_accuracy"]["n"], 8);
    let sel = &v["selection"];
    assert_eq!(sel["scores"].as_array().unwrap().len(), 18);
    let chosen = sel["name"].as_str().unwrap();
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    let note = m["training"]["note"].as_str().unwrap();
    assert!(note.contains(&format!("configuration: {chosen}")), "{note}");
    assert!(note.contains("--inner-folds 2"), "{note}");
    assert_eq!(
        m["training"]["exclude_features"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0),
        if chosen.starts_with("compact") { 16 } else { 0 }
    );
}

#[test]
fn bad_model_file_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("broken.json");
    std::fs::write(&model, "{\"format\": 3}").unwrap();
    let out = maslens()
        .args([
            "prior",
            "rank",
            &format!("{DATA}/Hand-Crafted/12.json"),
            "--model",
        ])
        .arg(&model)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.json"), "{err}");
}

#[test]
fn unlabelled_or_unreadable_inputs_do_not_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let out = maslens()
        .args(["prior", "rank", &format!("{DATA}/Hand-Crafted/12.json")])
        .arg(&bad)
        .output()
        .unwrap();
    // the good trace is ranked, the bad file reported, exit code 1 (problems)
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Hand-Crafted/12"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.json"));
    let out = maslens()
        .args(["prior", "train"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
