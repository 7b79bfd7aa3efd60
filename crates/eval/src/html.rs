//! Self-contained HTML rendering of a [`LocateReport`]: no external scripts, styles or fonts;
//! plots are inline SVG. Every string from data (trace ids, agent names, method labels) is
//! HTML-escaped.

use crate::metrics::Accuracy;
use crate::report::LocateReport;
use std::fmt::Write;

/// Escape text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A labelled group of bars: (series index, value, interval).
type Group = (String, Vec<(usize, f64, Option<[f64; 2]>)>);

const COLORS: [&str; 6] = [
    "#3b6ea8", "#d08c2c", "#5a9e5a", "#b04a4a", "#7d5fa6", "#6f6f6f",
];

/// A grouped bar chart of values in [0, 1] (or counts when `max` is given) with optional
/// interval whiskers. `groups`: (group label, [(series index, value, interval)]).
fn bar_chart(title: &str, series: &[String], groups: &[Group], max: Option<f64>) -> String {
    let (w, h, left, bottom, top) = (640.0, 260.0, 48.0, 40.0, 28.0);
    let plot_h = h - bottom - top;
    let ymax = max.unwrap_or(1.0).max(1e-9);
    let n_groups = groups.len().max(1) as f64;
    let group_w = (w - left - 10.0) / n_groups;
    let n_series = series.len().max(1) as f64;
    let bar_w = (group_w * 0.8 / n_series).max(2.0);
    let mut s = format!(
        r#"<figure><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" role="img" aria-label="{}">"#,
        h + 20.0 * (series.len() > 1) as u8 as f64,
        esc(title)
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="16" font-size="13" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        let y = top + plot_h - plot_h * i as f64 / 4.0;
        let label = if max.is_some() {
            format!("{v:.0}")
        } else {
            format!("{:.0}%", 100.0 * v)
        };
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="10" text-anchor="end">{label}</text>"##,
            w - 10.0,
            left - 4.0,
            y + 3.0
        );
    }
    for (g, (label, bars)) in groups.iter().enumerate() {
        let gx = left + group_w * g as f64 + group_w * 0.1;
        for (si, v, ci) in bars {
            let x = gx + bar_w * *si as f64;
            let bh = plot_h * (v / ymax).clamp(0.0, 1.0);
            let y = top + plot_h - bh;
            let color = COLORS[si % COLORS.len()];
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{color}"><title>{}: {:.3}</title></rect>"#,
                bar_w - 1.0,
                esc(&series.get(*si).cloned().unwrap_or_default()),
                v
            );
            if let Some([lo, hi]) = ci {
                let cx = x + (bar_w - 1.0) / 2.0;
                let ylo = top + plot_h - plot_h * (lo / ymax).clamp(0.0, 1.0);
                let yhi = top + plot_h - plot_h * (hi / ymax).clamp(0.0, 1.0);
                let _ = write!(
                    s,
                    r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{ylo:.1}" y2="{yhi:.1}" stroke="#222"/>"##
                );
            }
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            h - bottom + 14.0,
            esc(label)
        );
    }
    if series.len() > 1 {
        for (i, name) in series.iter().enumerate() {
            let x = left + 110.0 * i as f64;
            let _ = write!(
                s,
                r#"<rect x="{x}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="10">{}</text>"#,
                h - 6.0,
                COLORS[i % COLORS.len()],
                x + 14.0,
                h + 3.0,
                esc(name)
            );
        }
    }
    s.push_str("</svg></figure>");
    s
}

/// A line chart of accuracies over integer x values.
fn line_chart(title: &str, points: &[(usize, Accuracy)]) -> String {
    let (w, h, left, bottom, top) = (640.0, 240.0, 48.0, 30.0, 28.0);
    let plot_h = h - bottom - top;
    let plot_w = w - left - 20.0;
    let xmax = points.iter().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let px = |x: usize| left + plot_w * x as f64 / xmax;
    let py = |v: f64| top + plot_h - plot_h * v.clamp(0.0, 1.0);
    let mut s = format!(
        r#"<figure><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{}">"#,
        esc(title)
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="16" font-size="13" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for i in 0..=4 {
        let v = i as f64 / 4.0;
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="10" text-anchor="end">{:.0}%</text>"##,
            w - 20.0,
            py(v),
            py(v),
            left - 4.0,
            py(v) + 3.0,
            100.0 * v
        );
    }
    let band: Vec<String> = points
        .iter()
        .map(|(x, a)| format!("{:.1},{:.1}", px(*x), py(a.ci95[1])))
        .chain(
            points
                .iter()
                .rev()
                .map(|(x, a)| format!("{:.1},{:.1}", px(*x), py(a.ci95[0]))),
        )
        .collect();
    let _ = write!(
        s,
        r##"<polygon points="{}" fill="#3b6ea8" fill-opacity="0.15"/>"##,
        band.join(" ")
    );
    let line: Vec<String> = points
        .iter()
        .map(|(x, a)| format!("{:.1},{:.1}", px(*x), py(a.value)))
        .collect();
    let _ = write!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#3b6ea8" stroke-width="2"/>"##,
        line.join(" ")
    );
    for (x, a) in points {
        let _ = write!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#3b6ea8"><title>±{x}: {}</title></circle><text x="{:.1}" y="{}" font-size="10" text-anchor="middle">±{x}</text>"##,
            px(*x),
            py(a.value),
            esc(&a.display()),
            px(*x),
            h - bottom + 14.0
        );
    }
    s.push_str("</svg></figure>");
    s
}

