use super::*;
use maslens_llm::testing::ScriptedModel;

fn trace(n: usize, len: usize) -> Trace {
    let mut t = Trace::new("t");
    for i in 0..n {
        t.steps.push(Step {
            index: i,
            agent: format!("A{}", i % 2),
            content: "x".repeat(len),
            ..Default::default()
        });
    }
    t
}

#[test]
fn truncation_keeps_head_and_tail_with_marker() {
    let text: String = (0..100)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let (cut, did) = truncate_step(&text, 30, 7);
    assert!(did);
    assert!(cut.starts_with(&text[..20]));
    assert!(cut.ends_with(&text[90..]));
    assert!(cut.contains("70 characters of step 7 omitted"));
    assert_eq!(truncate_step("short", 30, 0), ("short".to_string(), false));
}

#[test]
fn fit_picks_full_then_truncation_then_none() {
    let t = trace(4, 2000);
    let m = ScriptedModel::new("fixture");
    let f = fit(&m, &t, 0..4, None, MIN_STEP_CHARS).unwrap();
    assert_eq!(f.strategy, Strategy::Full);
    let f = fit(&m, &t, 0..4, Some(10_000), MIN_STEP_CHARS).unwrap();
    assert_eq!(f.strategy, Strategy::Full);
    let f = fit(&m, &t, 0..4, Some(1000), MIN_STEP_CHARS).unwrap();
    match f.strategy {
        Strategy::TruncateSteps {
            max_chars_per_step,
            steps_truncated,
        } => {
            assert_eq!(steps_truncated, 4);
            assert!((MIN_STEP_CHARS..2000).contains(&max_chars_per_step));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(f.tokens <= 1000);
    assert!(f.text.contains("omitted by maslens"));
    assert!(fit(&m, &t, 0..4, Some(100), MIN_STEP_CHARS).is_none());
}

#[test]
fn windows_cover_the_range_in_order() {
    let t = trace(10, 2000);
    let m = ScriptedModel::new("fixture");
    let ws = windows(&m, &t, 0..10, 300, MIN_STEP_CHARS);
    assert!(ws.len() > 1);
    assert_eq!(ws.first().unwrap().0.start, 0);
    assert_eq!(ws.last().unwrap().0.end, 10);
    for pair in ws.windows(2) {
        assert_eq!(pair[0].0.end, pair[1].0.start);
    }
    for (_, text) in &ws {
        assert!(m.count_tokens(text) <= 300);
    }
}

#[test]
fn focused_shows_the_prior_top_steps_in_full_and_abridges_the_rest() {
    let t = trace(10, 2000);
    let m = ScriptedModel::new("fixture");
    let mut prior = vec![0.01; 10];
    prior[6] = 0.5;
    prior[2] = 0.3;
    let all = render_steps(&t, 0..10, None).0;
    let budget = m.count_tokens(&all) / 2;
    let f = focused(&m, &t, 0..10, budget, &prior, None).unwrap();
    assert!(f.tokens <= budget);
    let Strategy::Focused {
        steps_full,
        steps_abridged,
        max_chars_per_step,
        ..
    } = f.strategy
    else {
        panic!("unexpected {:?}", f.strategy)
    };
    assert_eq!(steps_full + steps_abridged, 10);
    assert!(steps_full >= 2, "room for the two top steps: {steps_full}");
    assert_eq!(max_chars_per_step, FOCUS_MAX_CHARS);
    for i in [2, 6] {
        assert!(!f.text.contains(&format!("characters of step {i} abridged")));
    }
    assert!(f.text.contains("characters of step 9 abridged by maslens"));
    // A larger budget never shows fewer steps in full.
    let g = focused(&m, &t, 0..10, budget * 2, &prior, None).unwrap();
    let Strategy::Focused {
        steps_full: more, ..
    } = g.strategy
    else {
        panic!("unexpected {:?}", g.strategy)
    };
    assert!(more >= steps_full);
    // A tight budget abridges harder before giving up.
    let h = focused(&m, &t, 0..10, 320, &prior, None).unwrap();
    assert!(
        matches!(h.strategy, Strategy::Focused { abridged_chars, .. } if abridged_chars < ABRIDGED_CHARS),
        "{:?}",
        h.strategy
    );
    // Not even the barest rendering fits: None (the caller falls back to windows).
    assert!(focused(&m, &t, 0..10, 20, &prior, None).is_none());
}

#[test]
fn focused_puts_the_must_step_first_and_shrinks_a_huge_top_step() {
    let t = trace(6, 20_000);
    let m = ScriptedModel::new("fixture");
    let prior = [0.9, 0.0, 0.0, 0.0, 0.0, 0.0];
    let abridged = render_mixed(&t, 0..6, &[false; 6], FOCUS_MAX_CHARS, ABRIDGED_CHARS);
    let budget = m.count_tokens(&abridged) + 300;
    let f = focused(&m, &t, 0..6, budget, &prior, Some(4)).unwrap();
    let Strategy::Focused {
        steps_full,
        max_chars_per_step,
        ..
    } = f.strategy
    else {
        panic!("unexpected {:?}", f.strategy)
    };
    assert_eq!(steps_full, 1);
    assert!(max_chars_per_step < FOCUS_MAX_CHARS && max_chars_per_step > ABRIDGED_CHARS);
    assert!(
        f.text.contains("characters of step 0 abridged"),
        "prior top yields to must"
    );
    assert!(f.text.contains("characters of step 4 omitted by maslens"));
    assert!(f.tokens <= budget);
}

#[test]
fn fit_guided_uses_full_when_it_fits_and_plain_fit_without_prior() {
    let t = trace(4, 2000);
    let m = ScriptedModel::new("fixture");
    let prior = [0.25; 4];
    let f = fit_guided(
        &m,
        &t,
        0..4,
        Some(10_000),
        MIN_STEP_CHARS,
        Some((&prior, None)),
    );
    assert_eq!(f.unwrap().strategy, Strategy::Full);
    let f = fit_guided(&m, &t, 0..4, Some(1000), MIN_STEP_CHARS, None).unwrap();
    assert!(matches!(f.strategy, Strategy::TruncateSteps { .. }));
    let f = fit_guided(
        &m,
        &t,
        0..4,
        Some(1000),
        MIN_STEP_CHARS,
        Some((&prior, None)),
    );
    assert!(matches!(f.unwrap().strategy, Strategy::Focused { .. }));
}

fn step(index: usize, agent: &str, speaker: &str, content: &str) -> Step {
    Step {
        index,
        agent: agent.into(),
        speaker: speaker.into(),
        content: content.into(),
        ..Default::default()
    }
}

/// Tokens = 10 per step header, so budgets count steps (the planner only sees the text).
fn per_step(text: &str) -> usize {
    text.matches("Step ").count() * 10
}

#[test]
fn step_format_is_exact() {
    let mut t = Trace::new("t");
    t.steps = vec![
        step(3, "Orchestrator", "Orchestrator (thought)", "Plan: search"),
        step(4, "WebSurfer", "WebSurfer", "searching"),
        step(7, "Coder", "", "x = 1"),
    ];
    t.steps[1].tool_calls.push(maslens_trace::ToolCall {
        id: None,
        name: "search".into(),
        arguments: r#"{"q":"paris"}"#.into(),
    });
    let (text, cut) = render_steps(&t, 0..3, None);
    assert_eq!(cut, 0);
    assert_eq!(
        text,
        "Step 3 | agent: Orchestrator | speaker: Orchestrator (thought)\nPlan: search\n\n\
         Step 4 | agent: WebSurfer\nsearching\n[tool call search: {\"q\":\"paris\"}]\n\n\
         Step 7 | agent: Coder\nx = 1"
    );
    // The same text from a slice, from references, and one block per step.
    assert_eq!(render(&t.steps, None).0, text);
    assert_eq!(render(t.steps.iter().rev().rev(), None).0, text);
    assert_eq!(
        render_step(&t.steps[2], None),
        ("Step 7 | agent: Coder\nx = 1".to_string(), false)
    );
    // Out-of-range positions are clamped.
    assert_eq!(
        render_steps(&t, 2..99, None).0,
        "Step 7 | agent: Coder\nx = 1"
    );
    assert_eq!(render_steps(&t, 5..9, None).0, "");
}

#[test]
fn cut_markers_are_explicit() {
    let body = format!("{}{}", "a".repeat(100), "b".repeat(50));
    let (cut, did) = truncate_step(&body, 30, 12);
    assert!(did);
    assert_eq!(
        cut,
        format!(
            "{}\n[... 120 characters of step 12 omitted by maslens: long-trace truncation ...]\n{}",
            "a".repeat(20),
            "b".repeat(10)
        )
    );
    let (cut, did) = truncate_text(&body, 30);
    assert!(did);
    assert!(cut.contains("\n[... 120 characters omitted by maslens ...]\n"));
    assert_eq!(truncate_text("short", 30), ("short".to_string(), false));
    assert_eq!(
        gap_marker(3, 9, "long-trace sampling"),
        "[... steps 3 to 9 left out by maslens: long-trace sampling ...]"
    );
    assert_eq!(
        abridge_step(&body, 10, 5),
        "aaaaaaaaaa [... 140 more characters of step 5 abridged by maslens ...]"
    );
    // A cut step counts once in the truncation count, and characters (not bytes) are counted.
    let t = Trace {
        steps: vec![step(0, "A", "", &"é".repeat(50)), step(1, "B", "", "ok")],
        ..Trace::new("t")
    };
    let (text, n) = render_steps(&t, 0..2, Some(30));
    assert_eq!(n, 1);
    assert!(text.contains("20 characters of step 0 omitted"));
}

#[test]
fn sampling_marks_each_run_of_left_out_steps() {
    let t = trace(9, 10);
    let shown = [true, false, false, true, true, false, true, false, false];
    let (text, left_out) = render_selected(&t, 0..9, &shown, 100);
    assert_eq!(left_out, 5);
    assert!(text.contains(&gap_marker(1, 2, "long-trace sampling")));
    assert!(text.contains(&gap_marker(5, 5, "long-trace sampling")));
    assert!(text.ends_with(&gap_marker(7, 8, "long-trace sampling")));
}

fn planner<'a>(
    t: &'a Trace,
    count: &'a dyn Fn(&str) -> usize,
    budget: Option<usize>,
) -> Planner<'a> {
    Planner {
        steps: &t.steps,
        count,
        budget,
        cap: 1000,
    }
}

