//! ECHO-style attribution (Banerjee, Nair and Borogovac 2025, "Where Did It All Go Wrong? A
//! Hierarchical Look into Multi-Agent Error Attribution", arXiv 2510.04886): a hierarchical
//! context, a panel of analysts that judge it independently, and a confidence-weighted
//! consensus vote.
//!
//! 1. **Focus**: the step the hierarchy centres on: the prior's most likely step when the
//!    pipeline passes one (prior-guided narrowing), else a scout call over a milestone view
//!    (every step's opening words, `judge_echo_scout.v1`) names it; a scout that abstains leaves
//!    the middle of the trace.
//! 2. **Hierarchical context** ([`crate::render::fit_hierarchical`]): the focus and its neighbours
//!    in full, farther steps progressively compressed (L1-L4).
//! 3. **Objective analysis**: [`STANCES`].len() analyst calls over the same context (one cached
//!    prefix), each with its own stance (`judge_echo.v1`), each answering a location with a
//!    confidence; every answer is checked like any location answer.
//! 4. **Consensus**: the analysts' locations are ballots of [`crate::vote::vote`] (support = the
//!    sum of confidences; ties to the pair backed by more analysts, then the earliest step); the
//!    verdict is the winner, its confidence the winner's support over the panel's size.
//!
//! Departures (docs/locate.md): the prompts are ours, written from the paper's description; the
//! levels are character budgets, not the paper's pattern-based extraction; the focus comes from
//! the prior or one scout call (the paper centres on each target agent); the analysts' stances
//! are ours (the paper's run from conservative to balanced); a trace whose smallest hierarchy
//! does not fit the window goes to all-at-once's windows.

use super::{all_at_once, budget, call, last_index, JudgeResult, Protocol, Settings};
use crate::render::{self, Strategy};
use crate::vote::{vote, Ballot};
use crate::{finding_from_answer, prompts, Finding, LocateError, LocationAnswer};
use maslens_llm::structured::StructuredOutput;
use maslens_llm::{ChatModel, Totals};
use maslens_trace::Trace;
use serde_json::{json, Value};

/// The panel: each analyst's name and stance, from conservative to balanced.
pub const STANCES: [(&str, &str); 6] = [
    ("conservative", "Name a step only for a mistake you can quote. Of the steps with a clear factual, logical or instruction error, choose the one that did the most harm."),
    ("evidence", "Rely only on what the steps say: a step is decisive only if its own words are wrong, not because a later agent disagreed with it."),
    ("causal", "Follow the chain of consequences backwards from the failure to the earliest step that set it in motion and that nothing later repaired."),
    ("skeptical", "Do not accept the obvious answer, such as the last step or the agent that gave the final answer, without checking whether an earlier step caused the failure."),
    ("coordination", "Look at how the agents worked together: instructions not followed, information lost or withheld between agents, wrong hand-offs, steps that ignored what another agent said."),
    ("balanced", "Weigh facts, reasoning and coordination together and give your best overall judgement."),
];

/// Characters of each step in the scout's milestone view.
const MILESTONE_CHARS: usize = 120;

/// Run the ECHO-style panel on `trace` (module docs).
pub(crate) async fn echo(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    prior: Option<&[f64]>,
) -> Result<JudgeResult, LocateError> {
    let mut stats = Totals::default();
    let mut trail = Vec::new();
    let focus = match prior.and_then(most_likely) {
        Some(pos) => {
            trail.push(json!({"focus": trace.steps[pos].index, "from": "prior"}));
            pos
        }
        None => scout(model, trace, settings, &mut stats, &mut trail).await?,
    };
    let limit = budget(model, trace, settings);
    let Some(fitted) = render::fit_hierarchical(model, trace, focus, limit) else {
        let mut windowed = all_at_once(model, trace, settings, prior).await?;
        windowed.protocol = Protocol::Echo;
        return Ok(windowed);
    };
    let ctx = prompts::fitted_context(trace, &fitted, settings.with_ground_truth)?;
    let focus_step = match fitted.strategy {
        Strategy::Hierarchical { focus_step, .. } => Some(focus_step),
        _ => None,
    };
    let mut findings = Vec::new();
    for (i, (name, stance)) in STANCES.iter().enumerate() {
        let instr = prompts::JUDGE_ECHO.rendered(json!({
            "criterion": prompts::criterion()?,
            "analyst": i + 1,
            "analysts": STANCES.len(),
            "stance": stance,
            "focus": focus_step,
            "error_modes": crate::error_mode_lines(&settings.error_modes)
        }))?;
        let f = locate_once(
            model,
            trace,
            &ctx,
            &instr,
            settings,
            "judge/echo",
            &mut stats,
        )
        .await?;
        trail.push(json!({"analyst": name, "agent": f.agent, "step": f.step,
                          "confidence": f.confidence, "abstain_reason": f.abstain_reason}));
        findings.push(f);
    }
    let finding = consensus(&findings, &mut trail);
    Ok(JudgeResult {
        protocol: Protocol::Echo,
        finding,
        stats,
        strategy: fitted.strategy,
        trail,
    })
}

