//! View models of the web UI: plain data built from the store's records, serialized into the
//! templates. Pure functions, unit-tested here; no HTML is built in Rust (the templates escape
//! every string), only the shapes the pages draw (lanes, heat buckets, highlighted segments).

use std::collections::BTreeMap;

use maslens_credit::trace_credit::{corpus_table, system_tables, TraceCredit};
use maslens_store::{Diagnosis, RunSummary};
use maslens_trace::Trace;
use serde::Serialize;
use serde_json::Value;

mod diagnosis;
pub use diagnosis::*;

/// Lanes drawn as their own column; agents past this share the last lane ("other agents").
pub const MAX_LANES: usize = 12;
/// Characters of a step shown in its folded summary line.
pub const SUMMARY_CHARS: usize = 140;
/// A step longer than this (characters or lines) starts folded.
pub const FOLD_CHARS: usize = 600;
const FOLD_LINES: usize = 8;

/// A value in `[0, 1]` as one of ten colour buckets (`.heat-0` .. `.heat-9`); NaN is 0.
pub fn bucket(v: f64) -> u8 {
    if v.is_nan() {
        return 0;
    }
    (v * 10.0).floor().clamp(0.0, 9.0) as u8
}

/// A piece of text, marked when it matched the search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seg {
    pub text: String,
    pub mark: bool,
}

/// The words of a search to mark ([`maslens_store::search::Query::marked_words`]: the words
/// and the words of quoted phrases, not the `OR` operators), lowercased (ASCII), each once; at
/// most 8, which bounds the highlighting work per step.
pub fn terms(q: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in maslens_store::search::Query::parse(q).marked_words() {
        let w = w.to_ascii_lowercase();
        if !out.contains(&w) {
            out.push(w);
        }
        if out.len() == 8 {
            break;
        }
    }
    out
}

/// Search words longer than this are searched but not marked (each marked word costs a pass over
/// every step shown).
pub const MAX_MARKED_CHARS: usize = 64;
/// Marks per step at most; the rest of a step is shown unmarked.
pub const MAX_MARKS: usize = 2_000;

/// `text` cut into segments where any of `terms` occurs (ASCII case-insensitive; byte offsets
/// stay on char boundaries because ASCII lowercasing keeps every byte's length). Linear in the
/// text per term (a substring search each, then one merge): a 16 MiB step with 8 long terms took
/// 28 s of a server worker when every position tried every term.
pub fn highlight(text: &str, terms: &[String]) -> Vec<Seg> {
    let terms: Vec<&str> = terms
        .iter()
        .map(String::as_str)
        .filter(|t| !t.is_empty() && t.len() <= MAX_MARKED_CHARS)
        .collect();
    if terms.is_empty() || text.is_empty() {
        return vec![Seg {
            text: text.to_string(),
            mark: false,
        }];
    }
    let lower = text.to_ascii_lowercase();
    // Every occurrence of every term, then the longest at each start, left to right.
    let mut hits: Vec<(usize, usize)> = terms
        .iter()
        .flat_map(|t| lower.match_indices(t).map(|(i, m)| (i, m.len())))
        .collect();
    hits.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out = Vec::new();
    let mut plain_from = 0;
    let mut marks = 0;
    for (i, n) in hits {
        if i < plain_from || !text.is_char_boundary(i) || !text.is_char_boundary(i + n) {
            continue;
        }
        if marks == MAX_MARKS {
            break;
        }
        if plain_from < i {
            out.push(Seg {
                text: text[plain_from..i].to_string(),
                mark: false,
            });
        }
        out.push(Seg {
            text: text[i..i + n].to_string(),
            mark: true,
        });
        marks += 1;
        plain_from = i + n;
    }
    if plain_from < text.len() {
        out.push(Seg {
            text: text[plain_from..].to_string(),
            mark: false,
        });
    }
    out
}

/// The first line of `text`, cut to [`SUMMARY_CHARS`] characters.
pub fn summary_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut s: String = line.chars().take(SUMMARY_CHARS).collect();
    if line.chars().count() > SUMMARY_CHARS || text.trim().lines().count() > 1 {
        s.push('…');
    }
    s
}

/// A lane: one agent's column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lane {
    pub name: String,
    pub index: usize,
    pub steps: usize,
}

