use super::*;

const DAY: i64 = 86_400 * 1_000_000_000;

fn case(run: &str, system: &str, agent: &str, reason: &str, gold: &str) -> FailureCase {
    FailureCase {
        run: run.into(),
        system: Some(system.into()),
        time_ns: None,
        agent: (!agent.is_empty()).then(|| agent.to_string()),
        step: Some(1),
        failure_types: Vec::new(),
        reason: reason.into(),
        gold_agent: (!gold.is_empty()).then(|| gold.to_string()),
        in_sample: false,
    }
}

fn cases() -> Vec<FailureCase> {
    let mut v = vec![
        case(
            "r1",
            "shop",
            "Planner",
            "Planner dropped the budget constraint from the task",
            "Planner",
        ),
        case(
            "r2",
            "shop",
            "Planner",
            "the budget constraint was dropped by Planner",
            "Planner",
        ),
        case(
            "r3",
            "shop",
            "Planner",
            "WebSurfer results were misread: wrong price currency",
            "Planner",
        ),
        case(
            "r4",
            "shop",
            "Coder",
            "off-by-one index in the loop over prices",
            "Coder",
        ),
        case("r5", "shop", "", "", "Coder"),
        case("r6", "news", "Writer", "invented a quotation", "Writer"),
    ];
    v[2].failure_types = vec!["misread tool output".into()];
    v[0].time_ns = Some(20_000 * DAY + 5);
    v[1].time_ns = Some(20_001 * DAY);
    v
}

#[test]
fn runs_group_by_system_agent_type_and_reason() {
    let report = group(&cases(), ModesOptions::default());
    assert_eq!(report.format_version, FORMAT_VERSION);
    let names: Vec<&str> = report.systems.iter().map(|s| s.system.as_str()).collect();
    assert_eq!(names, ["news", "shop"]);
    let shop = &report.systems[1];
    assert_eq!(
        (shop.failed_runs, shop.located_runs, shop.scanned_runs),
        (5, 4, 1)
    );
    let members: Vec<Vec<&str>> = shop
        .modes
        .iter()
        .map(|m| m.members.iter().map(String::as_str).collect())
        .collect();
    // Largest first; r3 is the Planner's too but a different implicit-failure type.
    assert_eq!(members[0], ["r1", "r2"]);
    assert_eq!(members.len(), 4);
    let first = &shop.modes[0];
    assert_eq!(first.agent.as_deref(), Some("Planner"));
    assert_eq!(first.failure_type, None);
    assert_eq!(first.words, ["budget", "constraint", "dropped", "task"]);
    assert!(
        !first.words.iter().any(|w| w == "planner"),
        "agent names are not words"
    );
    assert!((first.share - 0.4).abs() < 1e-12);
    let days: Vec<(&str, usize)> = first
        .trend
        .iter()
        .map(|d| (d.day.as_str(), d.runs))
        .collect();
    assert_eq!(days, [("2024-10-04", 1), ("2024-10-05", 1)]);
    let r3 = shop.modes.iter().find(|m| m.members == ["r3"]).unwrap();
    assert_eq!(r3.failure_type.as_deref(), Some("misread tool output"));
    let unlocated = shop.modes.iter().find(|m| m.members == ["r5"]).unwrap();
    assert_eq!((unlocated.agent.as_ref(), unlocated.words.len()), (None, 0));
}

#[test]
fn the_same_cases_give_the_same_report_and_ids() {
    let a = group(&cases(), ModesOptions::default());
    let b = group(&cases(), ModesOptions::default());
    assert_eq!(a, b);
    let ids: std::collections::BTreeSet<&str> = a
        .systems
        .iter()
        .flat_map(|s| s.modes.iter().map(|m| m.id.as_str()))
        .collect();
    assert_eq!(ids.len(), 5, "ids are distinct");
    let mut reversed = cases();
    reversed.reverse();
    assert_eq!(
        group(&reversed, ModesOptions::default()),
        a,
        "input order does not matter"
    );
}

#[test]
fn a_higher_threshold_splits_reasons_apart() {
    let strict = ModesOptions {
        similarity: 0.99,
        ..ModesOptions::default()
    };
    let shop = &group(&cases(), strict).systems[1];
    assert_eq!(shop.modes.len(), 5);
}

#[test]
fn purity_against_gold_agents_is_counted_by_hand() {
    let p = group(&cases(), ModesOptions::default()).purity.unwrap();
    // Modes: {r1,r2: P,P} {r3: P} {r4: C} {r5: C} {r6: W}: every mode pure.
    assert_eq!(p.runs_with_gold, 6);
    assert_eq!(p.modes.groups, 5);
    assert!((p.modes.purity - 1.0).abs() < 1e-12);
    // Gold Planner's 3 runs sit 2+1, Coder's 1+1, Writer's 1: (2+1+1)/6.
    assert!((p.modes.inverse_purity - 4.0 / 6.0).abs() < 1e-12);
    // One group per system: shop {P,P,P,C,C} -> 3, news {W} -> 1.
    assert!((p.one_per_system.purity - 4.0 / 6.0).abs() < 1e-12);
    assert!((p.one_per_system.inverse_purity - 1.0).abs() < 1e-12);
    // By located agent: shop/Planner {P,P,P}, shop/Coder {C}, shop/"" {C}, news/Writer {W}.
    assert!((p.by_located_agent.purity - 1.0).abs() < 1e-12);
    assert!((p.by_located_agent.inverse_purity - 5.0 / 6.0).abs() < 1e-12);
    assert!((p.located_agent_accuracy - 5.0 / 6.0).abs() < 1e-12);
}

