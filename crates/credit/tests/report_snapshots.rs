//! Snapshots of the reports of `maslens optimize` (Markdown, HTML) and `maslens credit`
//! (Markdown table, HTML page) on a small, deterministic, hand-built experiment. A mismatch fails
//! the test (with `CI=true` insta writes nothing; locally it leaves a `.snap.new` to review).

use maslens_credit::credit::CreditTable;
use maslens_credit::experiment::{
    CurvePoint, Experiment, ExperimentOptions, FinalEval, MethodSummary, SeedResult, Shift,
};
use maslens_credit::optimize::{BcdResult, IterationRecord, Rewrite};
use maslens_credit::report;
use maslens_credit::{DebateConfig, PromptSet};
use std::collections::BTreeMap;

fn table(roles: &[&str]) -> CreditTable {
    CreditTable {
        roles: roles.iter().map(|r| r.to_string()).collect(),
        rounds: vec!["round 1".into(), "round 2".into()],
        cell: vec![vec![Some(0.8), Some(0.4)], vec![Some(0.25), None]],
        cell_n: vec![vec![2, 2], vec![2, 0]],
        role_credit: vec![Some(0.6), Some(0.25)],
        round_credit: vec![Some(0.7), Some(0.5)],
    }
}

fn final_eval(id: &str, correct: bool, round: usize, label: &str, score: Option<u8>) -> FinalEval {
    FinalEval {
        question_id: id.into(),
        correct,
        round,
        label: label.into(),
        score,
    }
}

fn curve(points: &[(usize, u64, f64)]) -> Vec<CurvePoint> {
    points
        .iter()
        .map(|&(step, calls, acc)| CurvePoint {
            step,
            calls,
            opt_accuracy: acc,
            test_accuracy: Some(acc),
        })
        .collect()
}