#[test]
fn plan_covers_everything_with_overlap() {
    let t = trace(10, 5);
    let w: Vec<Window> = planner(&t, &per_step, Some(30))
        .plan(0..10, 1)
        .into_iter()
        .map(|p| p.window)
        .collect();
    assert_eq!(w[0], Window { start: 0, end: 3 });
    assert_eq!(w[1], Window { start: 2, end: 5 });
    assert_eq!(w.last().unwrap().end, 10);
    for i in 0..10 {
        assert!(
            w.iter().any(|x| x.start <= i && i < x.end),
            "step {i} not covered"
        );
    }
    // An overlap as large as a window still moves forward one step at a time.
    let w = planner(&t, &per_step, Some(20)).plan(0..10, 5);
    assert!(w
        .windows(2)
        .all(|p| p[1].window.start == p[0].window.start + 1));
    assert_eq!(w.last().unwrap().window.end, 10);
    // No budget, or a budget everything fits in: one window; an empty range: none.
    for budget in [None, Some(1000)] {
        let w = planner(&t, &per_step, budget).plan(0..10, 2);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].window, Window { start: 0, end: 10 });
        assert_eq!(w[0].text, render_steps(&t, 0..10, Some(1000)).0);
    }
    assert!(planner(&t, &per_step, Some(30)).plan(4..4, 1).is_empty());
    // A sub-range stays inside it.
    let w = planner(&t, &per_step, Some(30)).plan(4..8, 0);
    assert_eq!(
        w.iter().map(|p| p.window.range()).collect::<Vec<_>>(),
        vec![4..7, 7..8]
    );
}

