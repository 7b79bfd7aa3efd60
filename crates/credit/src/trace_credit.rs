//! Credit for any trace (`maslens credit DIR`): a role x segment table for imported traces.
//!
//! Segments are the trace's rounds when its steps carry `round`; otherwise contiguous runs of the
//! same `phase`; otherwise fixed-size windows of steps. Two modes:
//! - **debate MCQ** (traces written by the debate runtime: `source.format = "debate"`, a gold
//!   letter and the option lines in the task): exactly the optimizer's critics: AgentTurnEval
//!   on each utterance (q), the peer-view judge per round (p), and the aggregator critic on the
//!   aggregation step (temporal credit);
//! - **generic** (any other system): per (agent, segment) a generic AgentTurnEval-style critic
//!   over the agent's messages in that segment (q), and per segment a window judge scoring each
//!   acting agent (p) and the segment as a whole (temporal credit).
//!
//! c = lambda*q + (1-lambda)*p as in the optimizer; with lambda = 1 the judge is skipped (no
//! temporal credit in generic mode), with lambda = 0 the per-agent critic is skipped.

use crate::answer::extract_choice;
use crate::config::{Decoding, AGGREGATOR_AGENT};
use crate::credit::CreditTable;
use crate::critic::{peer_view, turn_eval, Subject, FAILURE_LABELS};
use crate::data::Mcq;
use crate::debate::Utterance;
use crate::CreditError;
use maslens_llm::prompt::{untrusted, Template};
use maslens_llm::typed::{complete_as, lenient};
use maslens_llm::{prompt_template, ChatModel, ChatRequest, Message};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

pub const GENERIC_TURN_EVAL: Template = prompt_template!("credit/generic_turn_eval.v1");
pub const GENERIC_TURN_EVAL_INPUT: Template = prompt_template!("credit/generic_turn_eval_input.v2");
pub const GENERIC_WINDOW_JUDGE: Template = prompt_template!("credit/generic_window_judge.v1");
pub const GENERIC_WINDOW_JUDGE_INPUT: Template =
    prompt_template!("credit/generic_window_judge_input.v2");

/// How steps are grouped into segments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Segmenting {
    /// Rounds if any step has one, else phases if any step has one, else windows.
    #[default]
    Auto,
    Rounds,
    Phases,
    Windows,
}

/// Options of trace credit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceCreditOptions {
    pub lambda: f64,
    pub segmenting: Segmenting,
    /// Steps per window (window segmenting).
    pub window: usize,
    pub decoding: Decoding,
    pub repair: bool,
    /// Characters of each step's content shown to the critics.
    pub max_step_chars: usize,
}

impl Default for TraceCreditOptions {
    fn default() -> Self {
        TraceCreditOptions {
            lambda: 0.5,
            segmenting: Segmenting::Auto,
            window: 5,
            decoding: Decoding {
                temperature: 0.0,
                max_tokens: 128,
                top_p: None,
            },
            repair: true,
            max_step_chars: 1500,
        }
    }
}

/// One segment: its key and its step positions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub key: String,
    pub steps: Vec<usize>,
}

/// Split a trace into segments; returns the segmenting actually used.
pub fn segments(trace: &Trace, seg: Segmenting, window: usize) -> (Segmenting, Vec<Segment>) {
    let has_round = trace.steps.iter().any(|s| s.round.is_some());
    let has_phase = trace.steps.iter().any(|s| s.phase.is_some());
    let used = match seg {
        Segmenting::Auto if has_round => Segmenting::Rounds,
        Segmenting::Auto if has_phase => Segmenting::Phases,
        Segmenting::Auto => Segmenting::Windows,
        Segmenting::Rounds if !has_round => Segmenting::Windows,
        Segmenting::Phases if !has_phase => Segmenting::Windows,
        s => s,
    };
    let mut out: Vec<Segment> = Vec::new();
    match used {
        Segmenting::Rounds => {
            let mut by: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
            for (i, s) in trace.steps.iter().enumerate() {
                if let Some(r) = s.round {
                    by.entry(r).or_default().push(i);
                }
            }
            out = by
                .into_iter()
                .map(|(r, steps)| Segment {
                    key: format!("round {}", r + 1),
                    steps,
                })
                .collect();
        }
        Segmenting::Phases => {
            for (i, s) in trace.steps.iter().enumerate() {
                let p = s.phase.clone().unwrap_or_else(|| "(none)".into());
                match out.last_mut() {
                    Some(last) if last.key == p => last.steps.push(i),
                    _ => out.push(Segment {
                        key: p,
                        steps: vec![i],
                    }),
                }
            }
            // Repeated phases get an occurrence suffix so keys stay unique within a trace.
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for s in &mut out {
                let n = seen.entry(s.key.clone()).or_insert(0);
                *n += 1;
                if *n > 1 {
                    s.key = format!("{} #{}", s.key, n);
                }
            }
        }
        _ => {
            let w = window.max(1);
            for (k, chunk) in (0..trace.steps.len())
                .collect::<Vec<_>>()
                .chunks(w)
                .enumerate()
            {
                out.push(Segment {
                    key: format!("window {}", k + 1),
                    steps: chunk.to_vec(),
                });
            }
        }
    }
    (used, out)
}

