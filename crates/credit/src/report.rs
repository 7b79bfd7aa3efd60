//! Reports of `maslens optimize` and `maslens credit`: Markdown and self-contained HTML with SVG
//! plots, rendered through the templates in `templates/` (HTML in the shared page shell of
//! [`maslens_eval::page`], every data string auto-escaped). JSON is the serde form of
//! [`Experiment`].
//!
//! Sections follow the paper's tables: accuracy mean +- std over seeds (table 1), outcome shift
//! (table 2), overall statistics (table 3), per-round counts and scores (table 4), failure-label
//! distribution (table 5), round x label (table 6); plus the role x round credit table and
//! heatmap, the BCD iterations, and accuracy against iterations and against LLM calls.

use crate::credit::CreditTable;
use crate::critic::FAILURE_LABELS;
use crate::experiment::{Experiment, FinalEval, Shift};
use maslens_eval::page::Figure;
use maslens_eval::plot::{bar_chart_svg, heatmap_svg, histogram_svg, line_chart_svg, Series};
use serde::Serialize;
use std::collections::BTreeMap;

/// The report templates (`templates/`), compiled in.
const TEMPLATES: [(&str, &str); 6] = [
    ("table.md.j2", include_str!("../templates/table.md.j2")),
    ("table.html.j2", include_str!("../templates/table.html.j2")),
    (
        "optimize_report.md.j2",
        include_str!("../templates/optimize_report.md.j2"),
    ),
    (
        "optimize_report.html.j2",
        include_str!("../templates/optimize_report.html.j2"),
    ),
    (
        "credit_report.md.j2",
        include_str!("../templates/credit_report.md.j2"),
    ),
    (
        "credit_report.html.j2",
        include_str!("../templates/credit_report.html.j2"),
    ),
];

fn render<S: Serialize>(name: &str, ctx: S) -> String {
    maslens_eval::page::render_or_note(&TEMPLATES, name, ctx)
}

/// A simple table: header and rows of cells.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Markdown (`templates/table.md.j2`).
    pub fn markdown(&self) -> String {
        render("table.md.j2", serde_json::json!({ "t": self }))
    }
    /// An HTML fragment (`templates/table.html.j2`), every cell escaped.
    pub fn html(&self) -> String {
        render("table.html.j2", serde_json::json!({ "t": self }))
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

fn opt2(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

/// Role x round credit table (cells c_{i,t}, row credit C_role_i, last row C_time_t).
pub fn credit_table_view(t: &CreditTable, title: &str) -> Table {
    let mut header = vec!["role".to_string()];
    header.extend(t.rounds.iter().cloned());
    header.push("C_role".into());
    let mut rows: Vec<Vec<String>> = t
        .roles
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = vec![r.clone()];
            row.extend(t.cell[i].iter().map(|v| opt2(*v)));
            row.push(opt2(t.role_credit[i]));
            row
        })
        .collect();
    let mut last = vec!["C_time (temporal)".to_string()];
    last.extend(t.round_credit.iter().map(|v| opt2(*v)));
    last.push(String::new());
    rows.push(last);
    Table {
        title: title.into(),
        header,
        rows,
    }
}

/// The role x segment credit table of `maslens credit` as Markdown
/// (`templates/credit_report.md.j2`).
pub fn credit_markdown(t: &CreditTable, title: &str) -> String {
    render(
        "credit_report.md.j2",
        serde_json::json!({ "t": credit_table_view(t, title) }),
    )
}

/// The self-contained HTML page of `maslens credit` (`templates/credit_report.html.j2`): the
/// role x segment heatmap (last row: temporal credit) and the credit table.
pub fn credit_html(t: &CreditTable, title: &str) -> String {
    credit_html_sections(&[(title.to_string(), t)], None)
}

/// [`credit_html`] with a heat map and a table per section (one per system of a corpus that
/// holds several), after `note`.
pub fn credit_html_sections(sections: &[(String, &CreditTable)], note: Option<&str>) -> String {
    let sections: Vec<serde_json::Value> = sections
        .iter()
        .map(|(title, t)| {
            let rows: Vec<String> = t
                .roles
                .iter()
                .cloned()
                .chain(["temporal credit".to_string()])
                .collect();
            let mut vals = t.cell.clone();
            vals.push(t.round_credit.clone());
            let heatmap = Figure::from(heatmap_svg(
                "Role x segment credit",
                &rows,
                &t.rounds,
                &vals,
                (0.0, 1.0),
            ));
            serde_json::json!({"heatmap": heatmap, "t": credit_table_view(t, title)})
        })
        .collect();
    render(
        "credit_report.html.j2",
        serde_json::json!({"title": "maslens credit", "note": note, "sections": sections}),
    )
}

