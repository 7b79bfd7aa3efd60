//! Snapshots of every format of the locate evaluation report (Markdown, HTML, JSON) on a small,
//! deterministic, hand-built report. A mismatch fails the test (with `CI=true` insta writes
//! nothing; locally it leaves a `.snap.new` beside the snapshot to review with `cargo insta`).

use maslens_eval::metrics::{Case, CaseUsage, Gold, Prediction, Scorer};
use maslens_eval::report::{build, LocateReport, ReportOptions, SplitInfo};

fn case(
    id: &str,
    subset: &str,
    gold: (&str, usize),
    pred: Option<(&str, usize)>,
    tokens: usize,
) -> Case {
    Case {
        id: id.into(),
        subset: Some(subset.into()),
        gold: Gold {
            agent: Some(gold.0.into()),
            step: Some(gold.1),
            ..Default::default()
        },
        pred: Prediction {
            agent: pred.map(|x| x.0.into()),
            step: pred.map(|x| x.1),
            abstained: pred.is_none(),
            ..Default::default()
        },
        trace_tokens: tokens,
        usage: CaseUsage {
            prompt_tokens: 1000,
            cached_tokens: 400,
            completion_tokens: 50,
            calls: 4,
            seconds: 2.0,
            cost_usd: Some(0.002),
            ..Default::default()
        },
    }
}

/// The shared report: two subsets, one baseline, a failed case, a model and a split.
fn sample(agent: &str, error: &str) -> LocateReport {
    let cases = vec![
        case(
            "AG/1",
            "AG",
            ("Orchestrator", 1),
            Some(("Orchestrator", 1)),
            100,
        ),
        case("AG/2", "AG", (agent, 2), Some(("Orchestrator", 3)), 200),
        case("HC/1", "HC", ("WebSurfer", 9), None, 900),
        case("HC/2", "HC", ("Coder", 4), Some(("Coder", 5)), 400),
    ];
    let base = vec![
        case(
            "AG/1",
            "AG",
            ("Orchestrator", 1),
            Some(("Orchestrator", 0)),
            100,
        ),
        case("AG/2", "AG", (agent, 2), Some((agent, 2)), 200),
        case("HC/1", "HC", ("WebSurfer", 9), Some(("WebSurfer", 9)), 900),
        case("HC/2", "HC", ("Coder", 4), Some(("Coder", 7)), 400),
    ];
    let mut r = build(
        &cases,
        &[("last-agent".into(), base)],
        vec![("AG/9".into(), error.into())],
        &ReportOptions {
            title: "Failure localization | sample".into(),
            method: "locate/all-at-once".into(),
            model: Some("fixture-model".into()),
            dataset: "who&when".into(),
            scorer: Scorer::Exact,
            seed: 7,
            ..Default::default()
        },
    );
    r.split = Some(SplitInfo {
        fraction: 0.5,
        seed: 3,
        train: 4,
        test: 4,
    });
    r.stopped_early = Some("budget of 1.00 USD reached".into());
    r.provenance = maslens_eval::run::Provenance {
        maslens_version: "0.0.0-test".into(),
        git_revision: Some("0123456789abcdef0123".into()),
        dataset: maslens_eval::run::DatasetInfo {
            spec: "whowhen:sample".into(),
            cases: 4,
            ids_sha256: "a".repeat(64),
            content_sha256: "b".repeat(64),
        },
        prompts: vec![maslens_eval::run::PromptRef::new(
            "locate/judge_all_at_once.v1",
            "Which agent <b>broke</b> it?",
        )],
    };
    r
}

fn plain() -> LocateReport {
    sample("Assistant", "rate limited")
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!("locate_report_md", maslens_eval::markdown::render(&plain()));
}

#[test]
fn html_snapshot() {
    insta::assert_snapshot!("locate_report_html", maslens_eval::html::render(&plain()));
}

#[test]
fn json_snapshot() {
    insta::assert_json_snapshot!("locate_report_json", plain());
}

#[test]
fn html_escapes_every_trace_string() {
    let payload = "<script>alert(1)</script>";
    let mut r = sample(payload, &format!("rationale {payload}"));
    r.title = payload.into();
    r.method = payload.into();
    r.dataset = payload.into();
    r.model = Some(payload.into());
    r.per_case[0].id = payload.into();
    let html = maslens_eval::html::render(&r);
    assert!(!html.contains("<script"), "raw <script in\n{html}");
    assert!(html.contains("&lt;script&gt;"));
}
