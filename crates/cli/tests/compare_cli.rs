//! `maslens eval compare`: several localizers on the same cases in one report with paired
//! tests; the model's cache is shared, so a rerun repeats no call.

mod common;

use common::{data, maslens, stderr, stdout_json};
use std::sync::atomic::Ordering;

/// Parses as an all-at-once Judge answer (agent, step) and as a step-by-step one (decisive).
const ANSWER: &str = r#"{"reason": "stub", "agent": "Verification_Expert", "step": 1, "decisive": true, "confidence": 0.9}"#;

#[test]
fn eval_compare_puts_methods_side_by_side_with_paired_tests_and_replays_from_cache() {
    let home = tempfile::tempdir().unwrap();
    let (url, calls) = common::stub_model_server_with(std::time::Duration::ZERO, Some(ANSWER));
    let model = format!("openai:x@{url}");
    let dataset = format!("whowhen:{}", data("whowhen").display());
    let out_dir = home.path().join("cmp");
    let args = [
        "--json",
        "eval",
        "compare",
        &dataset,
        "--subset",
        "Algorithm-Generated/",
        "--limit",
        "3",
        "--methods",
        "prior,all-at-once,step-by-step",
        "--model",
        &model,
        "-o",
        out_dir.to_str().unwrap(),
    ];
    let first = maslens(home.path(), &args).output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let report = stdout_json(&first);
    let names: Vec<&str> = report["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prior", "all-at-once", "step-by-step"]);
    assert_eq!(
        report["methods"][0]["usage"]["calls"], 0,
        "the prior calls no model"
    );
    let model_calls = calls.load(Ordering::SeqCst);
    assert!(
        model_calls >= 3,
        "each LLM method called the model: {model_calls}"
    );
    let paired = report["paired"].as_array().unwrap();
    assert_eq!(paired.len(), 6, "3 pairs x (agent, step)");
    for t in paired {
        let n = t["n"].as_u64().unwrap();
        let parts: u64 = ["both", "only_a", "only_b", "neither"]
            .iter()
            .map(|k| t[*k].as_u64().unwrap())
            .sum();
        assert_eq!(parts, n, "{t}");
        let p = t["p_value"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p), "{t}");
    }
    for f in [
        "compare.json",
        "compare.md",
        "prior/report.json",
        "step-by-step/verdicts.jsonl",
    ] {
        assert!(out_dir.join(f).is_file(), "{f} written");
    }
    let md = std::fs::read_to_string(out_dir.join("compare.md")).unwrap();
    assert!(
        md.contains("## Paired tests") && md.contains("| step-by-step |"),
        "{md}"
    );

    // The rerun answers every call from the cache: no new call, the same figures.
    let second = maslens(home.path(), &args).output().unwrap();
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        model_calls,
        "no call repeated"
    );
    let again = stdout_json(&second);
    assert_eq!(again["paired"], report["paired"]);
    assert_eq!(
        again["methods"][2]["step_accuracy"],
        report["methods"][2]["step_accuracy"]
    );
}

#[test]
fn eval_compare_rejects_an_unknown_method_and_a_per_method_option() {
    let home = tempfile::tempdir().unwrap();
    let dataset = format!("whowhen:{}", data("whowhen").display());
    let out = maslens(
        home.path(),
        &[
            "eval",
            "compare",
            &dataset,
            "--methods",
            "prior,agenttracer",
        ],
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("\"agenttracer\"") && err.contains("echo"),
        "{err}"
    );
    let out = maslens(
        home.path(),
        &["eval", "compare", &dataset, "--protocol", "step-by-step"],
    )
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("per method"), "{}", stderr(&out));
}

/// Every method, without and with the ground truth in the prompts, in one report: the `+gt` rows
/// prompt differently (their calls are new, not cache hits), the prior runs once, and the whole
/// Markdown report is held by a snapshot (the seconds column, the one figure that varies, masked).
#[test]
fn eval_compare_every_method_in_both_ground_truth_settings_snapshot() {
    let home = tempfile::tempdir().unwrap();
    let (url, calls) = common::stub_model_server_with(std::time::Duration::ZERO, Some(ANSWER));
    let model = format!("openai:x@{url}");
    let dataset = format!("whowhen:{}", data("whowhen").display());
    let out_dir = home.path().join("cmp");
    let run = |both: bool| {
        let mut args = vec![
            "--json",
            "eval",
            "compare",
            &dataset,
            "--subset",
            "Algorithm-Generated/",
            "--limit",
            "3",
            "--model",
            &model,
            "-o",
            out_dir.to_str().unwrap(),
        ];
        if both {
            args.push("--both-ground-truth");
        }
        let out = maslens(home.path(), &args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout_json(&out)
    };
    run(false);
    let without = calls.load(Ordering::SeqCst);
    let report = run(true);
    let with = calls.load(Ordering::SeqCst) - without;
    assert!(with > 0, "the +gt rows made calls of their own");
    let names: Vec<&str> = report["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let mut expected = vec!["prior"];
    for m in [
        "stacked",
        "agentlocate",
        "all-at-once",
        "step-by-step",
        "binary-search",
        "a2p",
        "taxonomy",
        "echo",
        "counterfactual",
    ] {
        expected.push(m);
        expected.push(Box::leak(format!("{m}+gt").into_boxed_str()));
    }
    assert_eq!(names, expected);
    assert_eq!(report["both_ground_truth"], true);
    assert!(out_dir.join("a2p+gt/report.json").is_file());
    let md = std::fs::read_to_string(out_dir.join("compare.md")).unwrap();
    // The dataset's path differs between checkouts.
    let md = md.replace(&dataset, "whowhen:DATA");
    insta::assert_snapshot!("compare_both_ground_truth_md", mask_seconds(&md));
}

/// The main table's last column (seconds) as `S`.
fn mask_seconds(md: &str) -> String {
    let mut in_table = false;
    md.lines()
        .map(|l| {
            if l.starts_with("| method | source |") {
                in_table = true;
            } else if !l.starts_with('|') {
                in_table = false;
            }
            match (in_table, l.trim_end().strip_suffix(" |")) {
                (true, Some(row)) if !row.starts_with("| ---") && !row.starts_with("| method") => {
                    match row.rsplit_once(" | ") {
                        Some((head, _)) => format!("{head} | S |"),
                        None => l.to_string(),
                    }
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
