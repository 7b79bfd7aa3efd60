//! The one plotting path of every report: heatmap, line chart, line chart with an interval band,
//! bar chart, grouped bar chart with interval whiskers and histogram, each returning an SVG
//! document as a `String` (plotters, SVG backend only; text is emitted as SVG `<text>` so no font
//! files are needed).
//!
//! Labels are escaped by the SVG backend; callers embed the returned string directly in HTML.

use plotters::prelude::*;

/// Errors drawing a chart.
#[derive(Debug, thiserror::Error)]
#[error("plot {title:?}: {message}")]
pub struct PlotError {
    pub title: String,
    pub message: String,
}

fn err<E: std::fmt::Display>(title: &str) -> impl Fn(E) -> PlotError + '_ {
    move |e| PlotError {
        title: title.to_string(),
        message: e.to_string(),
    }
}

/// One named line of a line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The palette used for series and bars.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn finite_range(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return None;
    }
    if (hi - lo).abs() < 1e-12 {
        let pad = if lo.abs() < 1e-12 {
            1.0
        } else {
            lo.abs() * 0.1
        };
        return Some((lo - pad, hi + pad));
    }
    Some((lo, hi))
}

/// Colour for `t` in [0, 1]: red (0) through white (0.5) to green (1).
pub fn diverging(t: f64) -> RGBColor {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let lerp = |a: f64, b: f64, x: f64| (a + (b - a) * x).round() as u8;
    if t < 0.5 {
        let x = t / 0.5;
        RGBColor(
            lerp(215.0, 255.0, x),
            lerp(48.0, 255.0, x),
            lerp(39.0, 255.0, x),
        )
    } else {
        let x = (t - 0.5) / 0.5;
        RGBColor(
            lerp(255.0, 26.0, x),
            lerp(255.0, 152.0, x),
            lerp(255.0, 80.0, x),
        )
    }
}

/// A heatmap with one row per `rows` label and one column per `cols` label. `values[r][c]`;
/// `None` cells are grey. Colours map `range.0` -> red, the midpoint -> white, `range.1` ->
/// green; each cell shows its value with two decimals.
pub fn heatmap_svg(
    title: &str,
    rows: &[String],
    cols: &[String],
    values: &[Vec<Option<f64>>],
    range: (f64, f64),
) -> Result<String, PlotError> {
    let mut out = String::new();
    let label_w = rows
        .iter()
        .map(|r| r.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 30) as u32
        * 7
        + 20;
    let w = label_w + 90 * cols.len().max(1) as u32 + 30;
    let h = 70 + 36 * rows.len().max(1) as u32 + 40;
    {
        let root = SVGBackend::with_string(&mut out, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err(title))?;
        root.draw(&Text::new(
            title.to_string(),
            (10, 10),
            ("sans-serif", 16).into_font(),
        ))
        .map_err(err(title))?;
        let (x0, y0) = (label_w as i32, 60);
        for (c, name) in cols.iter().enumerate() {
            root.draw(&Text::new(
                name.clone(),
                (x0 + 90 * c as i32 + 6, y0 - 18),
                ("sans-serif", 12).into_font(),
            ))
            .map_err(err(title))?;
        }
        let span = (range.1 - range.0).abs().max(1e-12);
        for (r, name) in rows.iter().enumerate() {
            let y = y0 + 36 * r as i32;
            root.draw(&Text::new(
                name.clone(),
                (8, y + 12),
                ("sans-serif", 12).into_font(),
            ))
            .map_err(err(title))?;
            for c in 0..cols.len() {
                let v = values.get(r).and_then(|row| row.get(c)).copied().flatten();
                let x = x0 + 90 * c as i32;
                let color = match v {
                    Some(v) => diverging((v - range.0) / span),
                    None => RGBColor(220, 220, 220),
                };
                root.draw(&Rectangle::new([(x, y), (x + 88, y + 34)], color.filled()))
                    .map_err(err(title))?;
                let text = v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
                root.draw(&Text::new(
                    text,
                    (x + 28, y + 11),
                    ("sans-serif", 12).into_font(),
                ))
                .map_err(err(title))?;
            }
        }
        root.present().map_err(err(title))?;
    }
    Ok(out)
}