/// Credit of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceCredit {
    pub trace_id: String,
    /// `debate-mcq` or `generic`.
    pub mode: String,
    pub segmenting: Segmenting,
    pub agents: Vec<String>,
    pub segments: Vec<String>,
    /// `q[a][s]`, `p[a][s]`, `c[a][s]` in [0, 1].
    pub q: Vec<Vec<Option<f64>>>,
    pub p: Vec<Vec<Option<f64>>>,
    pub c: Vec<Vec<Option<f64>>>,
    /// Failure labels `labels[a][s]`.
    pub labels: Vec<Vec<Option<String>>>,
    /// Temporal credit per segment (aggregator critic or window judge).
    pub segment_score: Vec<Option<f64>>,
    /// Critic calls that abstained.
    pub abstentions: usize,
    pub calls: u32,
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut t: String = s.chars().take(n).collect();
    t.push_str(" [... truncated]");
    t
}

/// The MCQ behind a debate trace, when it is one.
pub fn debate_question(trace: &Trace) -> Option<Mcq> {
    if trace.source.format != "debate" {
        return None;
    }
    let gold = trace
        .ground_truth
        .as_deref()?
        .trim()
        .chars()
        .next()?
        .to_ascii_uppercase();
    let (question, block) = trace.task.rsplit_once("\n\n")?;
    let mut options = Vec::new();
    for (i, line) in block.lines().enumerate() {
        let letter = (b'A' + i as u8) as char;
        let rest = line.strip_prefix(&format!("{letter}) "))?;
        options.push(rest.to_string());
    }
    ((gold as u8 - b'A') < options.len() as u8 && options.len() >= 2).then(|| Mcq {
        id: trace.id.clone(),
        question: question.to_string(),
        options,
        answer: gold,
        subject: None,
    })
}