/// The shared experiment: two roles, two rounds, one seed with one BCD iteration.
/// `role` names the second role; `diagnosis` is the rewrite's rationale.
fn experiment(role: &str, diagnosis: &str) -> Experiment {
    let mut config = DebateConfig::from_toml(
        r#"
name = "sample"
rounds = 2
[[roles]]
name = "solver"
prompt = "Solve the question step by step."
[[roles]]
name = "skeptic"
prompt = "Doubt | check every step."
[[aggregators]]
prompt = "Aggregate the answers."
"#,
        "sample.toml",
    )
    .expect("sample config parses");
    config.roles[1].name = role.into();
    let initial = config.prompts();
    let best = PromptSet {
        roles: vec![
            initial.roles[0].clone(),
            "Check the arithmetic first.".into(),
        ],
        aggregators: initial.aggregators.clone(),
    };
    let mut labels = BTreeMap::new();
    labels.insert("NONE".to_string(), 3);
    labels.insert("KNOWLEDGE_DEFICIT".to_string(), 1);
    let iteration = IterationRecord {
        iteration: 1,
        prompts: initial.clone(),
        opt_accuracy: 0.5,
        calls_before: 0,
        calls_after: 24,
        credit: Some(table(&["solver", role])),
        selected_roles: vec![role.into()],
        selected_rounds: vec![1],
        ema_alpha: vec![0.7, 0.45],
        informative_failures: vec![1, 3],
        rewrites: vec![Rewrite {
            target: format!("role:{role}"),
            before: initial.roles[1].clone(),
            after: best.roles[1].clone(),
            diagnosis: diagnosis.into(),
        }],
        utterance_labels: vec![labels.clone(), labels],
    };
    let seed = SeedResult {
        seed: 1,
        baseline_accuracy: 0.5,
        blackbox_accuracy: Some(0.5),
        ours_accuracy: 0.75,
        bcd: BcdResult {
            iterations: vec![iteration],
            iterates: vec![(initial.clone(), 0.5, 24), (best.clone(), 0.75, 30)],
            best,
            best_opt_accuracy: Some(0.75),
            calls: 30,
            tokens: 4096,
            stop_reason: "iterations".into(),
            ema_history: vec![(0, 0.7), (1, 0.45)],
        },
        blackbox: None,
        ours_curve: curve(&[(0, 0, 0.5), (1, 30, 0.75)]),
        blackbox_curve: curve(&[(0, 0, 0.5), (1, 15, 0.5), (2, 30, 0.5)]),
        shift_ours: Shift {
            wrong_wrong: 1,
            right_wrong: 0,
            wrong_right: 1,
            right_right: 2,
        },
        shift_blackbox: Some(Shift {
            wrong_wrong: 2,
            right_wrong: 0,
            wrong_right: 0,
            right_right: 2,
        }),
        baseline_final: vec![
            final_eval("q1", true, 1, "NONE", Some(5)),
            final_eval("q2", false, 2, "KNOWLEDGE_DEFICIT", Some(1)),
            final_eval("q3", true, 2, "NONE", Some(4)),
            final_eval("q4", false, 1, "MISINTERPRET_QUESTION", None),
        ],
        ours_final: vec![
            final_eval("q1", true, 1, "NONE", Some(5)),
            final_eval("q2", true, 2, "NONE", Some(4)),
            final_eval("q3", true, 2, "NONE", Some(5)),
            final_eval("q4", false, 1, "KNOWLEDGE_DEFICIT", Some(2)),
        ],
        evaluation_calls: 48,
        test_runs: vec![],
    };
    Experiment {
        name: "sample".into(),
        model: "fixture-model".into(),
        dataset: "jsonl:questions.jsonl".into(),
        n_optimization: 4,
        n_test: 4,
        config,
        options: ExperimentOptions {
            seeds: vec![1],
            ..Default::default()
        },
        prompt_versions: vec![
            "credit/agent_turn_eval.v1".into(),
            "credit/rewrite.v1".into(),
        ],
        summary: vec![
            MethodSummary {
                method: "baseline".into(),
                accuracies: vec![0.5],
                mean: 0.5,
                std: 0.0,
                calls: None,
            },
            MethodSummary {
                method: "black-box".into(),
                accuracies: vec![0.5],
                mean: 0.5,
                std: 0.0,
                calls: Some(30.0),
            },
            MethodSummary {
                method: "ours".into(),
                accuracies: vec![0.75],
                mean: 0.75,
                std: 0.0,
                calls: Some(30.0),
            },
        ],
        seeds: vec![seed],
    }
}

fn plain() -> Experiment {
    experiment("skeptic", "Misses arithmetic slips.")
}

const CREDIT_TITLE: &str =
    "Credit over 2 trace(s), model fixture-model (cells: fused c; last row: temporal credit)";

#[test]
fn optimize_markdown_snapshot() {
    insta::assert_snapshot!("optimize_report_md", report::markdown(&plain()));
}

#[test]
fn optimize_html_snapshot() {
    insta::assert_snapshot!("optimize_report_html", report::html(&plain()));
}

#[test]
fn credit_markdown_snapshot() {
    let t = table(&["solver", "skeptic | critic"]);
    insta::assert_snapshot!(
        "credit_report_md",
        report::credit_markdown(&t, CREDIT_TITLE)
    );
}

#[test]
fn credit_html_snapshot() {
    let t = table(&["solver", "skeptic & critic"]);
    insta::assert_snapshot!("credit_report_html", report::credit_html(&t, CREDIT_TITLE));
}

#[test]
fn html_escapes_every_trace_string() {
    let payload = "<script>alert(1)</script>";
    let mut x = experiment(payload, &format!("rationale {payload}"));
    x.name = payload.into();
    x.model = payload.into();
    x.seeds[0].ours_final[3].label = payload.into();
    for html in [
        report::html(&x),
        report::credit_html(&table(&["solver", payload]), payload),
    ] {
        assert!(!html.contains("<script"), "raw <script in\n{html}");
        assert!(html.contains("&lt;script&gt;"));
    }
}
