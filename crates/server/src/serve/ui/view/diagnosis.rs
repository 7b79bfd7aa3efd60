//! One stored diagnosis as the pages show it: the verdict (primary pair, probability,
//! alternatives, provenance), the pipeline's ballots and vote, a scan's events.

use super::*;

/// The evaluator and vote side of a localization.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ballot {
    pub who: String,
    pub model: String,
    pub agent: Option<String>,
    pub step: Option<i64>,
    pub confidence: Option<f64>,
    pub confidence_bucket: u8,
    pub rationale: String,
    pub abstain_reason: Option<String>,
    /// Agrees with the final location.
    pub agrees: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SupportRow {
    pub agent: String,
    pub step: i64,
    pub score: f64,
    pub ballots: i64,
}

/// An alternative answer of a verdict (`maslens_trace::Pick`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AltView {
    pub agent: String,
    pub step: i64,
    pub probability: Option<f64>,
    /// What it is: `agent-level answer`, `runner-up`, `the prior alone`, ...
    pub kind: String,
}

/// An event a scan reported but did not count (its evidence is not in the trace, it names a
/// step the trace lacks, too few judges reported it, ...), with why.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlaggedEvent {
    pub step: Option<i64>,
    pub agent: String,
    pub error_type: String,
    /// The detector's confidence (`low`, `medium`, `high`).
    pub confidence: String,
    pub severity: String,
    pub description: String,
    pub evidence: String,
    /// The evidence check (`unsupported`, `step_not_found`, `paraphrase`, `verbatim`) and the
    /// share of the evidence's words found in the step.
    pub evidence_status: Option<String>,
    pub coverage: Option<f64>,
    /// Why it was not counted, as the scan recorded it.
    pub reasons: Vec<String>,
}

/// The flagged events of a stored scan result (`maslens_implicit::scan::TraceScan::flagged`).
fn flagged_events(result: &Value) -> Vec<FlaggedEvent> {
    result
        .get("flagged")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let check = e.get("evidence_check");
            FlaggedEvent {
                step: i(e, "step"),
                agent: s(e, "agent").unwrap_or_default(),
                error_type: s(e, "error_type").unwrap_or_default(),
                confidence: s(e, "confidence").unwrap_or_default(),
                severity: s(e, "severity").unwrap_or_default(),
                description: s(e, "description").unwrap_or_default(),
                evidence: s(e, "evidence").unwrap_or_default(),
                evidence_status: check.and_then(|c| s(c, "status")),
                coverage: check.and_then(|c| f(c, "coverage")),
                reasons: e
                    .get("flags")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.as_str().map(String::from))
                    .collect(),
            }
        })
        .collect()
}

/// One diagnosis as the pages show it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DiagnosisView {
    pub id: String,
    pub method: String,
    /// The localizer that gave the verdict (`stacked`, `llm`, `prior`), when recorded.
    pub localizer: Option<String>,
    /// The maslens version and revision that gave it, when recorded.
    pub revision: Option<String>,
    pub alternatives: Vec<AltView>,
    pub model: Option<String>,
    pub created_ns: i64,
    pub agent: Option<String>,
    pub step: Option<i64>,
    pub confidence: Option<f64>,
    pub risk: Option<f64>,
    pub rationale: String,
    pub source: Option<String>,
    pub agreement: Option<f64>,
    pub abstain_reason: Option<String>,
    pub error_mode: Option<String>,
    pub ballots: Vec<Ballot>,
    pub support: Vec<SupportRow>,
    pub tie_break: Option<String>,
    pub events: Vec<EventMark>,
    /// A scan's events not counted, with why.
    pub flagged: Vec<FlaggedEvent>,
    pub elapsed_ms: Option<i64>,
    pub calls: Option<u64>,
    pub tokens: Option<u64>,
    pub trace_hash: Option<String>,
    pub span_id: Option<String>,
    pub otel_trace_id: Option<String>,
    /// The diagnosis judged an older version of the trace.
    pub stale: bool,
}

fn ballot(
    who: String,
    model: String,
    finding: &Value,
    loc: (&Option<String>, Option<i64>),
) -> Ballot {
    let agent = s(finding, "agent");
    let step = i(finding, "step");
    let confidence = f(finding, "confidence");
    Ballot {
        agrees: agent.is_some() && (&agent, step) == (loc.0, loc.1),
        who,
        model,
        agent,
        step,
        confidence,
        confidence_bucket: bucket(confidence.unwrap_or(0.0)),
        rationale: s(finding, "rationale").unwrap_or_default(),
        abstain_reason: s(finding, "abstain_reason"),
    }
}