/// Score one trace.
pub async fn trace_credit(
    model: &dyn ChatModel,
    trace: &Trace,
    opts: &TraceCreditOptions,
) -> Result<TraceCredit, CreditError> {
    let (used, segs) = segments(trace, opts.segmenting, opts.window);
    let mcq = if used == Segmenting::Rounds {
        debate_question(trace)
    } else {
        None
    };
    let mut agents = trace.acting_agents();
    if mcq.is_some() {
        agents.retain(|a| a != AGGREGATOR_AGENT && a != "decision");
    }
    let (na, ns) = (agents.len(), segs.len());
    let mut r = TraceCredit {
        trace_id: trace.id.clone(),
        mode: if mcq.is_some() {
            "debate-mcq"
        } else {
            "generic"
        }
        .into(),
        segmenting: used,
        agents: agents.clone(),
        segments: segs.iter().map(|s| s.key.clone()).collect(),
        q: vec![vec![None; ns]; na],
        p: vec![vec![None; ns]; na],
        c: vec![vec![None; ns]; na],
        labels: vec![vec![None; ns]; na],
        segment_score: vec![None; ns],
        abstentions: 0,
        calls: 0,
    };
    let dec = &opts.decoding;
    for (si, seg) in segs.iter().enumerate() {
        if let Some(q) = &mcq {
            let utts: Vec<Utterance> = seg
                .steps
                .iter()
                .map(|&i| &trace.steps[i])
                .filter(|s| agents.contains(&s.agent))
                .map(|s| {
                    let answer = extract_choice(&s.content, q.options.len());
                    Utterance {
                        role: s.agent.clone(),
                        round: si,
                        text: s.content.clone(),
                        correct: answer == Some(q.answer),
                        answer,
                    }
                })
                .collect();
            if opts.lambda > 0.0 {
                for u in &utts {
                    let e = turn_eval(
                        model,
                        Subject::Agent,
                        q,
                        &u.text,
                        u.correct,
                        dec,
                        opts.repair,
                        &format!("credit/turn/{}", u.role),
                    )
                    .await?;
                    r.calls += e.calls;
                    r.abstentions += usize::from(e.abstained);
                    if let Some(ai) = agents.iter().position(|a| a == &u.role) {
                        r.q[ai][si] = Some(e.q());
                        r.labels[ai][si] = e.label.clone();
                    }
                }
            }
            if opts.lambda < 1.0 && !utts.is_empty() {
                let pv = peer_view(model, q, si, &utts, dec, "credit/peer").await?;
                r.calls += pv.calls;
                r.abstentions += usize::from(pv.abstain_reason.is_some());
                for (u, s) in utts.iter().zip(&pv.scores) {
                    if let Some(ai) = agents.iter().position(|a| a == &u.role) {
                        r.p[ai][si] = *s;
                    }
                }
            }
            if let Some(agg) = seg
                .steps
                .iter()
                .map(|&i| &trace.steps[i])
                .find(|s| s.agent == AGGREGATOR_AGENT)
            {
                let correct = extract_choice(&agg.content, q.options.len()) == Some(q.answer);
                let e = turn_eval(
                    model,
                    Subject::Aggregator,
                    q,
                    &agg.content,
                    correct,
                    dec,
                    opts.repair,
                    "credit/agg",
                )
                .await?;
                r.calls += e.calls;
                r.abstentions += usize::from(e.abstained);
                r.segment_score[si] = Some(e.q());
            }
        } else {
            generic_segment(model, trace, seg, &agents, opts, si, &mut r).await?;
        }
        for ai in 0..na {
            r.c[ai][si] = crate::credit::fuse(r.q[ai][si], r.p[ai][si], opts.lambda);
        }
    }
    Ok(r)
}