/// One checked location call.
async fn locate_once(
    model: &dyn ChatModel,
    trace: &Trace,
    ctx: &str,
    instructions: &maslens_llm::prompt::Rendered,
    settings: &Settings,
    stage: &str,
    stats: &mut Totals,
) -> Result<Finding, LocateError> {
    let schema = super::location_schema(&settings.error_modes);
    let check = |a: &LocationAnswer| crate::location_problem(trace, 0..=last_index(trace), a);
    let out: StructuredOutput<LocationAnswer> = call(
        model,
        trace,
        ctx,
        instructions,
        &schema,
        settings,
        stage,
        stats,
        &check,
    )
    .await?;
    Ok(finding_from_answer(
        trace,
        out.value.as_ref(),
        out.abstain_reason.as_deref(),
    ))
}

/// The position the prior ranks highest (earliest on ties).
fn most_likely(prior: &[f64]) -> Option<usize> {
    prior
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_finite())
        .fold(None, |best: Option<(usize, f64)>, (i, &p)| match best {
            Some((_, b)) if b >= p => best,
            _ => Some((i, p)),
        })
        .map(|(i, _)| i)
}

/// The scout's focus over the milestone view; the middle of the trace when it abstains or the
/// view does not fit.
async fn scout(
    model: &dyn ChatModel,
    trace: &Trace,
    settings: &Settings,
    stats: &mut Totals,
    trail: &mut Vec<Value>,
) -> Result<usize, LocateError> {
    let middle = trace.steps.len() / 2;
    let limit = budget(model, trace, settings);
    let Some(view) = render::fit_milestones(model, trace, MILESTONE_CHARS, limit) else {
        trail.push(json!({"focus": trace.steps[middle].index, "from": "middle (the milestone view does not fit)"}));
        return Ok(middle);
    };
    let ctx = prompts::context(trace, &view, None, settings.with_ground_truth)?;
    let instr = prompts::JUDGE_ECHO_SCOUT.rendered(json!({"criterion": prompts::criterion()?}))?;
    let plain = Settings {
        error_modes: Vec::new(),
        ..settings.clone()
    };
    let f = locate_once(
        model,
        trace,
        &ctx,
        &instr,
        &plain,
        "judge/echo-scout",
        stats,
    )
    .await?;
    let pos = f
        .step
        .and_then(|s| trace.steps.iter().position(|st| st.index == s));
    match pos {
        Some(p) => {
            trail.push(json!({"focus": trace.steps[p].index, "from": "scout"}));
            Ok(p)
        }
        None => {
            trail.push(json!({"focus": trace.steps[middle].index,
                              "from": "middle (the scout abstained)"}));
            Ok(middle)
        }
    }
}

