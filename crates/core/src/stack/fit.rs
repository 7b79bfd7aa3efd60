//! Fitting the weights: the grid of candidates and the choice by hits on labelled cases.

use super::*;
use maslens_locate::LocateVerdict;
use maslens_trace::Trace;

/// One labelled case of a fit: the trace, its pipeline verdict (none: the pipeline failed) and
/// an out-of-fold prior view (never from a prior trained on this trace).
pub struct FitCase<'a> {
    pub trace: &'a Trace,
    pub verdict: Option<&'a LocateVerdict>,
    pub prior: PriorView,
}

/// The candidate weights of one level, in the order ties are broken (smallest LLM weight first:
/// on a tie the answer stays closest to the prior).
pub fn level_grid() -> Vec<LevelWeights> {
    const VALUES: [f64; 9] = [0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 1000.0];
    let mut out = Vec::new();
    for judge in VALUES {
        for evaluators in VALUES {
            for drop_incoherent in [false, true] {
                out.push(LevelWeights {
                    judge,
                    evaluators,
                    drop_incoherent,
                });
            }
        }
    }
    out.sort_by(|a, b| {
        (a.judge + a.evaluators)
            .total_cmp(&(b.judge + b.evaluators))
            .then(a.judge.total_cmp(&b.judge))
            .then(a.drop_incoherent.cmp(&b.drop_incoherent))
    });
    out
}

pub(crate) fn same(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Choose both levels' weights on `cases` (the most hits at each level over [`level_grid`],
/// ties to the earlier candidate). Returns the weights (model and note unset) and the hits.
pub fn fit(cases: &[FitCase]) -> (StackWeights, usize, usize) {
    let grid = level_grid();
    let best = |step_level: bool| -> (LevelWeights, usize) {
        let mut best = (grid[0], 0usize);
        for (i, l) in grid.iter().enumerate() {
            let w = StackWeights {
                format: STACK_FORMAT.into(),
                model: None,
                step: *l,
                agent: *l,
                note: None,
            };
            let hits = cases
                .iter()
                .filter(|c| {
                    let Some(gold) = c.trace.labels.decisive.as_ref() else {
                        return false;
                    };
                    let a = combine(c.trace, c.verdict, Some(&c.prior), &w);
                    if step_level {
                        a.step == Some(gold.step)
                    } else {
                        a.agent.as_deref().is_some_and(|x| same(x, &gold.agent))
                    }
                })
                .count();
            if i == 0 || hits > best.1 {
                best = (*l, hits);
            }
        }
        best
    };
    let (step, step_hits) = best(true);
    let (agent, agent_hits) = best(false);
    (
        StackWeights {
            format: STACK_FORMAT.into(),
            model: None,
            step,
            agent,
            note: None,
        },
        agent_hits,
        step_hits,
    )
}