async fn generic_segment(
    model: &dyn ChatModel,
    trace: &Trace,
    seg: &Segment,
    agents: &[String],
    opts: &TraceCreditOptions,
    si: usize,
    r: &mut TraceCredit,
) -> Result<(), CreditError> {
    let dec = &opts.decoding;
    let task = untrusted("task", &truncate(&trace.task, 4000));
    let gt = trace
        .ground_truth
        .clone()
        .map(|g| untrusted("reference_answer", &g))
        .unwrap_or_else(|| "(unknown)".into());
    let outcome = trace.outcome.as_str();
    let seg_name = format!(
        "{} (steps {}-{})",
        seg.key,
        seg.steps.first().unwrap_or(&0),
        seg.steps.last().unwrap_or(&0)
    );
    let acting: Vec<String> = agents
        .iter()
        .filter(|a| seg.steps.iter().any(|&i| &trace.steps[i].agent == *a))
        .cloned()
        .collect();
    if acting.is_empty() {
        return Ok(());
    }
    if opts.lambda > 0.0 {
        let schema = json!({
            "type": "object", "required": ["failure_pattern", "explanation", "score"],
            "properties": {
                "failure_pattern": {"type": "string", "enum": FAILURE_LABELS},
                "explanation": {"type": "string"},
                "score": {"type": "integer", "minimum": 0, "maximum": 5}
            },
            "additionalProperties": false
        });
        for a in &acting {
            // The agent's steps in the segment, in the shared step format (maslens-render).
            let (msgs, _) = maslens_render::render(
                seg.steps
                    .iter()
                    .map(|&i| &trace.steps[i])
                    .filter(|s| &s.agent == a),
                Some(opts.max_step_chars),
            );
            let user = GENERIC_TURN_EVAL_INPUT.render(json!({
                "task": task, "ground_truth": gt, "outcome": outcome, "agent": a, "segment": seg_name,
                "messages": untrusted("agent_messages", &msgs),
            }))?;
            let mut req = ChatRequest::new(vec![
                Message::system(GENERIC_TURN_EVAL.render(json!({}))?),
                Message::user(user),
            ])
            .max_tokens(dec.max_tokens)
            .temperature(dec.temperature)
            .stage(format!("credit/generic_turn/{a}"))
            .template(GENERIC_TURN_EVAL_INPUT.name);
            req.top_p = dec.top_p;
            let out = complete_as::<GenericTurnAnswer>(model, req, &schema).await?;
            r.calls += out.calls;
            let parsed = out.value.and_then(|v| {
                let score = v.score?;
                let label = v.failure_pattern?;
                // Consistency: low scores are failures; high scores are NONE or weak justification.
                let ok = if score >= 3 {
                    label == "NONE" || label == "INSUFFICIENT_JUSTIFICATION"
                } else {
                    label != "NONE"
                };
                ok.then_some((score, label))
            });
            let ai = agents.iter().position(|x| x == a).unwrap_or(0);
            match parsed {
                Some((score, label)) => {
                    r.q[ai][si] = Some(score as f64 / 5.0);
                    r.labels[ai][si] = Some(label);
                }
                None => r.abstentions += 1,
            }
        }
    }
    if opts.lambda < 1.0 {
        let props: serde_json::Map<String, serde_json::Value> = acting
            .iter()
            .map(|a| {
                (
                    a.clone(),
                    json!({"type": "integer", "minimum": 0, "maximum": 5}),
                )
            })
            .collect();
        let schema = json!({
            "type": "object", "required": ["scores", "segment_score"],
            "properties": {
                "scores": {"type": "object", "required": acting, "properties": props, "additionalProperties": false},
                "segment_score": {"type": "integer", "minimum": 0, "maximum": 5}
            },
            "additionalProperties": false
        });
        // Every step of the segment, in the shared step format (maslens-render).
        let (msgs, _) = maslens_render::render(
            seg.steps.iter().map(|&i| &trace.steps[i]),
            Some(opts.max_step_chars),
        );
        let user = GENERIC_WINDOW_JUDGE_INPUT.render(json!({
            "task": task, "ground_truth": gt, "outcome": outcome, "segment": seg_name,
            "messages": untrusted("messages", &msgs), "agents": acting.join(", "),
        }))?;
        let mut req = ChatRequest::new(vec![
            Message::system(GENERIC_WINDOW_JUDGE.render(json!({}))?),
            Message::user(user),
        ])
        .max_tokens(dec.max_tokens)
        .temperature(dec.temperature)
        .stage("credit/generic_window")
        .template(GENERIC_WINDOW_JUDGE_INPUT.name);
        req.top_p = dec.top_p;
        let out = complete_as::<GenericWindowAnswer>(model, req, &schema).await?;
        r.calls += out.calls;
        match out.value {
            Some(v) => {
                for a in &acting {
                    let ai = agents.iter().position(|x| x == a).unwrap_or(0);
                    r.p[ai][si] = v.scores.get(a).copied().flatten().map(|s| s as f64 / 5.0);
                }
                r.segment_score[si] = v.segment_score.map(|s| s as f64 / 5.0);
            }
            None => r.abstentions += 1,
        }
    }
    Ok(())
}

/// The generic per-agent turn evaluation answer (additionalProperties false).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenericTurnAnswer {
    #[serde(default, deserialize_with = "lenient::string")]
    failure_pattern: Option<String>,
    #[serde(default, rename = "explanation")]
    _explanation: serde::de::IgnoredAny,
    #[serde(default, deserialize_with = "lenient::uint")]
    score: Option<u64>,
}

/// The generic window judge answer: a score per acting agent and one for the segment.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenericWindowAnswer {
    #[serde(default, deserialize_with = "lenient::uint_map")]
    scores: BTreeMap<String, Option<u64>>,
    #[serde(default, deserialize_with = "lenient::uint")]
    segment_score: Option<u64>,
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Merge per-trace credit into one agent x segment table (agents and segment keys by name, in
/// order of first appearance; cells are means over traces; C_role is, per trace, the mean over
/// its segments, then the mean over traces; the last row is the mean segment score).
pub fn corpus_table(results: &[TraceCredit]) -> CreditTable {
    let mut agents: Vec<String> = Vec::new();
    let mut segs: Vec<String> = Vec::new();
    for r in results {
        for a in &r.agents {
            if !agents.contains(a) {
                agents.push(a.clone());
            }
        }
        for s in &r.segments {
            if !segs.contains(s) {
                segs.push(s.clone());
            }
        }
    }
    let mut cells: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); segs.len()]; agents.len()];
    let mut role: Vec<Vec<f64>> = vec![Vec::new(); agents.len()];
    let mut seg_scores: Vec<Vec<f64>> = vec![Vec::new(); segs.len()];
    for r in results {
        for (ai, a) in r.agents.iter().enumerate() {
            let Some(ga) = agents.iter().position(|x| x == a) else {
                continue;
            };
            let mut own = Vec::new();
            for (si, s) in r.segments.iter().enumerate() {
                let v = r.c.get(ai).and_then(|row| row.get(si)).copied().flatten();
                if let (Some(gs), Some(v)) = (segs.iter().position(|x| x == s), v) {
                    cells[ga][gs].push(v);
                    own.push(v);
                }
            }
            if let Some(m) = mean(&own) {
                role[ga].push(m);
            }
        }
        for (si, s) in r.segments.iter().enumerate() {
            let v = r.segment_score.get(si).copied().flatten();
            if let (Some(gs), Some(v)) = (segs.iter().position(|x| x == s), v) {
                seg_scores[gs].push(v);
            }
        }
    }
    CreditTable {
        roles: agents,
        rounds: segs,
        cell: cells
            .iter()
            .map(|row| row.iter().map(|v| mean(v)).collect())
            .collect(),
        cell_n: cells
            .iter()
            .map(|row| row.iter().map(Vec::len).collect())
            .collect(),
        role_credit: role.iter().map(|v| mean(v)).collect(),
        round_credit: seg_scores.iter().map(|v| mean(v)).collect(),
    }
}