/// An implicit failure marked on its step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventMark {
    pub step: Option<i64>,
    pub agent: String,
    pub error_type: String,
    /// The cost weight w_type x w_abs.
    pub weight: Option<f64>,
    pub severity: String,
    pub description: String,
    pub evidence: String,
    /// Absorption label (`absorbed`, `propagated`, ...) and why.
    pub absorption: Option<String>,
    pub absorption_rationale: String,
    /// The step that absorbed it, when the method said so.
    pub absorbed_by: Option<i64>,
    /// Later steps the absorption rationale cites ("step 7"): the paper's absorption prompt
    /// returns a label and a rationale, not a step, so these are links, not a verdict.
    pub cited_steps: Vec<i64>,
}

/// Step numbers after `after` that `text` cites as `step N` / `steps N` / `#N` (at most 5).
pub fn cited_steps(text: &str, after: Option<i64>) -> Vec<i64> {
    let lower = text.to_ascii_lowercase();
    let mut out: Vec<i64> = Vec::new();
    for (i, _) in lower.match_indices("step") {
        let rest = lower[i + 4..]
            .trim_start_matches('s')
            .trim_start_matches([' ', '#']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse::<i64>() {
            if after.is_none_or(|a| n > a) && !out.contains(&n) {
                out.push(n);
            }
        }
        if out.len() == 5 {
            break;
        }
    }
    out
}

/// One step card.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView {
    pub index: usize,
    pub position: usize,
    pub agent: String,
    pub lane: usize,
    pub summary: String,
    pub body: Vec<Seg>,
    pub tool_calls: Vec<(String, String)>,
    /// Starts unfolded (short, decisive, or matched).
    pub open: bool,
    pub decisive: bool,
    pub matched: bool,
    pub events: Vec<EventMark>,
    /// The prior's probability of this step and its bucket relative to the most likely step.
    pub prior: Option<f64>,
    pub prior_bucket: u8,
    pub round: Option<u32>,
    pub phase: Option<String>,
    pub span_id: Option<String>,
    pub otel_trace_id: Option<String>,
}

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(String::from)
}
fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}
fn i(v: &Value, k: &str) -> Option<i64> {
    v.get(k).and_then(Value::as_i64)
}

/// The prior's probability per step position (from the latest prior diagnosis).
fn prior_probs(diagnoses: &[Diagnosis]) -> Option<Vec<f64>> {
    let d = diagnoses.iter().rev().find(|d| d.body.method == "prior")?;
    let r = &d.body.result;
    // The one verdict keeps them in its payload; rows stored before it, at the top.
    let probs = r
        .get("payload")
        .and_then(|p| p.get("probs"))
        .or_else(|| r.get("probs"))?
        .as_array()?;
    Some(probs.iter().map(|p| p.as_f64().unwrap_or(0.0)).collect())
}

/// One cell of the prior strip.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StripCell {
    pub index: usize,
    pub agent: String,
    pub p: f64,
    pub bucket: u8,
}

/// Everything the trace page draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceView {
    pub lanes: Vec<Lane>,
    /// Lane columns drawn (`.lanes-N`).
    pub lane_columns: usize,
    pub steps: Vec<StepView>,
    pub strip: Vec<StripCell>,
    /// The diagnosis whose location is highlighted (the chosen one, else the latest locate, else
    /// the latest prior).
    pub focus: Option<DiagnosisView>,
    /// The latest scan.
    pub scan: Option<DiagnosisView>,
    pub diagnoses: Vec<DiagnosisView>,
    pub otel_trace_ids: Vec<String>,
    pub rounds: Vec<u32>,
}

/// Build the trace page's view: lanes in order of first appearance, one card per step, the
/// focused diagnosis' step highlighted, the latest scan's events on their steps, the prior strip.
pub fn trace_view(
    trace: &Trace,
    summary: &RunSummary,
    diagnoses: &[Diagnosis],
    chosen: Option<&str>,
    q: &str,
) -> TraceView {
    let current = summary.trace_hash.as_deref();
    let views: Vec<DiagnosisView> = diagnoses
        .iter()
        .map(|d| diagnosis_view(d, current))
        .collect();
    let focus = chosen
        .and_then(|id| views.iter().find(|d| d.id == id))
        .or_else(|| views.iter().rev().find(|d| d.method == "locate"))
        .or_else(|| views.iter().rev().find(|d| d.method == "prior"))
        .cloned();
    let scan = views.iter().rev().find(|d| d.method == "scan").cloned();
    let (lanes, lane_of) = lanes_of(trace);
    let lane_columns = lanes.len().clamp(1, MAX_LANES);
    let probs = prior_probs(diagnoses).filter(|p| p.len() == trace.steps.len());
    let max_p = probs
        .as_ref()
        .map(|p| p.iter().copied().fold(0.0_f64, f64::max))
        .unwrap_or(0.0);
    let cx = StepContext {
        lane_of: &lane_of,
        focus: focus.as_ref(),
        scan: scan.as_ref(),
        probs: probs.as_deref(),
        max_p,
        terms: terms(q),
    };
    let steps = trace
        .steps
        .iter()
        .enumerate()
        .map(|(pos, st)| step_view(&cx, pos, st))
        .collect::<Vec<_>>();
    let strip = steps
        .iter()
        .filter_map(|s| {
            s.prior.map(|p| StripCell {
                index: s.index,
                agent: s.agent.clone(),
                p,
                bucket: s.prior_bucket,
            })
        })
        .collect();
    let (otel_trace_ids, rounds) = otel_ids_and_rounds(trace);
    TraceView {
        lanes,
        lane_columns,
        steps,
        strip,
        focus,
        scan,
        diagnoses: views,
        otel_trace_ids,
        rounds,
    }
}