/// A line chart of one or more series with a legend.
pub fn line_chart_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<String, PlotError> {
    let mut out = String::new();
    let xr = finite_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))
        .unwrap_or((0.0, 1.0));
    let yr = finite_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)))
        .unwrap_or((0.0, 1.0));
    let ypad = (yr.1 - yr.0) * 0.08;
    {
        let root = SVGBackend::with_string(&mut out, (640, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(err(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(55)
            .build_cartesian_2d(xr.0..xr.1, (yr.0 - ypad)..(yr.1 + ypad))
            .map_err(err(title))?;
        // Counts on x (iterations, calls): whole-number ticks only, never "1.5 iterations".
        let whole = series
            .iter()
            .flat_map(|s| s.points.iter())
            .all(|p| p.0.fract() == 0.0);
        let span = (xr.1 - xr.0).round().max(0.0) as usize;
        let whole_label = |x: &f64| match (x - x.round()).abs() < 1e-9 {
            true => format!("{}", x.round() as i64),
            false => String::new(),
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_label).y_desc(y_label);
        if whole {
            mesh.x_labels((span + 1).clamp(2, 11))
                .x_label_formatter(&whole_label);
        }
        mesh.draw().map_err(err(title))?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err(title))?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(err(title))?;
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::LowerRight)
                .draw()
                .map_err(err(title))?;
        }
        root.present().map_err(err(title))?;
    }
    Ok(out)
}

/// A vertical bar chart, one bar per label.
pub fn bar_chart_svg(
    title: &str,
    labels: &[String],
    values: &[f64],
    y_label: &str,
) -> Result<String, PlotError> {
    let mut out = String::new();
    let n = labels.len().max(1);
    let ymax = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let ymin = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::min);
    let top = if ymax <= ymin { ymin + 1.0 } else { ymax * 1.1 };
    {
        let w = (120 + 70 * n as u32).max(360);
        let root = SVGBackend::with_string(&mut out, (w, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(err(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(55)
            .build_cartesian_2d((0..n).into_segmented(), ymin..top)
            .map_err(err(title))?;
        let labels_owned: Vec<String> = labels.to_vec();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => labels_owned.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc(y_label)
            .draw()
            .map_err(err(title))?;
        chart
            .draw_series(values.iter().enumerate().map(|(i, v)| {
                let v = if v.is_finite() { *v } else { 0.0 };
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), v),
                    ],
                    PALETTE[i % PALETTE.len()].filled(),
                );
                bar.set_margin(0, 0, 8, 8);
                bar
            }))
            .map_err(err(title))?;
        root.present().map_err(err(title))?;
    }
    Ok(out)
}

/// One bar of a [`grouped_bar_chart_svg`]: its series, value in [0, 1] and optional interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub series: usize,
    pub value: f64,
    pub interval: Option<[f64; 2]>,
}

/// A labelled group of bars.
#[derive(Debug, Clone, PartialEq)]
pub struct BarGroup {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// Grouped bars of shares in [0, 1] (y axis in percent), one colour per series, with interval
/// whiskers; a legend when there is more than one series.
pub fn grouped_bar_chart_svg(
    title: &str,
    series: &[String],
    groups: &[BarGroup],
) -> Result<String, PlotError> {
    let n = groups.len().max(1);
    let per = series.len().max(1) as f64;
    let bar_w = 0.8 / per;
    let mut out = String::new();
    {
        let w = (160 + 110 * n as u32).max(480);
        let root = SVGBackend::with_string(&mut out, (w, 340)).into_drawing_area();
        root.fill(&WHITE).map_err(err(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(if series.len() > 1 { 52 } else { 30 })
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..n as f64, 0f64..1.0f64)
            .map_err(err(title))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(5)
            .y_label_formatter(&|v| format!("{:.0}%", 100.0 * v))
            .draw()
            .map_err(err(title))?;
        let x0 = |g: usize, si: usize| g as f64 + 0.1 + bar_w * si as f64;
        for si in 0..series.len() {
            let color = PALETTE[si % PALETTE.len()];
            let bars: Vec<(usize, Bar)> = groups
                .iter()
                .enumerate()
                .flat_map(|(g, grp)| grp.bars.iter().map(move |b| (g, *b)))
                .filter(|(_, b)| b.series == si && b.value.is_finite())
                .collect();
            chart
                .draw_series(bars.iter().map(|(g, b)| {
                    Rectangle::new(
                        [
                            (x0(*g, si), 0.0),
                            (x0(*g, si) + bar_w * 0.95, b.value.clamp(0.0, 1.0)),
                        ],
                        color.filled(),
                    )
                }))
                .map_err(err(title))?;
            chart
                .draw_series(bars.iter().filter_map(|(g, b)| {
                    let [lo, hi] = b.interval?;
                    let cx = x0(*g, si) + bar_w * 0.475;
                    Some(PathElement::new(
                        vec![(cx, lo.clamp(0.0, 1.0)), (cx, hi.clamp(0.0, 1.0))],
                        BLACK.stroke_width(1),
                    ))
                }))
                .map_err(err(title))?;
        }
        for (g, grp) in groups.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
            root.draw(&Text::new(
                grp.label.clone(),
                (x, y + 8),
                ("sans-serif", 12).into_font().into_text_style(&root).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    ),
                ),
            ))
            .map_err(err(title))?;
        }
        if series.len() > 1 {
            for (si, name) in series.iter().enumerate() {
                let x = 60 + 130 * si as i32;
                let y = 340 - 18;
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 10, y + 5)],
                    PALETTE[si % PALETTE.len()].filled(),
                ))
                .map_err(err(title))?;
                root.draw(&Text::new(
                    name.clone(),
                    (x + 14, y - 6),
                    ("sans-serif", 12).into_font(),
                ))
                .map_err(err(title))?;
            }
        }
        root.present().map_err(err(title))?;
    }
    Ok(out)
}