/// The traces of each multi-agent system in `results`, as indices: traces that share an agent
/// name belong to one system (connected components), in order of first appearance. A corpus
/// of two systems gets two tables instead of one whose roles mix both.
pub fn systems(results: &[TraceCredit]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Vec<&str>, Vec<usize>)> = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let agents: Vec<&str> = r.agents.iter().map(String::as_str).collect();
        let (joined, rest): (Vec<_>, Vec<_>) = groups
            .into_iter()
            .partition(|(names, _)| agents.iter().any(|a| names.contains(a)));
        let mut merged: (Vec<&str>, Vec<usize>) = (agents, vec![i]);
        for (names, members) in joined {
            merged.0.extend(names);
            merged.1.extend(members);
        }
        merged.1.sort_unstable();
        groups = rest;
        groups.push(merged);
    }
    groups.sort_by_key(|(_, members)| members.first().copied());
    groups.into_iter().map(|(_, members)| members).collect()
}

/// One multi-agent system of a corpus that holds several ([`systems`]): its traces and its own
/// table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemCredit {
    /// The system's traces (ids), in input order.
    pub traces: Vec<String>,
    /// Its agents, in order of first appearance.
    pub agents: Vec<String>,
    pub table: CreditTable,
}

/// One [`SystemCredit`] per system of `results` when they hold more than one; empty when they
/// are one system, whose table is the corpus table.
pub fn system_tables(results: &[TraceCredit]) -> Vec<SystemCredit> {
    let groups = systems(results);
    if groups.len() < 2 {
        return Vec::new();
    }
    groups
        .iter()
        .map(|members| {
            let of: Vec<TraceCredit> = members.iter().map(|&i| results[i].clone()).collect();
            let mut agents: Vec<String> = Vec::new();
            for a in of.iter().flat_map(|r| &r.agents) {
                if !agents.contains(a) {
                    agents.push(a.clone());
                }
            }
            SystemCredit {
                traces: of.iter().map(|r| r.trace_id.clone()).collect(),
                agents,
                table: corpus_table(&of),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::Step;

    fn step(i: usize, agent: &str, round: Option<u32>, phase: Option<&str>, content: &str) -> Step {
        Step {
            index: i,
            agent: agent.into(),
            content: content.into(),
            round,
            phase: phase.map(str::to_string),
            ..Step::default()
        }
    }

    #[test]
    fn segmenting_rounds_phases_windows() {
        let mut t = Trace::new("t");
        t.steps = vec![
            step(0, "a", None, Some("plan"), ""),
            step(1, "b", None, Some("plan"), ""),
            step(2, "a", None, Some("act"), ""),
            step(3, "a", None, Some("plan"), ""),
        ];
        let (used, s) = segments(&t, Segmenting::Auto, 2);
        assert_eq!(used, Segmenting::Phases);
        assert_eq!(
            s.iter().map(|x| x.key.as_str()).collect::<Vec<_>>(),
            vec!["plan", "act", "plan #2"]
        );
        let (used, s) = segments(&t, Segmenting::Windows, 3);
        assert_eq!(used, Segmenting::Windows);
        assert_eq!(s[1].steps, vec![3]);
        t.steps[2].round = Some(1);
        let (used, s) = segments(&t, Segmenting::Auto, 2);
        assert_eq!(used, Segmenting::Rounds);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].key, "round 2");
        t.steps.iter_mut().for_each(|s| s.phase = None);
        t.steps[2].round = None;
        assert_eq!(segments(&t, Segmenting::Phases, 3).0, Segmenting::Windows);
    }

    #[tokio::test]
    async fn generic_trace_credit_with_fixture_critic() {
        let mut t = Trace::new("g");
        t.task = "Find X.".into();
        t.steps = vec![
            step(0, "planner", None, None, "plan"),
            step(1, "coder", None, None, "code"),
            step(2, "planner", None, None, "wrong claim"),
        ];
        // Fixture answers keyed on the template and the agent named in the request.
        let m = ScriptedModel::new("fixture")
            .on_with(
                "credit/generic_turn_eval_input",
                "\"planner\" in window 1",
                r#"{"failure_pattern":"KNOWLEDGE_DEFICIT","explanation":"x","score":1}"#,
            )
            .on_with(
                "credit/generic_turn_eval_input",
                "\"coder\" in window 1",
                r#"{"failure_pattern":"NONE","explanation":"x","score":5}"#,
            )
            .on(
                "credit/generic_window_judge_input",
                r#"{"scores":{"planner":2,"coder":4},"segment_score":3}"#,
            );
        let opts = TraceCreditOptions {
            window: 5,
            ..Default::default()
        };
        let r = trace_credit(&m, &t, &opts).await.unwrap();
        assert_eq!(r.mode, "generic");
        assert_eq!(r.agents, vec!["planner".to_string(), "coder".into()]);
        assert_eq!(r.q[0][0], Some(0.2));
        assert_eq!(r.p[1][0], Some(0.8));
        assert!((r.c[0][0].unwrap() - 0.3).abs() < 1e-12);
        assert_eq!(r.segment_score, vec![Some(0.6)]);
        assert_eq!(r.calls, 3);
        let tab = corpus_table(&[r.clone(), r]);
        assert_eq!(tab.cell_n[0][0], 2);
        assert_eq!(tab.round_credit, vec![Some(0.6)]);
        assert!(tab.role_credit[0].unwrap() < tab.role_credit[1].unwrap());
    }

    fn credit_of(agents: &[&str]) -> TraceCredit {
        TraceCredit {
            trace_id: agents.join("+"),
            mode: "generic".into(),
            segmenting: Segmenting::Auto,
            agents: agents.iter().map(|a| a.to_string()).collect(),
            segments: vec!["round 1".into()],
            q: vec![vec![Some(0.5)]; agents.len()],
            p: vec![vec![Some(0.5)]; agents.len()],
            c: vec![vec![Some(0.5)]; agents.len()],
            labels: vec![vec![None]; agents.len()],
            segment_score: vec![Some(0.5)],
            abstentions: 0,
            calls: 0,
        }
    }

    #[test]
    fn traces_sharing_agents_are_one_system() {
        let runs = [
            credit_of(&["Planner", "Coder"]),
            credit_of(&["Solver", "Critic"]),
            credit_of(&["Coder", "Tester"]),
            credit_of(&["Judge"]),
            credit_of(&["Critic"]),
            // Shares "Tester" with the third trace, so the first system.
            credit_of(&["Tester"]),
        ];
        assert_eq!(systems(&runs), vec![vec![0, 2, 5], vec![1, 4], vec![3]]);
        assert!(systems(&[]).is_empty());
    }

    #[test]
    fn a_malformed_stored_credit_does_not_panic_the_table() {
        let mut r = credit_of(&["A", "B"]);
        r.c = vec![vec![Some(0.9)]];
        r.segment_score = Vec::new();
        let tab = corpus_table(&[r]);
        assert_eq!(tab.cell[0][0], Some(0.9));
        assert_eq!(tab.cell[1][0], None);
        assert_eq!(tab.round_credit, vec![None]);
    }

    #[test]
    fn recognizes_debate_traces() {
        let mut t = Trace::new("d");
        t.source.format = "debate".into();
        t.task = "What?\n\nA) x\nB) y\nC) z".into();
        t.ground_truth = Some("B".into());
        let q = debate_question(&t).unwrap();
        assert_eq!(
            (q.options.len(), q.answer, q.question.as_str()),
            (3, 'B', "What?")
        );
        t.ground_truth = Some("D".into());
        assert!(debate_question(&t).is_none());
        t.source.format = "chat".into();
        assert!(debate_question(&t).is_none());
    }
}