fn acc_cell(a: &Option<Accuracy>) -> String {
    esc(&a
        .as_ref()
        .map(Accuracy::display)
        .unwrap_or_else(|| "n/a".into()))
}

/// Render the report as one self-contained HTML page.
pub fn render(r: &LocateReport) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>\
body{{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}}\
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:14px}}\
th{{background:#f3f3f3}}figure{{margin:1em 0}}code{{background:#f5f5f5;padding:0 3px}}.main{{font-weight:bold}}\
</style></head><body>",
        esc(&r.title)
    );
    let _ = write!(o, "<h1>{}</h1><ul>", esc(&r.title));
    let _ = write!(o, "<li>method: <code>{}</code></li>", esc(&r.method));
    if let Some(m) = &r.model {
        let _ = write!(o, "<li>model: <code>{}</code></li>", esc(m));
    }
    let _ = write!(
        o,
        "<li>dataset: <code>{}</code>, {} cases</li>",
        esc(&r.dataset),
        r.cases
    );
    let _ = write!(o, "<li>scorer: {}</li>", esc(&format!("{:?}", r.scorer)));
    let _ = write!(
        o,
        "<li>abstentions / unparsed: {} of {}; structured-output failures: {}</li></ul>",
        r.abstentions, r.cases, r.parse_failures
    );

    // Accuracy table and chart.
    let _ = write!(
        o,
        "<h2>Accuracy</h2><table><tr><th>method</th><th>agent-level</th><th>step-level</th>{}</tr>",
        if r.pair_accuracy.is_some() {
            "<th>pair-level</th>"
        } else {
            ""
        }
    );
    let _ = write!(
        o,
        "<tr class=\"main\"><td>{}</td><td>{}</td><td>{}</td>{}</tr>",
        esc(&r.method),
        acc_cell(&r.agent_accuracy),
        acc_cell(&r.step_accuracy),
        if r.pair_accuracy.is_some() {
            format!("<td>{}</td>", acc_cell(&r.pair_accuracy))
        } else {
            String::new()
        }
    );
    for (name, b) in &r.baselines {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td>{}</tr>",
            esc(name),
            acc_cell(&b.agent_accuracy),
            acc_cell(&b.step_accuracy),
            if r.pair_accuracy.is_some() {
                "<td>n/a</td>"
            } else {
                ""
            }
        );
    }
    o.push_str("</table>");
    let series = vec!["agent-level".to_string(), "step-level".to_string()];
    let mut groups = vec![(r.method.clone(), r.agent_accuracy, r.step_accuracy)];
    groups.extend(
        r.baselines
            .iter()
            .map(|(n, b)| (n.clone(), b.agent_accuracy, b.step_accuracy)),
    );
    let groups: Vec<Group> = groups
        .into_iter()
        .map(|(n, a, s)| {
            let bars = [a, s]
                .iter()
                .enumerate()
                .filter_map(|(i, x)| x.map(|x| (i, x.value, Some(x.ci95))))
                .collect();
            (n, bars)
        })
        .collect();
    o.push_str(&bar_chart(
        "Accuracy with 95% bootstrap intervals (method and baselines)",
        &series,
        &groups,
        None,
    ));

    if !r.subsets.is_empty() {
        o.push_str("<h2>By subset</h2><table><tr><th>subset</th><th>cases</th><th>agent-level</th><th>step-level</th></tr>");
        for (name, s) in &r.subsets {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(name),
                s.cases,
                acc_cell(&s.agent_accuracy),
                acc_cell(&s.step_accuracy)
            );
        }
        o.push_str("</table>");
    }
    if !r.tolerance.is_empty() {
        let mut pts: Vec<(usize, Accuracy)> = r
            .tolerance
            .iter()
            .filter_map(|(k, a)| Some((k.parse().ok()?, *a)))
            .collect();
        pts.sort_by_key(|p| p.0);
        o.push_str("<h2>Step accuracy within ±k steps</h2>");
        o.push_str(&line_chart("Tolerance curve (shaded: 95% interval)", &pts));
    }
    if !r.deviation_histogram.is_empty() {
        o.push_str("<h2>Deviation histogram</h2>");
        let maxc = r
            .deviation_histogram
            .iter()
            .map(|b| b.count)
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let groups: Vec<_> = r
            .deviation_histogram
            .iter()
            .map(|b| (b.bin.clone(), vec![(0usize, b.count as f64, None)]))
            .collect();
        o.push_str(&bar_chart(
            "Cases by |predicted - true step|",
            &["cases".to_string()],
            &groups,
            Some(maxc),
        ));
    }
    if let Some(sp) = &r.step_spread {
        let _ = write!(o, "<p>{}</p>", esc(&crate::markdown::spread_line(sp)));
    }
    if !r.by_length.is_empty() {
        o.push_str("<h2>By trace length (token quartiles)</h2><table><tr><th>quartile</th><th>tokens</th><th>agent-level</th><th>step-level</th></tr>");
        for b in &r.by_length {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}-{}</td><td>{}</td><td>{}</td></tr>",
                esc(&b.name),
                b.tokens[0],
                b.tokens[1],
                acc_cell(&b.agent_accuracy),
                acc_cell(&b.step_accuracy)
            );
        }
        o.push_str("</table>");
        let groups: Vec<_> = r
            .by_length
            .iter()
            .map(|b| {
                let bars = [b.agent_accuracy, b.step_accuracy]
                    .iter()
                    .enumerate()
                    .filter_map(|(i, x)| x.map(|x| (i, x.value, Some(x.ci95))))
                    .collect();
                (
                    format!("{} ({}-{})", b.name, b.tokens[0], b.tokens[1]),
                    bars,
                )
            })
            .collect();
        o.push_str(&bar_chart(
            "Accuracy by trace length",
            &series,
            &groups,
            None,
        ));
    }
    if !r.mislocalized.is_empty() {
        o.push_str("<h2>Most often mislocalized agents</h2><table><tr><th>agent</th><th>wrongly blamed</th><th>missed</th></tr>");
        for m in &r.mislocalized {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.agent),
                m.wrongly_blamed,
                m.missed
            );
        }
        o.push_str("</table>");
    }
    let u = &r.usage;
    let _ = write!(
        o,
        "<h2>Usage</h2><table><tr><th></th><th>total</th><th>per case</th></tr>\
<tr><td>prompt tokens</td><td>{}</td><td>{:.0}</td></tr><tr><td>cached prompt tokens</td><td>{} ({:.1}% prefix reuse)</td><td>{:.0}</td></tr>\
<tr><td>completion tokens</td><td>{}</td><td>{:.0}</td></tr><tr><td>calls</td><td>{}</td><td>{:.1}</td></tr><tr><td>seconds</td><td>{:.1}</td><td>{:.2}</td></tr>\
<tr><td>cost (USD)</td><td>{}</td><td>{}</td></tr></table>",
        u.prompt_tokens,
        u.per_case.prompt_tokens,
        u.cached_tokens,
        100.0 * u.prefix_reuse,
        u.per_case.cached_tokens,
        u.completion_tokens,
        u.per_case.completion_tokens,
        u.calls,
        u.per_case.calls,
        u.seconds,
        u.per_case.seconds,
        u.cost_usd.map(|c| format!("{c:.4}")).unwrap_or_else(|| "n/a".into()),
        u.per_case.cost_usd.map(|c| format!("{c:.5}")).unwrap_or_else(|| "n/a".into()),
    );
    o.push_str(
        "<h2>Cases</h2><table><tr><th>case</th><th>gold</th><th>predicted</th><th>tokens</th></tr>",
    );
    for c in &r.per_case {
        let gold = match (&c.gold.agent, c.gold.step) {
            (Some(a), Some(s)) => format!("{a} @ {s}"),
            _ => c
                .gold
                .faulty
                .iter()
                .map(|(a, m)| format!("{a} {}", m.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let pred = match (&c.pred.agent, c.pred.step) {
            (Some(a), Some(s)) => format!("{a} @ {s}"),
            (Some(a), None) => a.clone(),
            _ => "(none)".into(),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.id),
            esc(&gold),
            esc(&pred),
            c.trace_tokens
        );
    }
    o.push_str("</table>");
    if !r.errors.is_empty() {
        o.push_str("<h2>Cases whose calls failed (counted as unparsed)</h2><ul>");
        for (id, e) in &r.errors {
            let _ = write!(o, "<li><code>{}</code>: {}</li>", esc(id), esc(e));
        }
        o.push_str("</ul>");
    }
    o.push_str("</body></html>\n");
    o
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
        assert!(html.contains("AG/2"));
    }
}
