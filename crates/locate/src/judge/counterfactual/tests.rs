use super::*;
use crate::judge::{judge, judge_guided};
use maslens_llm::testing::ScriptedModel;

const PROPOSE: &str = "locate/judge_counterfactual.v1";
const CHECK: &str = "locate/judge_counterfactual_check.v1";

fn trace() -> Trace {
    crate::test_support::arithmetic()
}

fn checker_step() -> String {
    json!({"reason": "\"Looks right: 24\": the checker accepts a wrong product.",
           "agent": "Checker", "step": 2, "correction": "Wrong: 2 + 3 is 5, so the product is 20.",
           "confidence": 0.6})
    .to_string()
}

fn solver_step() -> String {
    json!({"reason": "\"2 + 3 = 6, so the product is 24\": two and three make five.",
           "agent": "Solver", "step": 1, "correction": "2 + 3 = 5, so the product is 20.",
           "confidence": 0.7})
    .to_string()
}

fn prediction(solved: bool, confidence: f64) -> String {
    json!({"continuation": "the agents go on from the corrected step", "solved": solved,
           "confidence": confidence})
    .to_string()
}

/// Round 1 proposes the Checker, whose corrected run the check predicts still fails; round 2
/// is told so, proposes the Solver, and the check accepts: the verdict is the Solver's step with
/// the check's confidence, after four calls.
#[tokio::test]
async fn a_rejected_step_is_listed_and_the_next_accepted() {
    let model = ScriptedModel::new("fixture")
        .on_with(PROPOSE, "Already checked and rejected", solver_step())
        .on(PROPOSE, checker_step())
        .on_with(CHECK, "[CORRECTED] 2 + 3 = 5", prediction(true, 0.8))
        .on(CHECK, prediction(false, 0.9));
    let r = judge(
        &model,
        &trace(),
        Protocol::Counterfactual,
        &Settings::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.protocol, Protocol::Counterfactual);
    assert_eq!(
        (r.finding.agent.as_deref(), r.finding.step),
        (Some("Solver"), Some(1))
    );
    assert!((r.finding.confidence - 0.8).abs() < 1e-9);
    assert_eq!(r.trail.len(), 2);
    assert_eq!(r.trail[0]["step"], 2);
    assert_eq!(r.trail[0]["accepted"], false);
    assert_eq!(r.trail[1]["accepted"], true);
    let calls = model.calls.lock().unwrap();
    assert_eq!(calls.len(), 4, "propose, check, propose, check");
    let second = &calls[2].messages.last().unwrap().content;
    assert!(
        second.contains("step 2 (Checker), corrected to: \"Wrong: 2 + 3 is 5"),
        "{second}"
    );
    // The check sees the corrected step in place of the original and the step after it.
    let check = &calls[3].messages.last().unwrap().content;
    assert!(
        check.contains("[CORRECTED] 2 + 3 = 5, so the product is 20."),
        "{check}"
    );
    assert!(!check.contains("2 + 3 = 6"), "{check}");
    assert!(check.contains("Looks right: 24."), "{check}");
    assert!(check.contains("Step 1 (Solver) is shown above"), "{check}");
}

/// A step already rejected is sent back once for repair; when every round is rejected, the
/// candidate the checks found most likely to fix the run is the verdict, said so in the trail.
#[tokio::test]
async fn naming_a_rejected_step_again_is_repaired_and_none_accepted_keeps_the_likeliest() {
    let model = ScriptedModel::new("fixture")
        .on_with(
            "llm/repair",
            "step 2 was already checked and rejected",
            solver_step(),
        )
        .on(PROPOSE, checker_step())
        .on_with(CHECK, "[CORRECTED] 2 + 3 = 5", prediction(false, 0.6))
        .on(CHECK, prediction(false, 0.95));
    let r = judge(
        &model,
        &trace(),
        Protocol::Counterfactual,
        &Settings::default(),
    )
    .await
    .unwrap();
    // Round 1: Checker (rejected, fixes 0.05); round 2: Checker again, repaired to Solver
    // (rejected, fixes 0.4); round 3: Checker again, repaired to Solver, rejected already: the
    // rounds end.
    assert_eq!(r.finding.step, Some(1), "{:?}", r.trail);
    assert!((r.finding.confidence - 0.4).abs() < 1e-9);
    assert_eq!(r.trail.len(), 4, "{:?}", r.trail);
    assert_eq!(r.trail[1]["step"], 1);
    assert_eq!(r.trail[2], json!({"round": 3, "repeated_step": 1}));
    assert_eq!(r.trail[3]["none_accepted"], true);
    assert_eq!(r.trail[3]["chosen_step"], 1);
    // Propose, check; propose, repair, check; propose, repair (still step 1: no third check).
    assert_eq!(model.calls.lock().unwrap().len(), 7);
}

/// A proposal that does not parse abstains; with a prior the context is guided the same way
/// as the other one-call protocols, and the first accepted proposal ends the run after two calls.
#[tokio::test]
async fn an_unparsable_proposal_abstains_and_an_accepted_one_ends_at_once() {
    let model = ScriptedModel::new("fixture").rule("", "not json");
    let r = judge(
        &model,
        &trace(),
        Protocol::Counterfactual,
        &Settings::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.finding.step, None);
    assert!(r.finding.abstain_reason.is_some());
    assert!(r.trail[0]["abstain_reason"].is_string());

    let model = ScriptedModel::new("fixture")
        .on(PROPOSE, solver_step())
        .on(CHECK, prediction(true, 0.7));
    let prior = [0.1, 0.8, 0.1];
    let r = judge_guided(
        &model,
        &trace(),
        Protocol::Counterfactual,
        &Settings::default(),
        Some(&prior),
    )
    .await
    .unwrap();
    assert_eq!(r.finding.step, Some(1));
    assert_eq!(model.calls.lock().unwrap().len(), 2);
}
