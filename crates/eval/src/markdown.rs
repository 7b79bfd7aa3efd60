//! Markdown rendering of a [`LocateReport`] (terminal and pull requests), through the
//! template `templates/locate_report.md.j2`.

use crate::report::LocateReport;

/// The template (`templates/locate_report.md.j2`).
pub const TEMPLATE: &str = include_str!("../templates/locate_report.md.j2");

/// Render the report as Markdown.
pub fn render(r: &LocateReport) -> String {
    crate::page::render_or_note(
        &[("locate_report.md.j2", TEMPLATE)],
        "locate_report.md.j2",
        crate::view::view(r),
    )
}

/// One line on how concentrated the predicted steps are (shared with the HTML report).
pub fn spread_line(sp: &crate::metrics::StepSpread) -> String {
    format!(
        "Predicted steps: {} distinct over {} cases, most often step {} ({}/{}); gold: {} distinct, most often step {} ({}/{}).",
        sp.distinct,
        sp.predicted,
        sp.top_step,
        sp.top_count,
        sp.predicted,
        sp.gold_distinct,
        sp.gold_top_step,
        sp.gold_top_count,
        sp.gold_cases
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_all_sections() {
        let r = crate::report::tests::sample();
        let md = super::render(&r);
        for needle in [
            "| **m** | 1/3 (33.3%",
            "| last-agent | 3/3 (100.0%",
            "## By subset",
            "## Step accuracy within ±k steps",
            "| 1-2 | 1 |",
            // AG/1 -> 1, AG/2 -> 3, HC/1 abstained; gold 1, 2, 9.
            "Predicted steps: 2 distinct over 2 cases, most often step 1 (1/2); gold: 3 distinct, most often step 1 (1/3).",
            "## By trace length",
            "## Deviation in the paper's intervals (AgentLocate figure 2)",
            "| 0-2 | 2 |",
            "## Most often mislocalized agents",
            "40.0% prefix reuse",
            "- `AG/9`: boom",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in\n{md}");
        }
    }
    #[test]
    fn paper_length_ranges_per_who_and_when_subset() {
        let mut cases = crate::report::tests::sample().per_case;
        for c in &mut cases {
            c.subset = Some("Algorithm-Generated".into());
        }
        let r = crate::report::build(&cases, &[], vec![], &Default::default());
        assert_eq!(r.by_length_paper.len(), 1);
        let md = super::render(&r);
        let needle = format!(
            "## By trace length (Algorithm-Generated, the paper's token ranges, {} cases)",
            cases.len()
        );
        assert!(md.contains(&needle), "missing {needle:?} in\n{md}");
        assert!(md.contains("| <2000 |"), "{md}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["by_length_paper"][0]["subset"], "Algorithm-Generated");
        assert_eq!(json["deviation_histogram_paper"][0]["bin"], "0-2");
    }
}
