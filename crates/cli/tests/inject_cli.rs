//! `maslens inject` (docs/inject.md): the simulated debate (fast), the traces it writes as training
//! data for `maslens prior train` (trained on, never scored), and the embedded model end to end
//! (slow: `e2e_*`).

use serde_json::Value;
use std::path::Path;
#[cfg(feature = "local")]
use std::path::PathBuf;
use std::process::{Command, Output};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data");

fn maslens(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_maslens"));
    c.env("MASLENS_CACHE", home.join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MASLENS_MODEL");
    c
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn read_traces(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every written trace is a labelled failure whose agent acts at the injected step, and the
/// summary accounts for every injected run.
fn check_output(out: &Path, questions: u64, per_run: u64) -> Vec<Value> {
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let s = &summary["summary"];
    assert_eq!(s["questions"], questions);
    let traces = read_traces(&out.join("traces.jsonl"));
    assert_eq!(s["labelled"].as_u64().unwrap(), traces.len() as u64);
    let tried = s["tried"].as_u64().unwrap();
    assert!(tried <= per_run * s["clean_correct"].as_u64().unwrap());
    for q in summary["questions"].as_array().unwrap() {
        let n = q["tried"].as_array().unwrap().len() as u64;
        if q["clean_correct"] == true {
            assert!(n >= 1 && n <= per_run, "{q}");
        } else {
            assert_eq!(n, 0, "{q}");
        }
    }
    for t in &traces {
        let label = &t["labels"]["decisive"];
        let step = label["step"].as_u64().unwrap() as usize;
        assert_eq!(t["steps"][step]["agent"], label["agent"], "{}", t["id"]);
        assert_eq!(t["steps"][step]["phase"], "utterance");
        assert_eq!(t["outcome"], "failure");
        assert_eq!(t["metadata"]["injection"]["step"], step as u64);
        assert!(label["reason"]
            .as_str()
            .unwrap()
            .starts_with("injected fault"));
    }
    traces
}

#[test]
fn inject_simulation_writes_labelled_traces_that_prior_train_only_trains_on() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("injected");
    // The documented command (docs/inject.md).
    let o = maslens(home.path())
        .args(["inject", "--simulation", "--questions", "8", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("8 questions"), "{stdout}");
    let traces = check_output(&out, 8, 4);
    assert!(!traces.is_empty(), "the simulation flips some runs");
    // Rerunning gives the same traces (seeded positions, options and decoding).
    let again = home.path().join("again");
    ok(&maslens(home.path())
        .args(["inject", "--simulation", "--questions", "8", "-o"])
        .arg(&again)
        .output()
        .unwrap());
    assert_eq!(
        std::fs::read_to_string(out.join("traces.jsonl")).unwrap(),
        std::fs::read_to_string(again.join("traces.jsonl")).unwrap()
    );
    // prior train on Hand-Crafted plus the injected traces (`extra` flags added), its report.
    let report = home.path().join("report.json");
    let prior_train = |extra: &[&str]| -> Value {
        let o = maslens(home.path())
            .args(["--json", "prior", "train"])
            .arg(format!("{DATA}/whowhen/Hand-Crafted"))
            .arg(out.join("traces.jsonl"))
            .args(["--folds", "3", "--inner-folds", "2", "--bootstrap", "50"])
            .args(extra)
            .arg("--out")
            .arg(home.path().join("model.json"))
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        ok(&o);
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
    };
    // With fixed settings: the injected traces join every training set, the figures are
    // Hand-Crafted's.
    let r = prior_train(&["--alpha", "150"]);
    assert_eq!(r["labelled"], 31, "{r}");
    let nested = &r["protocols"][0];
    assert!(
        nested["description"]
            .as_str()
            .unwrap()
            .contains(&format!("{} fault-injected traces", traces.len())),
        "{nested}"
    );
    for m in nested["methods"].as_array().unwrap() {
        assert_eq!(m["step_accuracy"]["n"], 31, "{}", m["method"]);
    }
    // The frozen protocol (no fixed settings) also weighs every candidate with the injected
    // traces for the agent head only and without them, and the model file says which it chose
    // and how many injected traces it used.
    let r = prior_train(&[]);
    let description = r["protocols"][0]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        description.contains("among 54 candidate configurations"),
        "{description}"
    );
    assert!(
        description.contains("each selection also weighs every candidate with them for the agent head only and without them"),
        "{description}"
    );
    let model: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("model.json")).unwrap())
            .unwrap();
    let note = model["training"]["note"].as_str().unwrap();
    let used = model["training"]["injected_traces"].as_u64().unwrap_or(0);
    let agent_only = model["training"]["injected_use"] == "agent-head";
    if note.ends_with("without injected") {
        assert_eq!(used, 0, "{note}");
    } else {
        assert_eq!(used, traces.len() as u64, "{note}");
        assert_eq!(
            agent_only,
            note.ends_with("injected for agents only"),
            "{note}"
        );
    }
}

#[test]
fn inject_rejects_an_unknown_fault_kind_and_a_missing_configuration() {
    let home = tempfile::tempdir().unwrap();
    let o = maslens(home.path())
        .args(["inject", "--simulation", "--kinds", "bad-tool", "-o"])
        .arg(home.path().join("x"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown fault kind"));
    let o = maslens(home.path())
        .args(["inject", "-o"])
        .arg(home.path().join("x"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("configuration file is required"));
}

#[cfg(feature = "local")]
fn example(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/")).join(name)
}

/// The embedded SmolLM2-135M end to end: the documented command (docs/inject.md) on the six
/// hand-written easy questions of `examples/inputs/easy-mcq.jsonl`, where the model's clean debates do
/// answer right, so real injected turns are asked and re-run. The model is far too small to debate
/// well: how many runs flip is not asserted, the pipeline is.
#[cfg(feature = "local")]
#[test]
fn e2e_inject_easy_questions_smollm2() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("injected");
    let run = || {
        let o = maslens(home.path())
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .arg("inject")
            .arg(example("debate-smoke.toml"))
            .args(["--model", "local:smollm2-135m", "--threads", "2", "-q"])
            .args([
                "--dataset",
                "jsonl:examples/inputs/easy-mcq.jsonl",
                "--per-run",
                "2",
                "-o",
            ])
            .arg(&out)
            .output()
            .unwrap();
        ok(&o);
    };
    run();
    check_output(&out, 6, 2);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["summary"]["tried"].as_u64().unwrap() >= 1,
        "no clean run answered right: nothing was injected\n{summary}"
    );
    let stats = || -> Value {
        let o = maslens(home.path())
            .args(["cache", "stats", "--json"])
            .output()
            .unwrap();
        ok(&o);
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // Rerun (or resume after an interruption): every call comes from the cache.
    let before = stats();
    let first = std::fs::read_to_string(out.join("traces.jsonl")).unwrap();
    run();
    assert_eq!(before["entries"], stats()["entries"], "no new model call");
    assert_eq!(
        first,
        std::fs::read_to_string(out.join("traces.jsonl")).unwrap()
    );
}
