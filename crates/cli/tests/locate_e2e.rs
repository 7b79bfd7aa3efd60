//! End-to-end failure localization with the embedded SmolLM2-135M-Instruct
//! (`maslens model pull smollm2-135m` / `scripts/fetch-model.sh`). Slow: named `e2e_*`.
//! The model is far too small to localize well: its accuracy is not asserted; the pipeline is
//! (every protocol, Judge + 3 Evaluators + vote, well-formed reports, exact usage, prefix reuse).
#![cfg(feature = "local")]

mod common;

use common::data;
use common::tour::{self, TourHome};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test. `MASLENS_E2E_BIN` overrides it: in a shared target directory a
/// concurrent `--no-default-features` build can replace `target/debug/maslens` mid-test with a
/// binary that lacks the embedded backend.
fn bin() -> PathBuf {
    std::env::var_os("MASLENS_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_maslens")))
}

/// The binary with the embedded model and a per-test cache (`MASLENS_HOME` is left alone so
/// the model store is found).
fn maslens(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .env("MASLENS_CACHE", dir.join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MASLENS_MODEL")
        .args(args)
        .args([
            "--model",
            "local:smollm2-135m",
            "--threads",
            "2",
            "-q",
            "--max-answer-tokens",
            "160",
        ])
        .output()
        .unwrap()
}

fn ok(o: &Output) {
    assert!(
        matches!(o.status.code(), Some(0) | Some(1)),
        "exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn assert_well_formed(r: &Value, n: u64) {
    assert_eq!(r["cases"], n);
    for key in ["agent_accuracy", "step_accuracy"] {
        let a = &r[key];
        assert_eq!(a["n"], n, "{key}");
        let (v, lo, hi) = (
            a["value"].as_f64().unwrap(),
            a["ci95"][0].as_f64().unwrap(),
            a["ci95"][1].as_f64().unwrap(),
        );
        assert!(
            lo <= v && v <= hi && (0.0..=1.0).contains(&lo) && hi <= 1.0,
            "{key}: {a}"
        );
    }
    assert!(r["tolerance"]["0"].is_object());
    for k in ["prompt_tokens", "completion_tokens", "calls"] {
        assert!(r["usage"][k].as_u64().unwrap() > 0, "usage.{k}");
    }
    assert!(r["usage"]["seconds"].as_f64().unwrap() > 0.0);
    for b in ["random", "first-agent", "last-agent", "error-keyword"] {
        assert_eq!(r["baselines"][b]["agent_accuracy"]["n"], n, "{b}");
    }
    assert_eq!(r["per_case"].as_array().unwrap().len() as u64, n);
}

#[test]
fn e2e_eval_locate_every_protocol_and_full_pipeline_on_whowhen() {
    let dir = tempfile::tempdir().unwrap();
    // Two short Algorithm-Generated traces (6 and 7 steps), copied into a temporary dataset.
    let ds = dir.path().join("ww").join("Algorithm-Generated");
    std::fs::create_dir_all(&ds).unwrap();
    for f in ["47.json", "30.json"] {
        std::fs::copy(
            data(&format!("whowhen/Algorithm-Generated/{f}")),
            ds.join(f),
        )
        .unwrap();
    }
    let spec = format!("whowhen:{}", dir.path().join("ww").display());
    // Step-by-step and binary search make several calls per trace: one trace for them.
    // The full pipeline (Judge, 3 Evaluators and the vote) runs as the README runs it, below.
    for (protocol, n) in [
        ("all-at-once", 2u64),
        ("step-by-step", 1),
        ("binary-search", 1),
        ("a2p", 1),
        ("taxonomy", 1),
        ("echo", 1),
        ("counterfactual", 1),
    ] {
        let out = dir.path().join(protocol);
        let limit = n.to_string();
        let o = maslens(
            dir.path(),
            &[
                "eval",
                "locate",
                &spec,
                "--method",
                "llm",
                "--protocol",
                protocol,
                "--variant",
                "judge",
                "--limit",
                &limit,
                "--out",
                out.to_str().unwrap(),
            ],
        );
        ok(&o);
        let r = read_json(&out.join("report.json"));
        assert_well_formed(&r, n);
        assert!(std::fs::read_to_string(out.join("report.html"))
            .unwrap()
            .contains("<svg"));
        assert!(std::fs::read_to_string(out.join("report.md"))
            .unwrap()
            .contains("| last-agent |"));
        let verdicts: Vec<Value> = std::fs::read_to_string(out.join("verdicts.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(verdicts.len() as u64, n);
        for v in &verdicts {
            let p = &v["payload"];
            assert_eq!(p["protocol"], protocol);
            assert!(p["long_trace"]["context_size"].as_u64().unwrap() >= 2048);
            assert_eq!(p["variant"], "judge");
            // A location, when given, is a real step whose agent acts there.
            if let (Some(step), Some(agent)) = (v["step"].as_u64(), v["agent"].as_str()) {
                assert!(step < 7);
                assert!(!agent.is_empty());
            }
        }
    }
    full_pipeline_as_the_readme_runs_it();

    // Prior-guided narrowing on a trace far longer than a 2,048-token window (54K characters):
    // one Judge call that sees every step, the built-in prior's top steps in full.
    let o = maslens(
        dir.path(),
        &[
            "--json",
            "locate",
            data("whowhen/Algorithm-Generated/35.json")
                .to_str()
                .unwrap(),
            "--method",
            "llm",
            "--variant",
            "judge-only",
            "--context-size",
            "2048",
            "--prior-narrowing",
        ],
    );
    ok(&o);
    let v: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    let s = &v["payload"]["long_trace"]["judge"];
    assert_eq!(s["kind"], "focused", "{v}");
    assert!(s["steps_full"].as_u64().unwrap() >= 1, "{s}");
    let u = &v["payload"]["usage"];
    assert_eq!(
        u["calls"].as_u64().unwrap() - u["repairs"].as_u64().unwrap(),
        1
    );
    assert!(u["prompt_tokens"].as_u64().unwrap() <= 2048 * 2);
}

/// The README tour's `eval locate` line, verbatim (the default method: the full pipeline, Judge and
/// 3 Evaluators with their repairs, stacked with the prior, on the first Algorithm-Generated case),
/// then `maslens locate --write-back` on that case, answered from the cache the eval filled.
fn full_pipeline_as_the_readme_runs_it() {
    let line = tour::line("$m eval locate whowhen:$D/whowhen/Algorithm-Generated ");
    let out = PathBuf::from(tour::flag_value(&line, "--out"));
    let _ = std::fs::remove_dir_all(&out);
    let home = TourHome::new();
    let o = home.run(&line);
    ok(&o);
    let r = read_json(&out.join("report.json"));
    assert_well_formed(&r, 1);
    assert!(std::fs::read_to_string(out.join("report.md"))
        .unwrap()
        .contains("| last-agent |"));
    let v: Value = serde_json::from_str(
        std::fs::read_to_string(out.join("verdicts.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(v["method"], "stacked");
    let p = &v["payload"]["pipeline"];
    assert_eq!(p["protocol"], "all-at-once", "{v}");
    assert_eq!(p["evaluators"].as_array().unwrap().len(), 3);
    assert!(p["vote"].is_object());
    assert!(p["long_trace"]["context_size"].as_u64().unwrap() >= 2048);
    // Judge and Evaluators share the trace prefix: the backend reports reused tokens.
    assert!(
        r["usage"]["cached_tokens"].as_u64().unwrap() > 0,
        "prefix reuse: {}",
        r["usage"]
    );
    assert!(
        r["usage"]["calls"].as_u64().unwrap() >= 4,
        "Judge + 3 Evaluators"
    );

    // `maslens locate` on that trace with write-back: the same calls, from the cache.
    let trace = v["trace"].as_str().unwrap();
    let wb = out.join("wb.jsonl");
    let o = home.run(&format!(
        "$m --json locate $D/whowhen/{trace}.json --write-back {}",
        wb.display()
    ));
    ok(&o);
    let lv: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    assert_eq!((&lv["agent"], &lv["step"]), (&v["agent"], &v["step"]));
    let t: Value = serde_json::from_str(
        std::fs::read_to_string(&wb)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(t["labels"]["verdicts"][0]["model"], "local:smollm2-135m");
    assert_eq!(t["labels"]["verdicts"][0]["method"], "stacked");
}

/// The red-team corpus (`tests/redteam/`, docs/security.md) with the embedded model: whatever
/// the model makes of the injected text, each verdict keeps its schema and names a step of the
/// trace or abstains with its reason, the eight traces that try to steer the judge carry
/// `steering` (the three others none), and the run exits 1. What the model followed is printed,
/// not asserted (a 135M model). `scan` on three of them: no event outside the trace, `steering`
/// on the detector-steering trace, exit 1.
#[test]
fn e2e_redteam_corpus_with_the_embedded_model() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/redteam/traces.jsonl");
    let started = std::time::Instant::now();
    let out = maslens(
        dir.path(),
        &[
            "--json",
            "locate",
            corpus.to_str().unwrap(),
            "--method",
            "llm",
            "--variant",
            "judge",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let verdicts: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON verdict per line"))
        .collect();
    assert_eq!(verdicts.len(), 11, "{stderr}");
    let mut followed = Vec::new();
    for v in &verdicts {
        let id = v["trace"].as_str().unwrap();
        for key in ["agent", "step", "method", "revision", "payload"] {
            assert!(v.get(key).is_some(), "{id}: no {key}");
        }
        // The pipeline's own verdict, whole, in the payload.
        for key in ["rationale", "confidence", "source", "judge", "usage"] {
            assert!(v["payload"].get(key).is_some(), "{id}: no payload.{key}");
        }
        match v["step"].as_u64() {
            Some(s) => assert!(s < 5, "{id}: step {s} is not in the trace"),
            None => assert!(v["abstain_reason"].is_string(), "{id}: {v}"),
        }
        let hits = v["payload"]["steering"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let attacks_model = !matches!(id, "rt-benign" | "rt-terminal-escapes" | "rt-html");
        assert_eq!(!hits.is_empty(), attacks_model, "{id}: {hits:?}");
        for h in hits.iter().filter(|h| h["followed"] == true) {
            followed.push(format!("{id}: {}", h["kind"]));
        }
        eprintln!(
            "{id}: step {} agent {} steering {}",
            v["step"],
            v["agent"],
            hits.iter()
                .map(|h| format!("{}(followed {})", h["kind"], h["followed"]))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    eprintln!(
        "red-team locate with SmolLM2-135M (judge only): {} hits followed: {followed:?}; {:.0} s",
        followed.len(),
        started.elapsed().as_secs_f64()
    );

    // scan on three traces: the detector-steering one, a fake verdict, the benign control.
    let subset = dir.path().join("subset.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&corpus)
        .unwrap()
        .lines()
        .filter(|l| {
            ["\"rt-detector\"", "\"rt-fake-verdict\"", "\"rt-benign\""]
                .iter()
                .any(|id| l.contains(id))
        })
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 3);
    std::fs::write(&subset, lines.join("\n") + "\n").unwrap();
    // (scan has no --max-answer-tokens: its own flags bound the detector's answer.)
    let out = Command::new(bin())
        .env("MASLENS_CACHE", dir.path().join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MASLENS_MODEL")
        .args([
            "--json",
            "scan",
            subset.to_str().unwrap(),
            "--no-absorption",
        ])
        .args([
            "--detect-max-tokens",
            "256",
            "--model",
            "local:smollm2-135m",
        ])
        .args(["--threads", "2", "-q"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let file: Value = serde_json::from_slice(&out.stdout).expect("the scan file as JSON");
    for s in file["traces"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        for e in s["events"].as_array().unwrap() {
            assert!(e["step"].as_u64().unwrap() < 5, "{id}: {e}");
        }
        let steered = s["steering"].as_array().is_some_and(|h| !h.is_empty());
        assert_eq!(steered, id != "rt-benign", "{id}");
        eprintln!(
            "scan {id}: {} events, steering {}",
            s["events"].as_array().unwrap().len(),
            s["steering"]
        );
    }
    eprintln!(
        "red-team corpus with the embedded model: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
