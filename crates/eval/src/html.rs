//! Self-contained HTML rendering of a [`LocateReport`] through the template
//! `templates/locate_report.html.j2` in the shared page shell ([`crate::page`]): no external
//! scripts, styles or fonts; plots are inline SVG from [`crate::plot`]. Every string from data
//! (trace ids, agent names, method labels) is escaped by the template's HTML auto-escaping.

use crate::page::Figure;
use crate::plot::{grouped_bar_chart_svg, interval_line_chart_svg, Bar, BarGroup};
use crate::report::LocateReport;
use crate::view::Charts;

/// The template (`templates/locate_report.html.j2`).
pub const TEMPLATE: &str = include_str!("../templates/locate_report.html.j2");

fn bars(accs: [Option<crate::metrics::Accuracy>; 2]) -> Vec<Bar> {
    accs.iter()
        .enumerate()
        .filter_map(|(series, a)| {
            a.map(|a| Bar {
                series,
                value: a.value,
                interval: Some(a.ci95),
            })
        })
        .collect()
}

fn charts(r: &LocateReport) -> Charts {
    let series = ["agent-level".to_string(), "step-level".to_string()];
    let mut groups = vec![BarGroup {
        label: r.method.clone(),
        bars: bars([r.agent_accuracy, r.step_accuracy]),
    }];
    groups.extend(r.baselines.iter().map(|(n, b)| BarGroup {
        label: n.clone(),
        bars: bars([b.agent_accuracy, b.step_accuracy]),
    }));
    let accuracy = grouped_bar_chart_svg(
        "Accuracy with 95% bootstrap intervals (method and baselines)",
        &series,
        &groups,
    );
    let tolerance = (!r.tolerance.is_empty()).then(|| {
        let mut pts: Vec<(u32, f64, [f64; 2])> = r
            .tolerance
            .iter()
            .filter_map(|(k, a)| Some((k.parse().ok()?, a.value, a.ci95)))
            .collect();
        pts.sort_by_key(|p| p.0);
        interval_line_chart_svg(
            "Tolerance curve (shaded: 95% interval)",
            "tolerance k (steps)",
            &pts,
            true,
        )
        .into()
    });
    let deviation = (!r.deviation_histogram.is_empty()).then(|| {
        let (labels, counts): (Vec<String>, Vec<f64>) = r
            .deviation_histogram
            .iter()
            .map(|b| (b.bin.clone(), b.count as f64))
            .unzip();
        crate::plot::bar_chart_svg(
            "Cases by |predicted - true step|",
            &labels,
            &counts,
            "cases",
        )
        .into()
    });
    let by_length = (!r.by_length.is_empty()).then(|| {
        let groups: Vec<BarGroup> = r
            .by_length
            .iter()
            .map(|b| BarGroup {
                label: format!("{} ({}-{})", b.name, b.tokens[0], b.tokens[1]),
                bars: bars([b.agent_accuracy, b.step_accuracy]),
            })
            .collect();
        grouped_bar_chart_svg("Accuracy by trace length", &series, &groups).into()
    });
    Charts {
        accuracy: Some(Figure::from(accuracy)),
        tolerance,
        deviation,
        by_length,
    }
}

/// Render the report as one self-contained HTML page.
pub fn render(r: &LocateReport) -> String {
    let mut v = crate::view::view(r);
    v.charts = charts(r);
    crate::page::render_or_note(
        &[("locate_report.html.j2", TEMPLATE)],
        "locate_report.html.j2",
        v,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_contained_escaped_with_plots() {
        let mut r = crate::report::tests::sample();
        r.method = "<script>alert(1)</script>".into();
        let html = render(&r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<script"), "data must be escaped");
        assert!(html.contains("&lt;script&gt;"));
        assert!(
            !html.contains("src=\"http") && !html.contains("href=\"http"),
            "no external resources"
        );
        assert!(
            html.matches("<svg").count() >= 3,
            "accuracy, tolerance, deviation and length plots"
        );
        assert!(html.contains("<polyline"));
        assert!(html.contains("AG&#x2f;2"), "ids are escaped, `/` too");
    }
}