/// The lanes in order of first appearance (past [`MAX_LANES`], the last lane is shared), and
/// each agent's lane.
fn lanes_of(trace: &Trace) -> (Vec<Lane>, BTreeMap<&str, usize>) {
    let mut lanes: Vec<Lane> = Vec::new();
    let mut lane_of: BTreeMap<&str, usize> = BTreeMap::new();
    for st in &trace.steps {
        let n = lanes.len();
        let idx = *lane_of.entry(st.agent.as_str()).or_insert_with(|| {
            lanes.push(Lane {
                name: st.agent.clone(),
                index: n.min(MAX_LANES - 1),
                steps: 0,
            });
            n
        });
        lanes[idx].steps += 1;
    }
    (lanes, lane_of)
}

/// The OpenTelemetry trace ids and the rounds the steps carry, each once, in step order.
fn otel_ids_and_rounds(trace: &Trace) -> (Vec<String>, Vec<u32>) {
    let mut otel: Vec<String> = Vec::new();
    let mut rounds: Vec<u32> = Vec::new();
    for st in &trace.steps {
        if let Some(sp) = &st.span {
            if !otel.contains(&sp.trace_id) {
                otel.push(sp.trace_id.clone());
            }
        }
        if let Some(r) = st.round {
            if !rounds.contains(&r) {
                rounds.push(r);
            }
        }
    }
    (otel, rounds)
}

/// What every step card is drawn against.
struct StepContext<'a> {
    lane_of: &'a BTreeMap<&'a str, usize>,
    focus: Option<&'a DiagnosisView>,
    scan: Option<&'a DiagnosisView>,
    /// The prior's probability per step position, with its largest value.
    probs: Option<&'a [f64]>,
    max_p: f64,
    /// Search terms to mark.
    terms: Vec<String>,
}

/// One step's card: its lane, its text with the search marked, whether it is decisive, the
/// scan's events on it, its prior probability.
fn step_view(cx: &StepContext, pos: usize, st: &maslens_trace::Step) -> StepView {
    let lane = cx
        .lane_of
        .get(st.agent.as_str())
        .copied()
        .unwrap_or(0)
        .min(MAX_LANES - 1);
    let decisive = cx
        .focus
        .is_some_and(|d| d.step == i64::try_from(st.index).ok());
    let events: Vec<EventMark> = cx
        .scan
        .map(|s| {
            s.events
                .iter()
                .filter(|e| e.step == i64::try_from(st.index).ok())
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let body = highlight(&st.content, &cx.terms);
    let matched = body.iter().any(|s| s.mark);
    let long = st.content.chars().count() > FOLD_CHARS || st.content.lines().count() > FOLD_LINES;
    let prior = cx.probs.and_then(|p| p.get(pos).copied());
    StepView {
        index: st.index,
        position: pos,
        agent: st.agent.clone(),
        lane,
        summary: summary_line(&st.content),
        body,
        tool_calls: st
            .tool_calls
            .iter()
            .map(|t| (t.name.clone(), t.arguments.clone()))
            .collect(),
        open: !long || decisive || matched || !events.is_empty(),
        decisive,
        matched,
        events,
        prior,
        prior_bucket: match prior {
            Some(p) if cx.max_p > 0.0 => bucket(p / cx.max_p),
            _ => 0,
        },
        round: st.round,
        phase: st.phase.clone(),
        span_id: st.span.as_ref().map(|s| s.span_id.clone()),
        otel_trace_id: st.span.as_ref().map(|s| s.trace_id.clone()),
    }
}

/// One row of the compare page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    pub field: &'static str,
    pub a: String,
    pub b: String,
    pub differs: bool,
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|x| x.to_string())
        .unwrap_or_else(|| "—".into())
}
fn opt3(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "—".into())
}

