//! End-to-end `maslens optimize` with the embedded SmolLM2-135M-Instruct (`maslens model pull
//! smollm2-135m`): the README tour's optimize line (4 MMLU questions: 2 optimization, 2 held-out;
//! 3 roles, 2 rounds, one BCD iteration), every report section checked; its rerun from the cache;
//! then `maslens credit` on the runs it wrote. Slow: named `e2e_*`. The model is far too small to
//! debate or judge well: accuracy is not asserted, the pipeline is.
#![cfg(feature = "local")]

mod common;

use common::tour::{self, flag_value, TourHome};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

#[test]
fn e2e_optimize_mmlu_smollm2_every_section() {
    // The README tour's optimize line, verbatim, in a home of its own (the embedded default model);
    // the tour test leaves it to this test.
    let line = tour::line("$m optimize ");
    let out = PathBuf::from(flag_value(&line, "--out"));
    let _ = std::fs::remove_dir_all(&out);
    let home = TourHome::new();
    let o = home.run(&line);
    assert!(
        o.status.success(),
        "{line}: exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    eprintln!("{md}");
    for section in [
        "Accuracy on the held-out set (2 questions",
        "Outcome shift",
        "Overall statistics",
        "by the round at which the debate ended",
        "Failure-pattern distribution",
        "by round and failure pattern (ours)",
        "Credit, seed 0, iteration 1",
        "Verbalized BCD iterations",
        "Prompts before and after",
    ] {
        assert!(md.contains(section), "missing {section}");
    }
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["n_optimization"], 2);
    assert_eq!(r["n_test"], 2);
    let s = &r["seeds"][0];
    assert_eq!(s["bcd"]["iterations"].as_array().unwrap().len(), 1);
    assert!(s["bcd"]["calls"].as_u64().unwrap() > 0);
    assert!(s["blackbox"]["calls"].as_u64().unwrap() <= s["bcd"]["calls"].as_u64().unwrap());
    let credit = &s["bcd"]["iterations"][0]["credit"];
    assert_eq!(credit["roles"].as_array().unwrap().len(), 3);
    assert_eq!(credit["rounds"].as_array().unwrap().len(), 2);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.matches("<svg").count() >= 3);
    assert_eq!(
        std::fs::read_to_string(out.join("traces/ours-seed0.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    // Re-running resumes from the cache: identical report, no new backend calls needed.
    let o2 = home.run(&format!("{line} --cache-mode replay"));
    assert!(
        o2.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&o2.stderr)
    );
    let r2: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["summary"], r2["summary"]);

    let dir = tempfile::tempdir().unwrap();
    // Credit over the held-out runs it wrote (debate traces, the optimizer's critics).
    let traces = out.join("traces/baseline-seed0.jsonl");
    let cj = dir.path().join("credit.json");
    let o = maslens(
        dir.path(),
        &[
            "credit",
            traces.to_str().unwrap(),
            "--limit",
            "2",
            "--critic-max-tokens",
            "64",
            "--out",
            cj.to_str().unwrap(),
        ],
    );
    assert!(
        o.status.code() == Some(0) || o.status.code() == Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&cj).unwrap()).unwrap();
    assert_eq!(c["traces"][0]["mode"], "debate-mcq");
    assert_eq!(c["format_version"], 2);
}