/// A line of shares in [0, 1] (y axis in percent) over integer x values, with a shaded interval
/// band: `points` are `(x, value, [lo, hi])`; x ticks read `±x` when `plus_minus`.
pub fn interval_line_chart_svg(
    title: &str,
    x_label: &str,
    points: &[(u32, f64, [f64; 2])],
    plus_minus: bool,
) -> Result<String, PlotError> {
    let xmax = points.iter().map(|p| p.0).max().unwrap_or(1).max(1);
    let color = PALETTE[0];
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (640, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(err(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0u32..xmax, 0f64..1.0f64)
            .map_err(err(title))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_labels(5)
            .x_label_formatter(&|x| {
                if plus_minus {
                    format!("±{x}")
                } else {
                    x.to_string()
                }
            })
            .y_label_formatter(&|v| format!("{:.0}%", 100.0 * v))
            .draw()
            .map_err(err(title))?;
        let pts: Vec<(u32, f64, [f64; 2])> = points
            .iter()
            .copied()
            .filter(|p| p.1.is_finite() && p.2.iter().all(|v| v.is_finite()))
            .collect();
        if !pts.is_empty() {
            let band: Vec<(u32, f64)> = pts
                .iter()
                .map(|p| (p.0, p.2[1].clamp(0.0, 1.0)))
                .chain(pts.iter().rev().map(|p| (p.0, p.2[0].clamp(0.0, 1.0))))
                .collect();
            chart
                .draw_series(std::iter::once(Polygon::new(
                    band,
                    color.mix(0.15).filled(),
                )))
                .map_err(err(title))?;
        }
        let line: Vec<(u32, f64)> = pts.iter().map(|p| (p.0, p.1.clamp(0.0, 1.0))).collect();
        chart
            .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(err(title))?;
        chart
            .draw_series(line.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(err(title))?;
        root.present().map_err(err(title))?;
    }
    Ok(out)
}

/// A histogram of `values` in `bins` equal-width bins.
pub fn histogram_svg(
    title: &str,
    values: &[f64],
    bins: usize,
    x_label: &str,
) -> Result<String, PlotError> {
    let bins = bins.max(1);
    let (lo, hi) = finite_range(values.iter().copied()).unwrap_or((0.0, 1.0));
    let width = (hi - lo) / bins as f64;
    let mut counts = vec![0u32; bins];
    for v in values.iter().filter(|v| v.is_finite()) {
        let b = (((v - lo) / width).floor() as usize).min(bins - 1);
        counts[b] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(0).max(1);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (640, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(err(title))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(lo..hi, 0u32..top + top / 10 + 1)
            .map_err(err(title))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("count")
            .draw()
            .map_err(err(title))?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, c)| {
                let x0 = lo + width * i as f64;
                Rectangle::new([(x0, 0), (x0 + width, *c)], PALETTE[0].mix(0.8).filled())
            }))
            .map_err(err(title))?;
        root.present().map_err(err(title))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_on_x_get_whole_number_ticks() {
        let series = [Series {
            name: "ours".into(),
            points: vec![(0.0, 10.0), (1.0, 20.0), (2.0, 30.0)],
        }];
        let svg = line_chart_svg("t", "iteration", "accuracy", &series).unwrap();
        let labels: Vec<&str> = svg
            .split("</text>")
            .filter_map(|chunk| chunk.rsplit('>').next())
            .map(str::trim)
            .collect();
        let fractions: Vec<&&str> = labels
            .iter()
            .filter(|l| l.parse::<f64>().is_ok_and(|x| x.fract() != 0.0))
            .collect();
        assert!(fractions.is_empty(), "{fractions:?} in {labels:?}");
        assert!(labels.contains(&"1") && labels.contains(&"2"), "{labels:?}");
    }

    #[test]
    fn heatmap_has_cells_and_escaped_labels() {
        let svg = heatmap_svg(
            "credit <roles>",
            &["a&b".to_string(), "c".to_string()],
            &["round 1".to_string(), "round 2".to_string()],
            &[vec![Some(0.1), Some(0.9)], vec![None, Some(0.5)]],
            (0.0, 1.0),
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        assert!(svg.contains("0.90") && svg.contains("round 2"));
        assert!(svg.contains("a&amp;b"), "labels must be escaped");
        assert!(!svg.contains("<roles>"));
        assert!(svg.matches("<rect").count() >= 5);
    }

    #[test]
    fn grouped_bars_and_interval_line_render() {
        let groups = vec![
            BarGroup {
                label: "m<1>".into(),
                bars: vec![
                    Bar {
                        series: 0,
                        value: 0.5,
                        interval: Some([0.2, 0.8]),
                    },
                    Bar {
                        series: 1,
                        value: 0.25,
                        interval: None,
                    },
                ],
            },
            BarGroup {
                label: "last-agent".into(),
                bars: vec![],
            },
        ];
        let svg =
            grouped_bar_chart_svg("acc", &["agent-level".into(), "step-level".into()], &groups)
                .unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("m&lt;1&gt;") && svg.contains("last-agent"));
        assert!(svg.contains("step-level"), "legend");
        assert!(svg.matches("<rect").count() >= 3);
        let svg = interval_line_chart_svg(
            "tol",
            "k",
            &[(0, 0.25, [0.0, 0.5]), (2, 0.75, [0.5, 1.0])],
            true,
        )
        .unwrap();
        assert!(
            svg.contains("<polygon") && svg.contains("<polyline"),
            "{svg}"
        );
        assert!(svg.contains("±2"));
        assert!(interval_line_chart_svg("none", "k", &[], false)
            .unwrap()
            .starts_with("<svg"));
    }

    #[test]
    fn diverging_endpoints() {
        assert_eq!(diverging(0.5), RGBColor(255, 255, 255));
        assert_eq!(diverging(0.0), RGBColor(215, 48, 39));
        assert_eq!(diverging(2.0), diverging(1.0));
    }

    #[test]
    fn line_bar_histogram_render() {
        let s = vec![
            Series {
                name: "ours".into(),
                points: vec![(0.0, 0.5), (1.0, 0.7)],
            },
            Series {
                name: "black-box".into(),
                points: vec![(0.0, 0.5), (1.0, f64::NAN)],
            },
        ];
        let svg = line_chart_svg("acc", "iteration", "accuracy", &s).unwrap();
        assert!(svg.contains("ours") && (svg.contains("<polyline") || svg.contains("<path")));
        // Degenerate input still renders.
        assert!(line_chart_svg("empty", "x", "y", &[])
            .unwrap()
            .starts_with("<svg"));
        let svg = bar_chart_svg(
            "labels",
            &["NONE".into(), "KNOWLEDGE_DEFICIT".into()],
            &[3.0, 1.0],
            "count",
        )
        .unwrap();
        assert!(svg.contains("KNOWLEDGE_DEFICIT"));
        let svg = histogram_svg("scores", &[0.0, 1.0, 1.0, 5.0], 5, "score").unwrap();
        // background + one bar per non-empty bin (0, 1 and 5 fall in three bins)
        assert!(svg.matches("<rect").count() >= 4, "{svg}");
        assert!(histogram_svg("none", &[], 3, "x")
            .unwrap()
            .starts_with("<svg"));
    }
}