#[test]
fn a_step_too_long_alone_is_shrunk_to_fit_and_the_plan_moves_on() {
    let mut t = trace(3, 10);
    t.steps[1].content = "y".repeat(5000);
    let m = ScriptedModel::new("fixture");
    let count = |s: &str| m.count_tokens(s);
    let budget = 200;
    let w = planner(&t, &count, Some(budget)).plan(0..3, 2);
    assert!(w
        .iter()
        .all(|p| p.tokens <= budget && p.tokens == m.count_tokens(&p.text)));
    let big = w
        .iter()
        .find(|p| p.window == Window { start: 1, end: 2 })
        .unwrap();
    assert!(big.cap < 1000 && big.text.contains("characters of step 1 omitted by maslens"));
    assert_eq!(w.last().unwrap().window.end, 3);
    assert!(w.windows(2).all(|p| p[1].window.start > p[0].window.start));
}

#[test]
fn extend_keeps_the_required_steps_then_grows() {
    let t = trace(10, 5);
    // Steps 2..5 are required, then as many as fit (5 steps of 10 tokens).
    let w = planner(&t, &per_step, Some(50)).extend(2, 5, 10);
    assert_eq!(w.window, Window { start: 2, end: 7 });
    let w = planner(&t, &per_step, None).extend(2, 5, 10);
    assert_eq!(w.window, Window { start: 2, end: 10 });
    // Out-of-range bounds are clamped.
    let w = planner(&t, &per_step, None).extend(8, 20, 20);
    assert_eq!(w.window, Window { start: 8, end: 10 });
}