/// The panel's verdict: the confidence-weighted vote over the analysts' locations.
fn consensus(findings: &[Finding], trail: &mut Vec<Value>) -> Finding {
    let ballots: Vec<Ballot> = findings
        .iter()
        .filter_map(|f| Some(Ballot::new(f.agent.clone()?, f.step?, f.confidence)))
        .collect();
    let outcome = vote(&ballots, None);
    trail.push(json!({"consensus": outcome}));
    let Some((agent, step)) = &outcome.winner else {
        return Finding {
            rationale: String::new(),
            abstain_reason: Some("no analyst of the panel located a step".into()),
            ..Finding::default()
        };
    };
    let support = outcome.support.first().map_or(0.0, |s| s.score);
    let backers = findings
        .iter()
        .filter(|f| f.step == Some(*step) && f.agent.as_deref() == Some(agent.as_str()));
    let best = backers.max_by(|a, b| a.confidence.total_cmp(&b.confidence));
    let mut finding = best.cloned().unwrap_or_default();
    finding.confidence = (support / STANCES.len() as f64).clamp(0.0, 1.0);
    finding
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::{judge, judge_guided};
    use maslens_llm::testing::ScriptedModel;

    fn trace() -> Trace {
        crate::test_support::arithmetic()
    }

    fn solver(confidence: f64) -> String {
        json!({"reason": "\"2 + 3 = 6, so the product is 24\": two and three make five.",
               "agent": "Solver", "step": 1, "confidence": confidence})
        .to_string()
    }

    fn checker() -> String {
        json!({"reason": "\"Looks right: 24\": the checker accepts a wrong product.",
               "agent": "Checker", "step": 2, "confidence": 0.9})
        .to_string()
    }

    /// The scout picks the focus, six analysts answer over the hierarchy around it, and the
    /// confidence-weighted vote decides (4 x 0.8 for step 1 beats 2 x 0.9 for step 2).
    #[tokio::test]
    async fn a_scout_a_panel_of_six_and_a_consensus() {
        let model = ScriptedModel::new("fixture")
            .on("locate/judge_echo_scout", solver(0.5))
            .on_with(
                "locate/judge_echo.v1",
                "Do not accept the obvious",
                checker(),
            )
            .on_with(
                "locate/judge_echo.v1",
                "how the agents worked together",
                checker(),
            )
            .on("locate/judge_echo.v1", solver(0.8));
        let r = judge(&model, &trace(), Protocol::Echo, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.protocol, Protocol::Echo);
        assert_eq!(
            (r.finding.agent.as_deref(), r.finding.step),
            (Some("Solver"), Some(1))
        );
        assert!(
            (r.finding.confidence - 3.2 / 6.0).abs() < 1e-9,
            "{}",
            r.finding.confidence
        );
        assert_eq!(r.trail[0]["from"], "scout");
        assert_eq!(
            r.trail.iter().filter(|t| t["analyst"].is_string()).count(),
            6
        );
        assert_eq!(
            r.trail.last().unwrap()["consensus"]["support"][1]["step"],
            2
        );
        assert!(matches!(
            r.strategy,
            Strategy::Hierarchical { focus_step: 1, .. }
        ));
        let calls = model.calls.lock().unwrap();
        assert_eq!(calls.len(), 7, "one scout, six analysts");
        let analyst = &calls[1].messages.last().unwrap().content;
        assert!(analyst.contains("hierarchy around step 1"), "{analyst}");
        assert!(analyst.contains("analyst 1 of 6"), "{analyst}");
        // The analysts share one context (a cached prefix): only their instructions differ.
        let prefix = |i: usize| {
            let m = &calls[i].messages.last().unwrap().content;
            m[..m.find("You are analyst").unwrap()].to_string()
        };
        assert!((2..7).all(|i| prefix(i) == prefix(1)));
    }

    /// With a prior the focus is its most likely step and no scout is asked; a panel where no
    /// analyst locates a step abstains.
    #[tokio::test]
    async fn the_prior_sets_the_focus_and_an_empty_panel_abstains() {
        let model = ScriptedModel::new("fixture").on("locate/judge_echo.v1", solver(0.7));
        let prior = [0.1, 0.2, 0.7];
        let r = judge_guided(
            &model,
            &trace(),
            Protocol::Echo,
            &Settings::default(),
            Some(&prior),
        )
        .await
        .unwrap();
        assert_eq!(r.trail[0], json!({"focus": 2, "from": "prior"}));
        assert_eq!(model.calls.lock().unwrap().len(), 6);
        assert_eq!(r.finding.step, Some(1));

        let model = ScriptedModel::new("fixture").rule("", "not json");
        let r = judge(&model, &trace(), Protocol::Echo, &Settings::default())
            .await
            .unwrap();
        assert_eq!(r.finding.step, None);
        assert!(r.finding.abstain_reason.is_some());
        assert_eq!(r.trail[0]["from"], "middle (the scout abstained)");
    }
}