/// The verdict's own fields (`maslens_trace::Verdict`: rationale, alternatives, provenance) and,
/// for the LLM pipeline, its ballots and vote. A row stored before the one verdict (no
/// `payload`) is the pipeline's verdict itself.
fn verdict_fields(v: &mut DiagnosisView, r: &Value) {
    let payload = r.get("payload");
    v.localizer = payload.and(s(r, "method"));
    v.revision = s(r, "revision");
    v.rationale = s(r, "rationale").unwrap_or_default();
    v.abstain_reason = s(r, "abstain_reason");
    v.alternatives = r
        .get("alternatives")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some(AltView {
                agent: s(a, "agent")?,
                step: i(a, "step")?,
                probability: f(a, "probability"),
                kind: s(a, "kind").unwrap_or_default(),
            })
        })
        .collect();
    // Where the pipeline's verdict is: the payload (llm), the payload's `pipeline` (stacked),
    // the row itself (rows stored before the one verdict), none (the prior).
    let pipeline = match payload {
        Some(p) if p.get("pipeline").is_some() => p.get("pipeline").filter(|x| !x.is_null()),
        Some(p) if p.get("judge").is_some() => Some(p),
        Some(_) => None,
        None if r.get("judge").is_some() => Some(r),
        None => None,
    };
    if let Some(p) = pipeline {
        pipeline_fields(v, p);
    }
}

/// The LLM pipeline's ballots (Judge and Evaluators) and its confidence-weighted vote.
fn pipeline_fields(v: &mut DiagnosisView, r: &Value) {
    v.source = s(r, "source");
    v.agreement = f(r, "agreement");
    v.error_mode = s(r, "error_mode");
    let loc = (&v.agent, v.step);
    if let Some(j) = r.get("judge").filter(|j| !j.is_null()) {
        let protocol = s(j, "protocol").unwrap_or_else(|| "judge".into());
        if let Some(finding) = j.get("finding") {
            v.ballots.push(ballot(
                format!("Judge ({protocol})"),
                s(r, "model").unwrap_or_default(),
                finding,
                loc,
            ));
        }
    }
    for e in r
        .get("evaluators")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(finding) = e.get("finding") {
            v.ballots.push(ballot(
                format!("Evaluator ({})", s(e, "style").unwrap_or_default()),
                s(e, "model").unwrap_or_default(),
                finding,
                loc,
            ));
        }
    }
    if let Some(vote) = r.get("vote").filter(|x| !x.is_null()) {
        v.tie_break = s(vote, "tie_break");
        for sup in vote
            .get("support")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            v.support.push(SupportRow {
                agent: s(sup, "agent").unwrap_or_default(),
                step: i(sup, "step").unwrap_or(-1),
                score: f(sup, "score").unwrap_or(0.0),
                ballots: i(sup, "ballots").unwrap_or(0),
            });
        }
    }
}

/// A stored diagnosis as a view; `current_hash` marks diagnoses of older trace versions.
pub fn diagnosis_view(d: &Diagnosis, current_hash: Option<&str>) -> DiagnosisView {
    let b = &d.body;
    let r = &b.result;
    let mut v = DiagnosisView {
        id: d.id.clone(),
        method: b.method.clone(),
        model: b.model.clone(),
        created_ns: d.created_ns,
        agent: b.agent.clone(),
        step: b.step,
        confidence: b.confidence,
        risk: b.risk,
        elapsed_ms: b.elapsed_ms,
        trace_hash: b.trace_hash.clone(),
        span_id: b.span_id.clone(),
        otel_trace_id: b.otel_trace_id.clone(),
        stale: matches!((current_hash, &b.trace_hash), (Some(c), Some(h)) if c != h),
        calls: b.usage.get("calls").and_then(Value::as_u64),
        tokens: match (
            b.usage.get("prompt_tokens").and_then(Value::as_u64),
            b.usage.get("completion_tokens").and_then(Value::as_u64),
        ) {
            (Some(p), Some(c)) => Some(p + c),
            _ => None,
        },
        ..DiagnosisView::default()
    };
    match b.method.as_str() {
        "locate" | "prior" => verdict_fields(&mut v, r),
        "scan" => {
            v.events = b
                .events
                .iter()
                .map(|e| EventMark {
                    step: e.step,
                    agent: e.agent.clone().unwrap_or_default(),
                    error_type: e.error_type.clone().unwrap_or_default(),
                    weight: e.severity,
                    severity: s(&e.event, "severity").unwrap_or_default(),
                    description: s(&e.event, "description").unwrap_or_default(),
                    evidence: s(&e.event, "evidence").unwrap_or_default(),
                    absorption: e
                        .event
                        .get("absorption")
                        .and_then(|a| a.get("label"))
                        .and_then(Value::as_str)
                        .map(String::from),
                    absorption_rationale: e
                        .event
                        .get("absorption")
                        .and_then(|a| s(a, "rationale"))
                        .unwrap_or_default(),
                    absorbed_by: e.absorbed_by,
                    cited_steps: e
                        .event
                        .get("absorption")
                        .and_then(|a| s(a, "rationale"))
                        .map(|r| cited_steps(&r, e.step))
                        .unwrap_or_default(),
                })
                .collect();
            v.flagged = flagged_events(r);
        }
        _ => {}
    }
    v
}
