use super::*;

#[test]
fn methods_parse_by_name_and_unknown_names_list_the_choices() {
    for m in CompareMethod::ALL {
        assert_eq!(CompareMethod::parse(m.name()).unwrap(), m);
    }
    assert_eq!(
        CompareMethod::parse(" llm").unwrap(),
        CompareMethod::Agentlocate
    );
    let e = CompareMethod::parse("agenttracer").unwrap_err().to_string();
    assert!(e.contains("\"agenttracer\"") && e.contains("echo"), "{e}");
}

#[test]
fn p_values_show_three_digits_and_small_ones_as_a_bound() {
    assert_eq!(p_text(0.5), "0.500");
    assert_eq!(p_text(0.0004), "<0.001");
}

fn case(id: &str, gold_step: usize, pred_step: Option<usize>) -> Case {
    let mut c = Case {
        id: id.to_string(),
        ..Case::default()
    };
    c.gold.step = Some(gold_step);
    c.pred.step = pred_step;
    c
}

#[test]
fn paired_tests_count_the_cases_both_methods_scored_by_id() {
    // a: right on 1,2,3; b: right on 3,4,5,6 and has no row for case 7.
    let a: Vec<Case> = (1..=7)
        .map(|i| case(&format!("c{i}"), i, (i <= 3).then_some(i)))
        .collect();
    let mut b: Vec<Case> = (1..=6)
        .map(|i| case(&format!("c{i}"), i, (i >= 3).then_some(i)))
        .collect();
    b.reverse(); // pairs by id, not by position
    let step = |c: &Case| step_correct(c, Scorer::Exact);
    let t = paired_test("step", ("a", &a), ("b", &b), step, 0).unwrap();
    assert_eq!(
        (t.n, t.both, t.only_a, t.only_b, t.neither),
        (6, 1, 2, 3, 0)
    );
    assert!((t.difference - 1.0 / 6.0).abs() < 1e-12, "{}", t.difference);
    // exact McNemar on 2 vs 3 discordant pairs: two-sided binomial(5, 1/2) tail = 1
    assert!((t.p_value - 1.0).abs() < 1e-12, "{}", t.p_value);
    let [lo, hi] = t.ci95.unwrap();
    assert!(lo <= t.difference && t.difference <= hi, "{lo} {hi}");
    assert!(paired_test("step", ("a", &a), ("b", &[]), step, 0).is_none());
}
