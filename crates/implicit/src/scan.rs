//! Scanning one trace: detection (one or several judges), absorption, grouping, risk.

use crate::absorb::{classify, AbsorbConfig};
use crate::detect::{detect, DetectConfig, ImplicitFailure};
use crate::group::{combine_judges, group_repeats, ErrorGroup, GroupConfig};
use crate::taxonomy::{Absorption, ErrorType};
use crate::weights::Weights;
use crate::ImplicitError;
use maslens_llm::{ChatModel, Usage};
use maslens_trace::{Outcome, Trace};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Scan settings.
#[derive(Debug, Clone)]
pub struct ScanConfig {
    pub detect: DetectConfig,
    pub absorb: AbsorbConfig,
    pub group: GroupConfig,
    pub weights: Weights,
    /// Classify absorption of each counted IF.
    pub classify_absorption: bool,
    /// Count IFs whose evidence was not found in the trace (default: flagged and not counted).
    pub count_unsupported: bool,
    /// Multi-judge threshold k (used when more than one model is given).
    pub min_judges: usize,
}

impl Default for ScanConfig {
    fn default() -> Self {
        ScanConfig {
            detect: DetectConfig::default(),
            absorb: AbsorbConfig::default(),
            group: GroupConfig::default(),
            weights: Weights::default(),
            classify_absorption: true,
            count_unsupported: false,
            min_judges: 1,
        }
    }
}

/// The scan of one trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceScan {
    pub id: String,
    /// Task text (used to group candidates in `select`).
    pub task: String,
    /// The trace's known outcome (used only for reports, never in prompts).
    pub outcome: Outcome,
    /// Parsed trace steps L.
    pub steps: usize,
    /// Counted IFs (evidence supported unless `count_unsupported`, and kept by the judges).
    pub events: Vec<ImplicitFailure>,
    /// Events not counted: unsupported evidence, or below the judge threshold.
    #[serde(default)]
    pub flagged: Vec<ImplicitFailure>,
    /// Repeated manifestations grouped.
    #[serde(default)]
    pub groups: Vec<ErrorGroup>,
    /// IF cost C (eq. 2) over counted events.
    pub cost: f64,
    /// Trace risk r = C / max(1, L).
    pub risk: f64,
    /// Risk counting each group of repeated manifestations once (its source event's type, the
    /// largest absorption weight among its members).
    pub risk_grouped: f64,
    /// Multi-judge: judges used and mean agreement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_agreement: Option<f64>,
    pub windows: usize,
    pub abstentions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<String>,
    pub usage: Usage,
    pub calls: u32,
    pub seconds: f64,
    /// Tokens of the scanned trace itself ([`crate::process::trace_tokens`]), for the process
    /// metrics per 1K tokens; absent in scan files before format 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_tokens: Option<u64>,
    /// Text of the trace that tried to steer the detector ("report no failures", a fake
    /// answer, prompt delimiters), each with whether the counted events did what it asked
    /// ([`crate::steering`]); empty when none was found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steering: Vec<crate::steering::SteeringHit>,
}

impl TraceScan {
    /// (type, absorption) pairs of the counted events.
    pub fn weighted_events(&self) -> Vec<(ErrorType, Option<Absorption>)> {
        self.events
            .iter()
            .map(|e| (e.error_type, e.absorption.as_ref().and_then(|a| a.label)))
            .collect()
    }
}

/// Cost and risk of a scan's counted events under `weights` (also the grouped risk).
pub fn score(
    events: &[ImplicitFailure],
    groups: &[ErrorGroup],
    steps: usize,
    weights: &Weights,
) -> (f64, f64, f64) {
    let pairs = events
        .iter()
        .map(|e| (e.error_type, e.absorption.as_ref().and_then(|a| a.label)));
    let cost = weights.cost(pairs.clone());
    let risk = weights.risk(pairs, steps);
    let grouped: f64 = groups
        .iter()
        .map(|g| {
            let src = &events[g.members[0]];
            let w_abs = g
                .members
                .iter()
                .map(|&m| weights.w_abs(events[m].absorption.as_ref().and_then(|a| a.label)))
                .fold(0.0, f64::max);
            weights.w_type(src.error_type) * w_abs
        })
        .fold(0.0, |acc, w| acc + w)
        / steps.max(1) as f64;
    (cost, risk, grouped)
}

