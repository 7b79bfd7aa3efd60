use super::*;
use crate::test_support::{trace, ContextFixture};
use maslens_llm::testing::ScriptedModel;

#[tokio::test]
async fn all_at_once_normalizes_agent_and_records_mismatch() {
    let t = trace(6);
    // Fixture answer naming the wrong agent for step 3 (acted by A1).
    let m = ScriptedModel::new("fixture")
        .then(r#"{"reason":"the message gives no total for the task","agent":"A0","step":3,"confidence":0.8}"#);
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    assert_eq!(r.finding.location(), Some(("A1", 3)));
    assert!(r.finding.agent_mismatch);
    assert_eq!(r.finding.named_agent.as_deref(), Some("A0"));
    assert_eq!(r.stats.calls, 1);
    assert_eq!(r.strategy, Strategy::Full);
    let user = &m.calls.lock().unwrap()[0].messages[1].content;
    assert!(!user.contains("reference_answer"));
}

#[tokio::test]
async fn all_at_once_out_of_range_step_abstains() {
    let t = trace(3);
    let out = r#"{"reason":"the message gives no total for the task","agent":"A0","step":9,"confidence":0.8}"#;
    let m = ScriptedModel::new("fixture").then(out).then(out);
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    assert!(r.finding.location().is_none());
    assert!(r
        .finding
        .abstain_reason
        .unwrap()
        .contains("step 9 is not in the trace"));
    // the step was sent back once, naming the steps shown
    let calls = m.calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    let repair = &calls[1].messages.last().unwrap().content;
    assert!(
        repair.contains("step 9 is not one of the steps shown (0 to 2)"),
        "{repair}"
    );
}

#[tokio::test]
async fn a_tautological_reason_is_sent_back_once() {
    let t = trace(4);
    let m = ScriptedModel::new("fixture")
        .on(
            "locate/judge_all_at_once",
            r#"{"reason":"The decisive failure step is step 2.","agent":"A0","step":2,"confidence":0.8}"#,
        )
        .on(
            "llm/repair",
            r#"{"reason":"\"message 2\" gives no total, so the task is not answered","agent":"A0","step":2,"confidence":0.8}"#,
        );
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    assert_eq!(r.finding.location(), Some(("A0", 2)));
    assert!(r.finding.rationale.starts_with("\"message 2\""));
    assert_eq!(r.finding.rationale_problem, None);
    assert_eq!((r.stats.calls, r.stats.repairs), (2, 1));
    let repair = m.calls.lock().unwrap()[1]
        .messages
        .last()
        .unwrap()
        .content
        .clone();
    assert!(repair.contains("only restates the verdict"), "{repair}");
    // still a tautology after the repair: the location is kept, the rationale flagged
    let m = ScriptedModel::new("fixture")
        .on(
            "locate/judge_all_at_once",
            r#"{"reason":"A0 made the mistake at step 2.","agent":"A0","step":2,"confidence":0.8}"#,
        )
        .on(
            "llm/repair",
            r#"{"reason":"Step 2 is the decisive failure.","agent":"A0","step":2,"confidence":0.8}"#,
        );
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    assert_eq!(r.finding.location(), Some(("A0", 2)));
    assert!(r
        .finding
        .rationale_problem
        .as_deref()
        .is_some_and(|p| p.contains("only restates the verdict")));
}

#[tokio::test]
async fn with_ground_truth_shows_the_answer() {
    let mut t = trace(3);
    t.ground_truth = Some("42".into());
    let m = ScriptedModel::new("fixture")
        .then(r#"{"reason":"the message gives no total for the task","agent":"A0","step":0,"confidence":0.5}"#);
    let s = Settings {
        with_ground_truth: true,
        ..Settings::default()
    };
    judge(&m, &t, Protocol::AllAtOnce, &s).await.unwrap();
    assert!(m.calls.lock().unwrap()[0].messages[1]
        .content
        .contains("<reference_answer>\n42\n</reference_answer>"));
}

#[tokio::test]
async fn step_by_step_stops_at_first_flagged_step() {
    let t = trace(8);
    let no = r#"{"reason":"fine","decisive":false,"confidence":0.9}"#;
    let m = ScriptedModel::new("fixture")
        .on_with(
            "locate/judge_step",
            "ends at step 4 ",
            r#"{"reason":"wrong tool","decisive":true,"confidence":0.7}"#,
        )
        .on_with(
            "locate/judge_step",
            "ends at step 6 ",
            r#"{"reason":"also","decisive":true,"confidence":0.9}"#,
        )
        .then(no)
        .then(no)
        .then(no)
        .then(no);
    let r = judge(&m, &t, Protocol::StepByStep, &Settings::default())
        .await
        .unwrap();
    assert_eq!(r.finding.location(), Some(("A0", 4)));
    assert_eq!(r.finding.confidence, 0.7);
    assert_eq!(m.n_calls(), 5, "steps 0..=4 reviewed, then stop");
    // Each call sees exactly the prefix up to the step under review.
    let calls = m.calls.lock().unwrap();
    assert!(calls[2].messages[1].content.contains("Step 2 | agent"));
    assert!(!calls[2].messages[1].content.contains("Step 3 | agent"));
}

#[tokio::test]
async fn step_by_step_without_flag_abstains_and_counts_parse_failures() {
    let t = trace(3);
    let m = ScriptedModel::new("fixture")
        .then(r#"{"reason":"fine","decisive":false,"confidence":0.9}"#)
        .then("garbage")
        .then("still garbage")
        .then(r#"{"reason":"fine","decisive":false,"confidence":0.9}"#);
    let r = judge(&m, &t, Protocol::StepByStep, &Settings::default())
        .await
        .unwrap();
    assert!(r.finding.location().is_none());
    assert_eq!(
        r.finding.abstain_reason.as_deref(),
        Some("no step was flagged as decisive")
    );
    assert_eq!(r.stats.calls, 4);
    assert_eq!(r.stats.abstentions, 1);
    assert_eq!(r.stats.repairs, 1);
}

#[tokio::test]
async fn binary_search_samples_ranges_too_long_for_the_window() {
    // 120 steps of 3,000 characters in a 2,200-token window: even 60 characters per step do
    // not fit, so the first ranges are sampled; every prompt fits and the search still
    // converges to the step the answers point at (always "second": the last step).
    let t = crate::test_support::long_trace(120, 3000);
    let m = ContextFixture::new(
        ScriptedModel::new("fixture").on(
            "locate/judge_binary",
            r#"{"reason":"r","part":"second","confidence":0.8}"#,
        ),
        2200,
    );
    let r = judge(&m, &t, Protocol::BinarySearch, &Settings::default())
        .await
        .unwrap();
    m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
    assert_eq!(r.finding.location(), Some(("A1", 119)));
    assert!(
        matches!(r.strategy, Strategy::Sampled { stride, .. } if stride >= 2),
        "{:?}",
        r.strategy
    );
    let calls = m.inner.calls.lock().unwrap();
    let first = &calls[0].messages[1].content;
    // The halves' boundaries (0, 59, 60, 119) are shown; left-out runs are marked.
    for k in [0, 59, 60, 119] {
        assert!(first.contains(&format!("Step {k} | agent")), "step {k}");
    }
    assert!(first.contains("left out by maslens: long-trace sampling"));
    assert!(first.contains("only every"));
    // Once a range fits, it is shown without sampling.
    let last = &calls[calls.len() - 1].messages[1].content;
    assert!(!last.contains("left out by maslens"));
}

#[tokio::test]
async fn binary_search_halves_correctly() {
    // 10 steps (0..=9), decisive step 6: [0,9] -> second [5,9] -> first [5,7] -> second [7,7]?
    // mid(0,9)=4: second -> [5,9]; mid=7: first -> [5,7]; mid=6: first -> [5,6]; mid=5: second -> [6,6].
    let t = trace(10);
    let m = ScriptedModel::new("fixture")
        .then(r#"{"reason":"a","part":"second","confidence":0.9}"#)
        .then(r#"{"reason":"b","part":"first","confidence":0.6}"#)
        .then(r#"{"reason":"c","part":"first","confidence":0.8}"#)
        .then(r#"{"reason":"d","part":"second","confidence":0.7}"#);
    let r = judge(&m, &t, Protocol::BinarySearch, &Settings::default())
        .await
        .unwrap();
    assert_eq!(r.finding.location(), Some(("A0", 6)));
    assert_eq!(r.finding.confidence, 0.6);
    assert_eq!(m.n_calls(), 4);
    let ranges: Vec<(u64, u64)> = r
        .trail
        .iter()
        .map(|v| (v["lo"].as_u64().unwrap(), v["hi"].as_u64().unwrap()))
        .collect();
    assert_eq!(ranges, vec![(0, 9), (5, 9), (5, 7), (5, 6)]);
    // The prompt shows exactly the current range, with step numbers.
    let calls = m.calls.lock().unwrap();
    let third = &calls[2].messages[1].content;
    assert!(third.contains("Step 5 | agent") && third.contains("Step 7 | agent"));
    assert!(!third.contains("Step 4 | agent") && !third.contains("Step 8 | agent"));
    assert!(third.contains("steps 5 to 6") && third.contains("steps 7 to 7"));
}

#[tokio::test]
async fn binary_search_ambiguous_answer_goes_to_first_half() {
    let t = trace(4);
    // Invalid twice (abstain) -> first half [0,1]; then "second" -> [1,1].
    let m = ScriptedModel::new("fixture")
        .then(r#"{"reason":"?","part":"both","confidence":0.5}"#)
        .then("no idea")
        .then(r#"{"reason":"x","part":"second","confidence":0.4}"#);
    let r = judge(&m, &t, Protocol::BinarySearch, &Settings::default())
        .await
        .unwrap();
    assert_eq!(r.finding.location(), Some(("A1", 1)));
    assert_eq!(r.trail[0]["ambiguous"], true);
    assert_eq!(r.stats.abstentions, 1);
}

#[tokio::test]
async fn long_trace_uses_truncation_then_windows_and_reports_it() {
    let t = crate::test_support::long_trace(12, 3000);
    // Context large enough for truncated steps: one call, strategy truncate.
    let m = ContextFixture::new(
        ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":5,"confidence":0.6}"#),
        9000,
    );
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    assert!(
        matches!(r.strategy, Strategy::TruncateSteps { .. }),
        "{:?}",
        r.strategy
    );
    assert!(m.inner.calls.lock().unwrap()[0].messages[1]
        .content
        .contains("omitted by maslens"));
    // Tiny context: windows; the second window flags its step.
    let t = crate::test_support::long_trace(40, 3000);
    let m = ContextFixture::new(
        ScriptedModel::new("fixture")
            .on_with("locate/judge_window", "Window 1 of", r#"{"reason":"the message gives no total for the task","in_window":false,"agent":"A0","step":0,"confidence":0.3,"summary":"setup"}"#)
            .on_with("locate/judge_window", "Window 2 of", r#"{"reason":"the message gives no total for the task","in_window":true,"agent":"A1","step":10,"confidence":0.6,"summary":"error"}"#),
        2200,
    );
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    assert!(
        matches!(r.strategy, Strategy::Windows { .. }),
        "{:?}",
        r.strategy
    );
    assert_eq!(m.inner.n_calls(), 2);
    assert_eq!(r.finding.location(), Some(("A0", 10)));
    assert!(r.finding.agent_mismatch);
    // The second window carries the first window's summary as untrusted notes.
    let second = m.inner.calls.lock().unwrap()[1].messages[1].content.clone();
    assert!(second.contains("<notes>\nSteps 0-"), "{second}");
    m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
}

#[tokio::test]
async fn prior_guided_narrowing_replaces_windows_with_one_focused_call() {
    // 40 steps of 3000 chars and a window of 2200 tokens: without a prior, several windows.
    let t = crate::test_support::long_trace(40, 3000);
    let mut prior = vec![0.001; 40];
    prior[17] = 0.9;
    prior[3] = 0.05;
    let m = ContextFixture::new(
        ScriptedModel::new("fixture")
            .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":17,"confidence":0.7}"#),
        2200,
    );
    let r = judge_guided(
        &m,
        &t,
        Protocol::AllAtOnce,
        &Settings::default(),
        Some(&prior),
    )
    .await
    .unwrap();
    let Strategy::Focused {
        steps_full,
        steps_abridged,
        ..
    } = r.strategy
    else {
        panic!("unexpected {:?}", r.strategy)
    };
    assert!(steps_full >= 1 && steps_full + steps_abridged == 40);
    assert_eq!(m.inner.n_calls(), 1, "one call instead of windows");
    assert_eq!(r.finding.location(), Some(("A1", 17)));
    let user = m.inner.calls.lock().unwrap()[0].messages[1].content.clone();
    assert!(user.contains("a learned prior ranks most likely to be decisive"));
    assert!(user.contains("characters of step 0 abridged by maslens"));
    assert!(
        !user.contains("characters of step 17 abridged"),
        "top step in full"
    );
    // Every step is still in the prompt.
    for i in 0..40 {
        assert!(
            user.contains(&format!("Step {i} | agent:")),
            "step {i} missing"
        );
    }
    m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
}

#[tokio::test]
async fn prior_is_ignored_when_the_trace_fits() {
    let t = trace(6);
    let m = ScriptedModel::new("fixture")
        .then(r#"{"reason":"the message gives no total for the task","agent":"A1","step":3,"confidence":0.8}"#);
    let prior = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
    let r = judge_guided(
        &m,
        &t,
        Protocol::AllAtOnce,
        &Settings::default(),
        Some(&prior),
    )
    .await
    .unwrap();
    assert_eq!(r.strategy, Strategy::Full);
    assert!(!m.calls.lock().unwrap()[0].messages[1]
        .content
        .contains("abridged"));
}

/// Review every step of `t` with a model that never flags; return how many calls did not
/// extend the previous call's prompt up to the previous step under review.
async fn step_by_step_prefix_breaks(t: &Trace, ctx: usize) -> (usize, usize, Strategy) {
    let m = ContextFixture::new(
        ScriptedModel::new("fixture").on(
            "locate/judge_step",
            r#"{"reason":"r","decisive":false,"confidence":0.6}"#,
        ),
        ctx,
    );
    let r = judge(&m, t, Protocol::StepByStep, &Settings::default())
        .await
        .unwrap();
    m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
    let calls = m.inner.calls.lock().unwrap();
    assert_eq!(calls.len(), t.steps.len());
    let mut breaks = 0;
    for i in 1..calls.len() {
        let prev = &calls[i - 1].messages[1].content;
        let next = &calls[i].messages[1].content;
        let head = format!("Step {} | agent", i - 1);
        let upto = prev.find(&head).expect("step under review shown");
        if !next.starts_with(&prev[..upto]) {
            breaks += 1;
        }
    }
    (breaks, calls.len(), r.strategy)
}

#[tokio::test]
async fn step_by_step_prompts_extend_each_other_on_long_traces() {
    // Fits in full: every prompt extends the previous one.
    let (breaks, _, strategy) = step_by_step_prefix_breaks(&trace(12), 8000).await;
    assert_eq!((breaks, strategy), (0, Strategy::Full));
    // Fits only truncated: the cap is chosen once for the whole trace, so the view changes
    // once (from full prefixes to capped ones) and never again.
    let t = crate::test_support::long_trace(20, 3000);
    let (breaks, _, strategy) = step_by_step_prefix_breaks(&t, 9000).await;
    assert!(
        matches!(strategy, Strategy::TruncateSteps { .. }),
        "{strategy:?}"
    );
    assert_eq!(breaks, 1);
    // Needs a sliding window: it moves in jumps, not every step.
    let t = crate::test_support::long_trace(120, 3000);
    let (breaks, calls, strategy) = step_by_step_prefix_breaks(&t, 2200).await;
    assert!(
        matches!(strategy, Strategy::SlidingWindow { .. }),
        "{strategy:?}"
    );
    assert!(breaks >= 2, "the window must move: {breaks}");
    assert!(breaks * 3 <= calls, "{breaks} breaks in {calls} calls");
}

#[tokio::test]
async fn step_by_step_narrowing_keeps_the_step_under_review_in_full() {
    let t = crate::test_support::long_trace(30, 3000);
    // The prior favours step 0; the step under review must still be shown in full.
    let mut prior = vec![0.0; 30];
    prior[0] = 1.0;
    let m = ContextFixture::new(
        ScriptedModel::new("fixture")
            .on_with(
                "locate/judge_step",
                "Step 29 |",
                r#"{"reason":"r","decisive":true,"confidence":0.6}"#,
            )
            .on(
                "locate/judge_step",
                r#"{"reason":"r","decisive":false,"confidence":0.6}"#,
            ),
        2200,
    );
    let r = judge_guided(
        &m,
        &t,
        Protocol::StepByStep,
        &Settings::default(),
        Some(&prior),
    )
    .await
    .unwrap();
    assert!(
        matches!(r.strategy, Strategy::Focused { .. }),
        "{:?}",
        r.strategy
    );
    let calls = m.inner.calls.lock().unwrap();
    let last = &calls[calls.len() - 1].messages[1].content;
    assert!(
        !last.contains("characters of step 29 abridged"),
        "step under review in full"
    );
}

#[tokio::test]
async fn many_windows_with_long_summaries_never_overflow_the_window() {
    // 120 steps in a 2,200-token window: many windows, each answering with a long summary.
    let t = crate::test_support::long_trace(120, 3000);
    let long = "s".repeat(3000);
    let answer = format!(
        r#"{{"reason":"the message gives no total for the task","in_window":false,"agent":"A0","step":0,"confidence":0.1,"summary":"{long}"}}"#
    );
    // Step 0 lies outside every window but the first: each such answer gets one repair
    // call (which must fit the window too) and, answered alike, the window abstains.
    let m = ContextFixture::new(
        ScriptedModel::new("fixture")
            .on("locate/judge_window", answer.clone())
            .on("llm/repair", answer),
        2200,
    );
    let r = judge(&m, &t, Protocol::AllAtOnce, &Settings::default())
        .await
        .unwrap();
    let Strategy::Windows { windows, .. } = r.strategy else {
        panic!("unexpected {:?}", r.strategy)
    };
    assert!(windows > 10, "{windows} windows");
    m.assert_every_prompt_fits(Settings::default().max_answer_tokens as usize);
    let calls = m.inner.calls.lock().unwrap();
    let last = &calls[calls.len() - 1].messages[1].content;
    assert!(
        last.contains("windows left out: too long for the context window"),
        "{last}"
    );
    assert!(last.contains(" [...]"));
}