fn shift_row(name: &str, s: &Shift) -> Vec<String> {
    let n = s.total().max(1) as f64;
    vec![
        name.into(),
        format!("{:.1}", 100.0 * s.wrong_wrong as f64 / n),
        format!("{:.1}", 100.0 * s.right_wrong as f64 / n),
        format!("{:.1}", 100.0 * s.wrong_right as f64 / n),
        format!("{:.1}", 100.0 * s.right_right as f64 / n),
        s.total().to_string(),
    ]
}

fn overall(evals: &[FinalEval], name: &str) -> Vec<String> {
    let n = evals.len();
    let c = evals.iter().filter(|e| e.correct).count();
    let scores: Vec<f64> = evals
        .iter()
        .filter_map(|e| e.score.map(f64::from))
        .collect();
    let avg = if scores.is_empty() {
        "-".into()
    } else {
        format!("{:.2}", scores.iter().sum::<f64>() / scores.len() as f64)
    };
    let share = |k: usize| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{k} ({:.1}%)", 100.0 * k as f64 / n as f64)
        }
    };
    vec![name.into(), n.to_string(), share(c), share(n - c), avg]
}

fn by_round(evals: &[FinalEval], name: &str, rounds: usize) -> Vec<Vec<String>> {
    let n = evals.len().max(1) as f64;
    (1..=rounds)
        .map(|r| {
            let es: Vec<&FinalEval> = evals.iter().filter(|e| e.round == r).collect();
            let scores: Vec<f64> = es.iter().filter_map(|e| e.score.map(f64::from)).collect();
            let acc = if es.is_empty() {
                "-".into()
            } else {
                pct(es.iter().filter(|e| e.correct).count() as f64 / es.len() as f64)
            };
            vec![
                name.into(),
                r.to_string(),
                es.len().to_string(),
                format!("{:.1}%", 100.0 * es.len() as f64 / n),
                acc,
                if scores.is_empty() {
                    "-".into()
                } else {
                    format!("{:.2}", scores.iter().sum::<f64>() / scores.len() as f64)
                },
            ]
        })
        .collect()
}

/// `NONE`, then the taxonomy in the paper's order.
fn labels_none_first() -> Vec<String> {
    let mut v = vec![crate::critic::NONE_LABEL.to_string()];
    v.extend(
        FAILURE_LABELS
            .iter()
            .filter(|l| **l != crate::critic::NONE_LABEL)
            .map(|s| s.to_string()),
    );
    v
}

fn label_order(evals: &[&FinalEval]) -> Vec<String> {
    let mut labels = labels_none_first();
    for e in evals {
        if !labels.contains(&e.label) {
            labels.push(e.label.clone());
        }
    }
    labels
}

fn label_dist(evals: &[FinalEval], name: &str) -> Vec<Vec<String>> {
    let n = evals.len().max(1) as f64;
    let refs: Vec<&FinalEval> = evals.iter().collect();
    label_order(&refs)
        .into_iter()
        .filter_map(|l| {
            let es: Vec<&FinalEval> = evals.iter().filter(|e| e.label == l).collect();
            if es.is_empty() {
                return None;
            }
            let scores: Vec<f64> = es.iter().filter_map(|e| e.score.map(f64::from)).collect();
            Some(vec![
                name.into(),
                l,
                es.len().to_string(),
                format!("{:.1}%", 100.0 * es.len() as f64 / n),
                if scores.is_empty() {
                    "-".into()
                } else {
                    format!("{:.2}", scores.iter().sum::<f64>() / scores.len() as f64)
                },
            ])
        })
        .collect()
}