/// Scan one trace. `models[0]` also classifies absorption; with several models, detection
/// runs once per model and events need `cfg.min_judges` supporting judges.
pub async fn scan_trace(
    models: &[&dyn ChatModel],
    trace: &Trace,
    cfg: &ScanConfig,
) -> Result<TraceScan, ImplicitError> {
    let started = Instant::now();
    let Some(primary) = models.first() else {
        return Err(ImplicitError::Config("no model given".into()));
    };
    let mut usage = Usage::default();
    let mut calls = 0u32;
    let mut windows = 0usize;
    let mut abstentions = Vec::new();
    let mut rejected = Vec::new();
    let mut per_judge = Vec::new();
    for m in models {
        let d = detect(*m, trace, &cfg.detect).await?;
        usage += d.usage;
        calls += d.calls;
        windows = windows.max(d.windows.len());
        let tag = |s: String| {
            if models.len() > 1 {
                format!("[{}] {s}", m.id())
            } else {
                s
            }
        };
        abstentions.extend(d.abstentions.into_iter().map(tag));
        rejected.extend(d.rejected.into_iter().map(tag));
        // An event at a step the trace does not have is never counted, whatever the counting:
        // every counted IF is inside the trace.
        let (ok, bad): (Vec<_>, Vec<_>) = d.events.into_iter().partition(|e| {
            e.supported()
                || (cfg.count_unsupported
                    && e.evidence_check.status != crate::evidence::EvidenceStatus::StepNotFound)
        });
        per_judge.push((m.id().to_string(), ok, bad));
    }
    let mut flagged: Vec<ImplicitFailure> = Vec::new();
    let (mut events, judges, judge_agreement) = if models.len() == 1 {
        let (_, ok, bad) = per_judge.pop().unwrap_or_default();
        flagged.extend(bad);
        (ok, Vec::new(), None)
    } else {
        let lists: Vec<(String, Vec<ImplicitFailure>)> = per_judge
            .iter()
            .map(|(id, ok, _)| (id.clone(), ok.clone()))
            .collect();
        for (_, _, bad) in per_judge {
            flagged.extend(bad);
        }
        let panel = combine_judges(&lists, cfg.min_judges.max(1));
        for mut e in panel.dropped {
            e.flags.push(format!(
                "reported by {} of {} judges (threshold {})",
                e.judges.len(),
                panel.n,
                panel.k
            ));
            flagged.push(e);
        }
        (
            panel.kept,
            lists.into_iter().map(|(id, _)| id).collect(),
            panel.mean_agreement,
        )
    };
    if cfg.classify_absorption {
        for e in events.iter_mut() {
            let (r, u, c) = classify(*primary, trace, e, &cfg.absorb).await?;
            usage += u;
            calls += c;
            e.absorption = Some(r);
        }
    }
    // Reporting only (after every model call): an IF at the labelled decisive-failure step may
    // be the decisive error itself rather than an implicit one.
    if let Some(d) = &trace.labels.decisive {
        for e in events.iter_mut().filter(|e| e.step == d.step) {
            e.flags.push(
                "at the labelled decisive-failure step (the label was not shown to the model)"
                    .into(),
            );
        }
    }
    let groups = group_repeats(&mut events, cfg.group);
    let steps = trace.steps.len();
    let (cost, risk, risk_grouped) = score(&events, &groups, steps, &cfg.weights);
    let steering = crate::steering::check(trace, &events);
    Ok(TraceScan {
        id: trace.id.clone(),
        task: trace.task.clone(),
        outcome: trace.outcome,
        steps,
        events,
        flagged,
        groups,
        cost,
        risk,
        risk_grouped,
        judges,
        judge_agreement,
        windows,
        abstentions,
        rejected,
        usage,
        calls,
        seconds: started.elapsed().as_secs_f64(),
        trace_tokens: Some(crate::process::trace_tokens(trace)),
        steering,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::{AgentKind, TraceBuilder};
    use serde_json::json;

    fn trace() -> Trace {
        TraceBuilder::new("s1")
            .task("Add 2 and 2.")
            .outcome(Outcome::Success)
            .agent("Solver", AgentKind::Worker)
            .agent("Checker", AgentKind::Worker)
            .step("Solver", "2 + 2 = 5")
            .step("Checker", "No: 2 + 2 = 4.")
            .step("Solver", "Right, the answer is 4.")
            .step("Solver", "FINAL 4")
            .build()
    }

    fn det(events: &[(usize, &str, &str, &str)]) -> String {
        let items: Vec<_> = events
            .iter()
            .map(|(s, a, ty, ev)| json!({"error_step": s, "error_agent": a, "error_type": ty, "error_description": "d",
                "error_evidence": ev, "severity": "low", "confidence": "high"}))
            .collect();
        json!({"implicit_failures": items}).to_string()
    }

    #[tokio::test]
    async fn scan_counts_supported_events_and_scores_risk() {
        let t = trace();
        // Fixture: the detector answers once, then one absorption answer per counted event.
        let m = ScriptedModel::new("fixture")
            .on("implicit/absorb_user", r#"{"absorption_pattern":"peer_repair","confidence":"high","rationale":"Checker fixed it"}"#)
            .then(det(&[(0, "Solver", "reasoning_error", "2 + 2 = 5"), (2, "Solver", "hallucination", "the moon is cheese")]));
        let s = scan_trace(&[&m], &t, &ScanConfig::default()).await.unwrap();
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.flagged.len(), 1);
        // reasoning error (1.2) * peer repair (0.75) = 0.9; L = 4
        assert!((s.cost - 0.9).abs() < 1e-12);
        assert!((s.risk - 0.225).abs() < 1e-12);
        assert!((s.risk_grouped - 0.225).abs() < 1e-12);
        assert_eq!(m.n_calls(), 2);
        assert!(s.events[0].flags.is_empty());
        // With a decisive label at step 0 the event is flagged (and still counted).
        let mut t2 = trace();
        t2.labels.decisive = Some(maslens_trace::DecisiveLabel {
            agent: "Solver".into(),
            step: 0,
            reason: None,
        });
        let m = ScriptedModel::new("fixture")
            .on(
                "implicit/absorb_user",
                r#"{"absorption_pattern":"peer_repair","confidence":"high","rationale":"r"}"#,
            )
            .then(det(&[(0, "Solver", "reasoning_error", "2 + 2 = 5")]));
        let s = scan_trace(&[&m], &t2, &ScanConfig::default())
            .await
            .unwrap();
        assert_eq!(s.events.len(), 1);
        assert!(s.events[0].flags[0].contains("decisive-failure step"));
    }

    #[tokio::test]
    async fn multi_judge_keeps_k_of_n() {
        let t = trace();
        let a = ScriptedModel::new("judge-a")
            .on(
                "implicit/absorb_user",
                r#"{"absorption_pattern":"self_corrected","confidence":"high","rationale":"r"}"#,
            )
            .then(det(&[
                (0, "Solver", "reasoning_error", "2 + 2 = 5"),
                (1, "Checker", "unnecessary_action", "No: 2 + 2 = 4."),
            ]));
        let b = ScriptedModel::new("judge-b").then(det(&[(
            0,
            "solver",
            "reasoning_error",
            "2 + 2 = 5",
        )]));
        let cfg = ScanConfig {
            min_judges: 2,
            ..Default::default()
        };
        let s = scan_trace(&[&a, &b], &t, &cfg).await.unwrap();
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.events[0].judges, vec!["judge-a", "judge-b"]);
        assert_eq!(s.flagged.len(), 1);
        assert!(s.flagged[0]
            .flags
            .iter()
            .any(|f| f.contains("1 of 2 judges")));
        assert_eq!(s.judge_agreement, Some(0.75));
        // 1.2 * 0.55 / 4
        assert!((s.risk - 0.165).abs() < 1e-12);
    }
}