/// A diagnosis' implicit failures for the compare page: counted (and flagged) for a scan; a
/// localization did not look for them, which is not "0 found".
fn implicit_failures(d: &DiagnosisView) -> String {
    match (d.method.as_str(), d.flagged.len()) {
        ("scan", 0) => d.events.len().to_string(),
        ("scan", f) => format!("{} ({f} flagged, not counted)", d.events.len()),
        _ => "not scanned".into(),
    }
}

/// Two diagnoses of one trace, field by field.
pub fn compare_rows(a: &DiagnosisView, b: &DiagnosisView) -> Vec<CompareRow> {
    let rows = [
        ("method", a.method.clone(), b.method.clone()),
        ("model", opt(&a.model), opt(&b.model)),
        ("agent", opt(&a.agent), opt(&b.agent)),
        ("step", opt(&a.step), opt(&b.step)),
        ("confidence", opt3(a.confidence), opt3(b.confidence)),
        ("risk", opt3(a.risk), opt3(b.risk)),
        ("source", opt(&a.source), opt(&b.source)),
        ("agreement", opt3(a.agreement), opt3(b.agreement)),
        ("abstained", opt(&a.abstain_reason), opt(&b.abstain_reason)),
        (
            "implicit failures",
            implicit_failures(a),
            implicit_failures(b),
        ),
        ("calls", opt(&a.calls), opt(&b.calls)),
        ("tokens", opt(&a.tokens), opt(&b.tokens)),
        ("elapsed ms", opt(&a.elapsed_ms), opt(&b.elapsed_ms)),
        (
            "trace version",
            opt(&a
                .trace_hash
                .as_ref()
                .map(|h| h[..h.len().min(12)].to_string())),
            opt(&b
                .trace_hash
                .as_ref()
                .map(|h| h[..h.len().min(12)].to_string())),
        ),
    ];
    rows.into_iter()
        .map(|(field, a, b)| CompareRow {
            field,
            differs: a != b,
            a,
            b,
        })
        .collect()
}

/// A heat-map cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeatCell {
    pub v: Option<f64>,
    pub bucket: u8,
    pub n: Option<u64>,
}

/// A role x round credit table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Heatmap {
    pub rounds: Vec<String>,
    /// `(role, cells per round, structural credit)`.
    pub rows: Vec<(String, Vec<HeatCell>, HeatCell)>,
    /// Temporal credit per round.
    pub round_credit: Vec<HeatCell>,
    /// The role(s) with the lowest structural credit, and the round(s) with the lowest temporal
    /// credit (several when tied).
    pub weakest: Option<Lowest>,
    pub weakest_round: Option<Lowest>,
}

/// The labels that share the smallest value (more than one: a tie, which the page says).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lowest {
    pub names: Vec<String>,
    pub value: f64,
}

/// Credits closer than this are shown as equal (the page prints two decimals).
const TIE: f64 = 1e-9;

/// The labels with the smallest value, skipping missing values.
fn lowest<'a>(items: impl Iterator<Item = (&'a String, Option<f64>)>) -> Option<Lowest> {
    let known: Vec<(&String, f64)> = items
        .filter_map(|(k, v)| v.filter(|x| x.is_finite()).map(|x| (k, x)))
        .collect();
    let value = known.iter().map(|(_, x)| *x).reduce(f64::min)?;
    let names = known
        .iter()
        .filter(|(_, x)| (x - value).abs() <= TIE)
        .map(|(k, _)| (*k).clone())
        .collect();
    Some(Lowest { names, value })
}