/// All tables of an experiment, in report order.
pub fn tables(x: &Experiment) -> Vec<Table> {
    let base: Vec<FinalEval> = x
        .seeds
        .iter()
        .flat_map(|s| s.baseline_final.clone())
        .collect();
    let ours: Vec<FinalEval> = x.seeds.iter().flat_map(|s| s.ours_final.clone()).collect();
    let mut out = vec![accuracy_table(x), shift_table(x)];
    out.extend(final_answer_tables(&base, &ours, x.config.rounds));
    out.extend(utterance_table(x));
    for s in x.seeds.iter().take(1) {
        for it in &s.bcd.iterations {
            if let Some(c) = &it.credit {
                let title = format!(
                    "Credit, seed {}, iteration {} (optimization set)",
                    s.seed, it.iteration
                );
                out.push(credit_table_view(c, &title));
            }
        }
    }
    out.push(bcd_table(x));
    out
}

fn columns(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Table 1: held-out accuracy per method.
fn accuracy_table(x: &Experiment) -> Table {
    let rows = x
        .summary
        .iter()
        .map(|m| {
            let per_seed: Vec<String> = m.accuracies.iter().map(|a| pct(*a)).collect();
            vec![
                m.method.clone(),
                format!("{} ± {}", pct(m.mean), pct(m.std)),
                per_seed.join(", "),
                m.calls
                    .map(|c| format!("{c:.0}"))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    Table {
        title: format!(
            "Accuracy on the held-out set ({} questions, {} seed(s))",
            x.n_test,
            x.seeds.len()
        ),
        header: columns(&[
            "method",
            "accuracy % (mean ± std)",
            "per seed %",
            "optimizer LLM calls (mean)",
        ]),
        rows,
    }
}

/// Table 2: how test outcomes moved against the unoptimized baseline, all seeds.
fn shift_table(x: &Experiment) -> Table {
    let mut ours = Shift::default();
    let mut bb: Option<Shift> = None;
    for s in &x.seeds {
        ours.add(&s.shift_ours);
        if let Some(b) = &s.shift_blackbox {
            bb.get_or_insert_with(Shift::default).add(b);
        }
    }
    let mut rows = Vec::new();
    if let Some(b) = &bb {
        rows.push(shift_row("black-box", b));
    }
    rows.push(shift_row("ours", &ours));
    Table {
        title: "Outcome shift against the unoptimized baseline (% of test predictions, all seeds)"
            .into(),
        header: columns(&[
            "method",
            "wrong→wrong",
            "right→wrong",
            "wrong→right",
            "right→right",
            "n",
        ]),
        rows,
    }
}

/// The final answers of the baseline and the optimized system: overall, by the round the
/// debate ended, by failure pattern, and round x failure pattern for each.
fn final_answer_tables(base: &[FinalEval], ours: &[FinalEval], rounds: usize) -> Vec<Table> {
    let mut by_round_rows = by_round(base, "baseline", rounds);
    by_round_rows.extend(by_round(ours, "ours", rounds));
    let mut label_rows = label_dist(base, "baseline");
    label_rows.extend(label_dist(ours, "ours"));
    let mut out = vec![
        Table {
            title: "Overall statistics of the final answers (critic score 0-5)".into(),
            header: columns(&["system", "predictions", "correct", "incorrect", "avg score"]),
            rows: vec![overall(base, "baseline"), overall(ours, "ours")],
        },
        Table {
            title: "Questions and average score by the round at which the debate ended".into(),
            header: columns(&[
                "system",
                "round",
                "count",
                "proportion",
                "accuracy %",
                "avg score",
            ]),
            rows: by_round_rows,
        },
        Table {
            title: "Failure-pattern distribution of the final answers (NONE = correct)".into(),
            header: columns(&["system", "failure pattern", "count", "share", "avg score"]),
            rows: label_rows,
        },
    ];
    let refs: Vec<&FinalEval> = ours.iter().chain(base.iter()).collect();
    let labels = label_order(&refs);
    for (name, evals) in [("baseline", base), ("ours", ours)] {
        let rows = (1..=rounds)
            .map(|r| {
                let mut row = vec![format!("round {r}")];
                row.extend(labels.iter().map(|l| {
                    let n = evals.iter().filter(|e| e.round == r && &e.label == l);
                    n.count().to_string()
                }));
                row
            })
            .collect();
        let mut header = vec!["ended in".to_string()];
        header.extend(labels.iter().cloned());
        out.push(Table {
            title: format!("Final answers by round and failure pattern ({name})"),
            header,
            rows,
        });
    }
    out
}

/// Role utterances by round and failure pattern (AgentTurnEval) of the first seed's first
/// iteration, when it recorded any.
fn utterance_table(x: &Experiment) -> Option<Table> {
    let seed = x.seeds.first()?;
    let it = seed.bcd.iterations.first()?;
    if it.utterance_labels.is_empty() {
        return None;
    }
    let mut labels = labels_none_first();
    for m in &it.utterance_labels {
        for k in m.keys() {
            if !labels.contains(k) {
                labels.push(k.clone());
            }
        }
    }
    let rows = it
        .utterance_labels
        .iter()
        .enumerate()
        .map(|(t, m)| {
            let mut row = vec![format!("round {}", t + 1)];
            row.extend(
                labels
                    .iter()
                    .map(|l| m.get(l).copied().unwrap_or(0).to_string()),
            );
            row
        })
        .collect();
    let mut header = vec!["round".to_string()];
    header.extend(labels);
    Some(Table {
        title: format!(
            "Role utterances by round and failure pattern (AgentTurnEval, optimization set, seed {}, iteration 1)",
            seed.seed
        ),
        header,
        rows,
    })
}

/// One row per verbalized BCD iteration of every seed, then the seed's stop row.
fn bcd_table(x: &Experiment) -> Table {
    let joined = |items: Vec<String>, sep: &str| items.join(sep);
    let mut rows = Vec::new();
    for s in &x.seeds {
        for it in &s.bcd.iterations {
            rows.push(vec![
                s.seed.to_string(),
                it.iteration.to_string(),
                pct(it.opt_accuracy),
                format!("{}→{}", it.calls_before, it.calls_after),
                it.selected_roles.join(", "),
                joined(
                    it.selected_rounds
                        .iter()
                        .map(|t| (t + 1).to_string())
                        .collect(),
                    ", ",
                ),
                joined(
                    it.ema_alpha.iter().map(|a| format!("{a:.2}")).collect(),
                    " / ",
                ),
                joined(it.rewrites.iter().map(|r| r.target.clone()).collect(), ", "),
            ]);
        }
        let best = s.bcd.best_opt_accuracy.map(pct);
        rows.push(vec![
            s.seed.to_string(),
            "stop".into(),
            best.unwrap_or_else(|| "-".into()),
            s.bcd.calls.to_string(),
            String::new(),
            String::new(),
            String::new(),
            s.bcd.stop_reason.clone(),
        ]);
    }
    Table {
        title: "Verbalized BCD iterations".into(),
        header: columns(&[
            "seed",
            "iteration",
            "opt accuracy %",
            "calls",
            "Phase A roles",
            "Phase B rounds",
            "EMA α_t",
            "rewrites",
        ]),
        rows,
    }
}

/// Prompts before and after optimization (first seed).
fn prompt_tables(x: &Experiment) -> Vec<Table> {
    let Some(s) = x.seeds.first() else {
        return vec![];
    };
    let init = x.config.prompts();
    let mut rows = Vec::new();
    for (i, r) in x.config.roles.iter().enumerate() {
        rows.push(vec![
            format!("role {}", r.name),
            init.roles[i].clone(),
            s.bcd.best.roles.get(i).cloned().unwrap_or_default(),
        ]);
    }
    for t in 0..x.config.rounds {
        rows.push(vec![
            format!("aggregator round {}", t + 1),
            init.aggregators[t].clone(),
            s.bcd.best.aggregators.get(t).cloned().unwrap_or_default(),
        ]);
    }
    vec![Table {
        title: format!("Prompts before and after optimization (seed {})", s.seed),
        header: vec!["block".into(), "initial".into(), "optimized".into()],
        rows,
    }]
}

/// The header fields shared by the Markdown and HTML reports.
fn header(x: &Experiment) -> serde_json::Value {
    serde_json::json!({
        "name": x.name,
        "model": x.model,
        "dataset": x.dataset,
        "n_optimization": x.n_optimization,
        "n_test": x.n_test,
        "roles": x.config.roles.len(),
        "rounds": x.config.rounds,
        "seeds": format!("{:?}", x.options.seeds),
        "prompt_versions": x.prompt_versions,
        "critic_protocol": match x.config.optimizer.critic_rounds {
            crate::config::CriticRounds::All => "every round (section 4.3; critic_rounds = \"all\")",
            crate::config::CriticRounds::Final => {
                "final round only, the paper's evaluated protocol (5.1; critic_rounds = \"paper\")"
            }
        },
    })
}

fn all_tables(x: &Experiment) -> Vec<Table> {
    let mut t = tables(x);
    t.extend(prompt_tables(x));
    t
}

/// Markdown report (`templates/optimize_report.md.j2`).
pub fn markdown(x: &Experiment) -> String {
    let mut ctx = header(x);
    ctx["tables"] = serde_json::json!(all_tables(x));
    render("optimize_report.md.j2", ctx)
}

fn curves(x: &Experiment, by_calls: bool) -> Vec<Series> {
    let mut out = Vec::new();
    for s in &x.seeds {
        let pt = |p: &crate::experiment::CurvePoint| {
            p.test_accuracy.map(|a| {
                (
                    if by_calls {
                        p.calls as f64
                    } else {
                        p.step as f64
                    },
                    a,
                )
            })
        };
        out.push(Series {
            name: format!("ours (seed {})", s.seed),
            points: s.ours_curve.iter().filter_map(pt).collect(),
        });
        if !s.blackbox_curve.is_empty() {
            out.push(Series {
                name: format!("black-box (seed {})", s.seed),
                points: s.blackbox_curve.iter().filter_map(pt).collect(),
            });
        }
        let xmax = s
            .ours_curve
            .iter()
            .chain(&s.blackbox_curve)
            .map(|p| {
                if by_calls {
                    p.calls as f64
                } else {
                    p.step as f64
                }
            })
            .fold(0.0, f64::max);
        out.push(Series {
            name: format!("baseline (seed {})", s.seed),
            points: vec![
                (0.0, s.baseline_accuracy),
                (xmax.max(1.0), s.baseline_accuracy),
            ],
        });
    }
    out.retain(|s| !s.points.is_empty());
    out
}

/// Self-contained HTML report with plots (`templates/optimize_report.html.j2`).
pub fn html(x: &Experiment) -> String {
    let mut plots: Vec<Result<String, maslens_eval::plot::PlotError>> = Vec::new();
    if let Some(c) = x
        .seeds
        .first()
        .and_then(|s| s.bcd.iterations.first())
        .and_then(|i| i.credit.as_ref())
    {
        let mut rows = c.roles.clone();
        rows.push("C_time (temporal)".into());
        let mut vals: Vec<Vec<Option<f64>>> = c.cell.clone();
        vals.push(c.round_credit.clone());
        for (i, row) in vals.iter_mut().enumerate().take(c.roles.len()) {
            row.push(c.role_credit[i]);
        }
        if let Some(r) = vals.last_mut() {
            r.push(None);
        }
        let mut cols = c.rounds.clone();
        cols.push("C_role".into());
        plots.push(heatmap_svg(
            "Role x round credit (first seed, iteration 1)",
            &rows,
            &cols,
            &vals,
            (0.0, 1.0),
        ));
    }
    plots.push(line_chart_svg(
        "Held-out accuracy vs iterations",
        "iteration (black-box: candidate)",
        "accuracy",
        &curves(x, false),
    ));
    plots.push(line_chart_svg(
        "Held-out accuracy vs LLM calls (query complexity)",
        "optimizer LLM calls",
        "accuracy",
        &curves(x, true),
    ));
    let ours_f: Vec<FinalEval> = x.seeds.iter().flat_map(|s| s.ours_final.clone()).collect();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for e in &ours_f {
        *counts.entry(e.label.clone()).or_insert(0.0) += 1.0;
    }
    if !counts.is_empty() {
        let (labels, vals): (Vec<String>, Vec<f64>) = counts.into_iter().unzip();
        plots.push(bar_chart_svg(
            "Final-answer failure patterns (ours)",
            &labels,
            &vals,
            "count",
        ));
    }
    let scores: Vec<f64> = ours_f
        .iter()
        .filter_map(|e| e.score.map(f64::from))
        .collect();
    if !scores.is_empty() {
        plots.push(histogram_svg(
            "Final-answer critic scores (ours)",
            &scores,
            6,
            "score 0-5",
        ));
    }
    let plots: Vec<Figure> = plots.into_iter().map(Figure::from).collect();
    let mut ctx = header(x);
    ctx["title"] = "maslens optimize".into();
    ctx["plots"] = serde_json::json!(plots);
    ctx["tables"] = serde_json::json!(all_tables(x));
    render("optimize_report.html.j2", ctx)
}