#[test]
fn tail_keeps_the_latest_steps_and_marks_the_rest() {
    let t = trace(10, 5);
    // The marker has no "Step " header, so 3 steps fit in 30.
    let w = planner(&t, &per_step, Some(30)).tail(0..8, "history beyond the budget");
    assert_eq!(w.window, Window { start: 5, end: 8 });
    assert!(w.text.starts_with("[... steps 0 to 4 left out by maslens: history beyond the budget ...]\n\nStep 5 | agent: A1\n"));
    assert!(w.text.ends_with("Step 7 | agent: A1\nxxxxx"));
    assert!(w.tokens <= 30);
    // Everything fits: no marker; nothing fits: only the marker.
    let w = planner(&t, &per_step, None).tail(0..8, "x");
    assert_eq!(
        (w.window, w.text.contains("left out")),
        (Window { start: 0, end: 8 }, false)
    );
    let w = planner(&t, &per_step, Some(5)).tail(0..8, "x");
    assert_eq!(w.window, Window { start: 8, end: 8 });
    assert_eq!(w.text, gap_marker(0, 7, "x"));
    assert_eq!(planner(&t, &per_step, Some(5)).tail(0..0, "x").text, "");
}

#[test]
fn windows_is_the_plan_without_overlap() {
    let t = trace(10, 2000);
    let m = ScriptedModel::new("fixture");
    let count = |s: &str| m.count_tokens(s);
    let plan = Planner {
        steps: &t.steps,
        count: &count,
        budget: Some(300),
        cap: MIN_STEP_CHARS,
    }
    .plan(0..10, 0);
    let ws = windows(&m, &t, 0..10, 300, MIN_STEP_CHARS);
    assert_eq!(ws.len(), plan.len());
    for ((r, text), p) in ws.iter().zip(&plan) {
        assert_eq!((r.clone(), text), (p.window.range(), &p.text));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn planned_windows_fit_cover_and_overlap_as_asked(
        lens in proptest::collection::vec(0usize..3000, 1..25),
        budget in 150usize..2000,
        overlap in 0usize..4,
    ) {
        let mut t = Trace::new("p");
        t.steps = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| step(i, &format!("A{}", i % 3), "", &"z".repeat(n)))
            .collect();
        let m = ScriptedModel::new("fixture");
        let count = |s: &str| m.count_tokens(s);
        let p = Planner { steps: &t.steps, count: &count, budget: Some(budget), cap: MIN_STEP_CHARS };
        let w = p.plan(0..t.steps.len(), overlap);
        proptest::prop_assert_eq!(w[0].window.start, 0);
        proptest::prop_assert_eq!(w.last().unwrap().window.end, t.steps.len());
        for x in &w {
            proptest::prop_assert!(!x.window.is_empty());
            proptest::prop_assert!(x.tokens <= budget, "{} > {budget}", x.tokens);
        }
        for pair in w.windows(2) {
            let (a, b) = (pair[0].window, pair[1].window);
            proptest::prop_assert!(b.start > a.start && b.start <= a.end);
            proptest::prop_assert!(a.end - b.start <= overlap);
        }
    }
}

/// `windows` as locate had it before the shared planner (kept to prove the output unchanged).
fn windows_before(
    model: &dyn ChatModel,
    trace: &Trace,
    range: Range<usize>,
    budget: usize,
    cap: usize,
) -> Vec<(Range<usize>, String)> {
    let mut out = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let mut end = start + 1;
        let (mut text, _) = render_steps(trace, start..end, Some(cap));
        if model.count_tokens(&text) > budget {
            let mut c = cap;
            while c > 16 && model.count_tokens(&text) > budget {
                c /= 2;
                text = render_steps(trace, start..end, Some(c)).0;
            }
        } else {
            while end < range.end {
                let (next, _) = render_steps(trace, start..end + 1, Some(cap));
                if model.count_tokens(&next) > budget {
                    break;
                }
                text = next;
                end += 1;
            }
        }
        out.push((start..end, text));
        start = end;
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn locate_windows_are_unchanged(
        lens in proptest::collection::vec(0usize..3000, 1..20),
        budget in 50usize..1500,
    ) {
        let mut t = Trace::new("p");
        t.steps = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| step(i, "A", "", &"w ".repeat(n / 2)))
            .collect();
        let m = ScriptedModel::new("fixture");
        let n = t.steps.len();
        proptest::prop_assert_eq!(
            windows(&m, &t, 0..n, budget, MIN_STEP_CHARS),
            windows_before(&m, &t, 0..n, budget, MIN_STEP_CHARS)
        );
    }
}