#[test]
fn no_gold_no_purity_and_no_cases_no_systems() {
    let mut v = cases();
    v.iter_mut().for_each(|c| c.gold_agent = None);
    assert!(group(&v, ModesOptions::default()).purity.is_none());
    let empty = group(&[], ModesOptions::default());
    assert!(empty.systems.is_empty());
    assert!(empty.to_markdown().contains("No failed runs."));
}

#[test]
fn markdown_has_a_row_per_mode_and_the_purity_table() {
    let md = group(&cases(), ModesOptions::default()).to_markdown();
    assert_eq!(md.matches("\n| `").count(), 5, "{md}");
    assert!(
        md.contains("| these modes | 5 | 1.000 | 0.667 | 0.800 |"),
        "{md}"
    );
    assert!(md.contains("2024-10-04 .. 2024-10-05"), "{md}");
}

#[test]
fn utc_days_follow_the_calendar() {
    assert_eq!(utc_day(0), "1970-01-01");
    assert_eq!(utc_day(-1), "1969-12-31");
    assert_eq!(utc_day(11_016 * DAY), "2000-02-29");
    assert_eq!(utc_day(20_793 * DAY), "2026-12-06");
}

#[tokio::test]
async fn summaries_come_from_the_model_and_failures_are_noted() {
    use maslens_llm::testing::ScriptedModel;
    let mut report = group(&cases(), ModesOptions::default());
    // Answers the news system's mode only; the shop's call fails ("script exhausted").
    let model = ScriptedModel::new("scripted").on_with(
        "modes/summary",
        "System: news",
        "  The Writer invents\nquotations.  ",
    );
    let done = summarize(&mut report, &model, Some(1)).await.unwrap();
    assert_eq!(
        (done.written, done.failed.len(), model.n_calls()),
        (1, 1, 2)
    );
    let news = &report.systems[0].modes[0];
    assert_eq!(
        news.summary.as_deref(),
        Some("The Writer invents quotations.")
    );
    assert_eq!(report.systems[1].modes[0].summary, None);
    assert_eq!(report.summaries_by.as_deref(), Some("scripted"));
    let md = report.to_markdown();
    assert!(md.contains("The Writer invents quotations."), "{md}");
    assert!(md.contains("> no summary for mode"), "{md}");
}

#[test]
fn cases_of_traces_take_the_latest_verdict_and_severest_implicit_type() {
    use maslens_trace::{ImplicitLabel, Outcome, TraceBuilder, Verdict};
    let verdict = |agent: &str, why: &str| Verdict {
        agent: Some(agent.into()),
        step: Some(1),
        rationale: Some(why.into()),
        ..Verdict::new("prior", serde_json::Value::Null)
    };
    let implicit = |kind: &str, severity: f64| ImplicitLabel {
        step: 0,
        agent: "Planner".into(),
        error_type: kind.into(),
        absorption: None,
        severity: Some(severity),
        description: None,
    };
    let mut failed = TraceBuilder::new("f")
        .outcome(Outcome::Failure)
        .steps(&["Planner", "Coder"])
        .decisive("Coder", 1)
        .build();
    failed.labels.verdicts = vec![verdict("Planner", "old"), verdict("Coder", "bad loop")];
    failed.labels.implicit = vec![implicit("slip", 0.1), implicit("wrong fact", 0.8)];
    let ok = TraceBuilder::new("s")
        .outcome(Outcome::Success)
        .steps(&["Planner"])
        .build();
    let traces = [failed, ok];

    let cases = cases_of_traces(&traces, "failure", true).unwrap();
    assert_eq!(cases.len(), 1);
    let c = &cases[0];
    assert_eq!(
        (c.agent.as_deref(), c.step, c.reason.as_str()),
        (Some("Coder"), Some(1), "bad loop")
    );
    assert_eq!(c.failure_types, ["wrong fact", "slip"]);
    assert_eq!(c.gold_agent.as_deref(), Some("Coder"));
    assert_eq!(
        cases_of_traces(&traces, "failure", false).unwrap()[0].gold_agent,
        None
    );
    assert_eq!(
        cases_of_traces(&traces, "any", false).unwrap().len(),
        1,
        "only the localized one"
    );
    assert_eq!(
        cases_of_traces(&traces, "success", false).unwrap()[0].run,
        "s"
    );
    let err = cases_of_traces(&traces, "failed", false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"failed\"") && err.contains("any"), "{err}");
}
