//! What credit-guided BCD carries from one outer iteration to the next, and how a rollout's
//! critiqued aggregations feed the EMA of informative failures.

use crate::config::PromptSet;
use crate::credit::{EmaCredit, InformativeFailure, RunCritique};
use crate::debate::DebateRun;

/// What BCD carries from one iteration to the next.
pub(crate) struct BcdState {
    pub(crate) prompts: PromptSet,
    pub(crate) ema: EmaCredit,
    /// The last rollout and the prompts it was made with.
    pub(crate) cached: Option<(PromptSet, Vec<DebateRun>)>,
    /// The prompts whose rollouts the EMA has observed.
    pub(crate) observed: Option<PromptSet>,
}

/// Feed the EMA every round's aggregation of `runs` with its critique.
pub(crate) fn observe_failures(ema: &mut EmaCredit, runs: &[DebateRun], crit: &[RunCritique]) {
    for (run, c) in runs.iter().zip(crit) {
        for t in 0..run.rounds_run {
            let (Some(state), Some(Some(eval))) = (run.states.get(t), c.agg.get(t)) else {
                continue;
            };
            let f = InformativeFailure {
                question: run.question.clone(),
                round: t,
                messages: run.utterances[t]
                    .iter()
                    .map(|u| (u.role.clone(), u.text.clone()))
                    .collect(),
                state: state.text.clone(),
                q_agg: eval.q(),
                explanation: eval.explanation.clone(),
            };
            ema.observe_failure(f, state.correct, run.any_agent_correct(t));
        }
    }
}