/// A stored credit run's per-trace credit (`traces`); entries of another shape are left out.
pub fn trace_credits(body: &Value) -> Vec<TraceCredit> {
    body.get("traces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| serde_json::from_value(t.clone()).ok())
        .collect()
}

/// The credit of one trace as a heat map.
pub fn trace_heatmap(credit: &TraceCredit) -> Option<Heatmap> {
    let table = corpus_table(std::slice::from_ref(credit));
    heatmap(&serde_json::to_value(table).ok()?)
}

/// One multi-agent system of a credit run that scored several: its own table.
#[derive(Debug, Clone, Serialize)]
pub struct SystemHeat {
    pub traces: usize,
    pub heat: Heatmap,
}

/// One table per system when the run's traces come from more than one (traces sharing no agent
/// name); empty when they are one system, whose table is the run's own.
pub fn system_heatmaps(credits: &[TraceCredit]) -> Vec<SystemHeat> {
    system_tables(credits)
        .iter()
        .filter_map(|s| {
            Some(SystemHeat {
                traces: s.traces.len(),
                heat: heatmap(&serde_json::to_value(&s.table).ok()?)?,
            })
        })
        .collect()
}

fn cell(v: Option<f64>, n: Option<u64>) -> HeatCell {
    HeatCell {
        v,
        bucket: bucket(v.unwrap_or(0.0)),
        n,
    }
}

/// A `maslens_credit::CreditTable` (as JSON) as a heat map; none when the shape is not one.
pub fn heatmap(table: &Value) -> Option<Heatmap> {
    let roles: Vec<String> = serde_json::from_value(table.get("roles")?.clone()).ok()?;
    let rounds: Vec<String> = serde_json::from_value(table.get("rounds")?.clone()).ok()?;
    let cells: Vec<Vec<Option<f64>>> = serde_json::from_value(table.get("cell")?.clone()).ok()?;
    let ns: Vec<Vec<u64>> = table
        .get("cell_n")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let role_credit: Vec<Option<f64>> = table
        .get("role_credit")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let round_credit: Vec<Option<f64>> = table
        .get("round_credit")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let rows = roles
        .iter()
        .enumerate()
        .map(|(r, role)| {
            let row = (0..rounds.len())
                .map(|t| {
                    cell(
                        cells.get(r).and_then(|c| c.get(t)).copied().flatten(),
                        ns.get(r).and_then(|c| c.get(t)).copied(),
                    )
                })
                .collect();
            (
                role.clone(),
                row,
                cell(role_credit.get(r).copied().flatten(), None),
            )
        })
        .collect();
    let weakest = lowest(
        roles
            .iter()
            .zip(role_credit.iter().copied().chain(std::iter::repeat(None))),
    );
    let weakest_round = lowest(
        rounds
            .iter()
            .zip(round_credit.iter().copied().chain(std::iter::repeat(None))),
    );
    Some(Heatmap {
        weakest,
        weakest_round,
        round_credit: (0..rounds.len())
            .map(|t| cell(round_credit.get(t).copied().flatten(), None))
            .collect(),
        rounds,
        rows,
    })
}

/// One iteration of the credit-guided optimizer, as the history table shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationView {
    pub seed: u64,
    pub iteration: u64,
    pub opt_accuracy: Option<f64>,
    pub calls_after: Option<u64>,
    pub selected_roles: Vec<String>,
    pub selected_rounds: Vec<u64>,
    /// `(target, diagnosis, before, after)`.
    pub rewrites: Vec<(String, String, String, String)>,
    pub credit: Option<Heatmap>,
}

/// The optimizer history of a stored `maslens optimize` experiment (JSON).
pub fn optimizer_history(experiment: &Value) -> Vec<IterationView> {
    let mut out = Vec::new();
    for seed in experiment
        .get("seeds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let seed_n = seed.get("seed").and_then(Value::as_u64).unwrap_or(0);
        let iters = seed
            .get("bcd")
            .and_then(|b| b.get("iterations"))
            .and_then(Value::as_array);
        for it in iters.into_iter().flatten() {
            out.push(IterationView {
                seed: seed_n,
                iteration: it.get("iteration").and_then(Value::as_u64).unwrap_or(0),
                opt_accuracy: f(it, "opt_accuracy"),
                calls_after: it.get("calls_after").and_then(Value::as_u64),
                selected_roles: it
                    .get("selected_roles")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default(),
                selected_rounds: it
                    .get("selected_rounds")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default(),
                rewrites: it
                    .get("rewrites")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        (
                            s(r, "target").unwrap_or_default(),
                            s(r, "diagnosis").unwrap_or_default(),
                            s(r, "before").unwrap_or_default(),
                            s(r, "after").unwrap_or_default(),
                        )
                    })
                    .collect(),
                credit: it.get("credit").and_then(heatmap),
            });
        }
    }
    out
}

/// Unix nanoseconds as `YYYY-MM-DD HH:MM:SS` UTC (times before 1970 show as 1970-01-01).
pub fn format_ns(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0).unsigned_abs());
    // `2026-12-01T01:02:03Z` -> `2026-12-01 01:02:03`.
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_string()
}

/// `YYYY-MM-DD` (a date filter of the list; `2026-1-5` too) as Unix nanoseconds at 00:00 UTC.
pub fn parse_date(s: &str) -> Option<i64> {
    let mut it = s.trim().splitn(3, '-');
    let y: u32 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if !(1970..=9999).contains(&y) {
        return None;
    }
    // humantime checks the month and the day of the month.
    let t = humantime::parse_rfc3339_weak(&format!("{y:04}-{m:02}-{d:02} 00:00:00")).ok()?;
    let ns = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    i64::try_from(ns).ok()
}

#[cfg(test)]
mod tests;
