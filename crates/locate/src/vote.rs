//! Confidence-weighted vote over candidate (agent, step) locations (AgentLocate eq. 3-4).
//!
//! `A(i, t) = sum_h w_h * c_h * 1{(i_h, t_h) = (i, t)}` with `c_h` clamped to `[0, 1]` (NaN counts
//! as 0) and `w_h = 1` for evaluators; an optional external prior over steps enters as extra
//! soft ballots with weight `w_prior` (see [`prior_ballots`]). The winner is `argmax A`.
//!
//! **Tie-break** (deterministic and independent of ballot order): among the pairs with the
//! highest support,
//! 1. the pair equal to the preferred location (the Judge's hypothesis), if it is among them;
//! 2. else the pair backed by more ballots;
//! 3. else the earliest step (the decisive failure is the *earliest* decisive step);
//! 4. else the agent name in byte order.
//!
//! Support is summed per pair in a canonical order (contributions sorted), so permuting the
//! ballots gives bit-identical scores.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One vote for a location.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ballot {
    pub agent: String,
    pub step: usize,
    /// Self-reported confidence `c_h` in `[0, 1]` (clamped).
    pub confidence: f64,
    /// Voter weight (1 for evaluators).
    pub weight: f64,
}

impl Ballot {
    /// An evaluator ballot (weight 1).
    pub fn new(agent: impl Into<String>, step: usize, confidence: f64) -> Self {
        Ballot {
            agent: agent.into(),
            step,
            confidence,
            weight: 1.0,
        }
    }

    fn score(&self) -> f64 {
        let c = if self.confidence.is_nan() {
            0.0
        } else {
            self.confidence.clamp(0.0, 1.0)
        };
        let w = if self.weight.is_nan() {
            0.0
        } else {
            self.weight.max(0.0)
        };
        c * w
    }
}

/// Aggregate support of one candidate location.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Support {
    pub agent: String,
    pub step: usize,
    /// `A(i, t)`.
    pub score: f64,
    /// Ballots cast for this pair.
    pub ballots: usize,
}

/// Result of a vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VoteOutcome {
    /// The winning (agent, step); `None` when there were no ballots.
    pub winner: Option<(String, usize)>,
    /// Every candidate with its support, best first (in tie-break order).
    pub support: Vec<Support>,
    /// Whether more than one pair shared the highest support.
    pub tied: bool,
    /// Which tie-break rule decided, when `tied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie_break: Option<String>,
}

impl VoteOutcome {
    /// Support of the winner divided by the total support (0 when nothing was supported).
    pub fn winner_share(&self) -> f64 {
        let total: f64 = self.support.iter().map(|s| s.score).sum();
        match self.support.first() {
            Some(best) if total > 0.0 => best.score / total,
            _ => 0.0,
        }
    }
}

/// Soft ballots from an external prior distribution over steps: step `t` votes for
/// `(agent_of(t), t)` with confidence `p(t)` and weight `weight`. Steps whose acting agent is
/// unknown are skipped.
pub fn prior_ballots(probs: &[(String, usize, f64)], weight: f64) -> Vec<Ballot> {
    probs
        .iter()
        .map(|(agent, step, p)| Ballot {
            agent: agent.clone(),
            step: *step,
            confidence: *p,
            weight,
        })
        .collect()
}

/// Confidence-weighted vote (eq. 3-4) with the documented tie-break; `prefer` is the Judge's
/// hypothesis, if any.
pub fn vote(ballots: &[Ballot], prefer: Option<(&str, usize)>) -> VoteOutcome {
    let mut by_pair: BTreeMap<(String, usize), Vec<f64>> = BTreeMap::new();
    for b in ballots {
        by_pair
            .entry((b.agent.clone(), b.step))
            .or_default()
            .push(b.score());
    }
    let mut support: Vec<Support> = by_pair
        .into_iter()
        .map(|((agent, step), mut scores)| {
            scores.sort_by(|a, b| a.total_cmp(b));
            Support {
                agent,
                step,
                score: scores.iter().sum(),
                ballots: scores.len(),
            }
        })
        .collect();
    let is_pref = |s: &Support| prefer.is_some_and(|(a, t)| s.agent == a && s.step == t);
    support.sort_by(|x, y| {
        y.score
            .total_cmp(&x.score)
            .then_with(|| is_pref(y).cmp(&is_pref(x)))
            .then_with(|| y.ballots.cmp(&x.ballots))
            .then_with(|| x.step.cmp(&y.step))
            .then_with(|| x.agent.cmp(&y.agent))
    });
    let Some(best) = support.first() else {
        return VoteOutcome {
            winner: None,
            support,
            tied: false,
            tie_break: None,
        };
    };
    let tied_with: Vec<&Support> = support[1..]
        .iter()
        .filter(|s| s.score == best.score)
        .collect();
    let tied = !tied_with.is_empty();
    let tie_break = tied.then(|| {
        if is_pref(best) {
            "judge hypothesis".to_string()
        } else if tied_with.iter().all(|s| s.ballots < best.ballots) {
            "more ballots".to_string()
        } else if tied_with
            .iter()
            .all(|s| s.step > best.step || s.ballots < best.ballots)
        {
            "earliest step".to_string()
        } else {
            "agent name order".to_string()
        }
    });
    VoteOutcome {
        winner: Some((best.agent.clone(), best.step)),
        support,
        tied,
        tie_break,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn highest_confidence_sum_wins() {
        // Two weak votes (0.4 + 0.4 = 0.8) beat one strong vote (0.7).
        let b = vec![
            Ballot::new("A", 3, 0.4),
            Ballot::new("A", 3, 0.4),
            Ballot::new("B", 1, 0.7),
        ];
        let out = vote(&b, None);
        assert_eq!(out.winner, Some(("A".into(), 3)));
        assert!(!out.tied);
        assert!((out.support[0].score - 0.8).abs() < 1e-12);
        assert!((out.winner_share() - 0.8 / 1.5).abs() < 1e-12);
    }

    #[test]
    fn tie_prefers_judge_then_ballots_then_earliest_step_then_name() {
        let b = vec![Ballot::new("B", 5, 0.5), Ballot::new("A", 7, 0.5)];
        let out = vote(&b, Some(("A", 7)));
        assert_eq!(out.winner, Some(("A".into(), 7)));
        assert_eq!(out.tie_break.as_deref(), Some("judge hypothesis"));
        let out = vote(&b, None);
        assert_eq!(out.winner, Some(("B".into(), 5)));
        assert_eq!(out.tie_break.as_deref(), Some("earliest step"));
        let b = vec![Ballot::new("B", 2, 0.5), Ballot::new("A", 2, 0.5)];
        assert_eq!(vote(&b, None).winner, Some(("A".into(), 2)));
        assert_eq!(
            vote(&b, None).tie_break.as_deref(),
            Some("agent name order")
        );
        let b = vec![
            Ballot::new("B", 9, 0.25),
            Ballot::new("B", 9, 0.25),
            Ballot::new("A", 1, 0.5),
        ];
        let out = vote(&b, None);
        assert_eq!(out.winner, Some(("B".into(), 9)));
        assert_eq!(out.tie_break.as_deref(), Some("more ballots"));
    }

    #[test]
    fn clamps_and_ignores_nan_and_handles_empty() {
        let b = vec![
            Ballot::new("A", 1, 7.0),
            Ballot::new("B", 0, f64::NAN),
            Ballot::new("C", 2, -1.0),
        ];
        let out = vote(&b, None);
        assert_eq!(out.winner, Some(("A".into(), 1)));
        assert_eq!(out.support[0].score, 1.0);
        assert_eq!(vote(&[], None).winner, None);
    }

    #[test]
    fn prior_ballots_are_weighted() {
        let mut b = vec![Ballot::new("A", 1, 0.6)];
        b.extend(prior_ballots(
            &[("B".into(), 4, 0.9), ("A".into(), 1, 0.1)],
            1.0,
        ));
        assert_eq!(vote(&b, None).winner, Some(("B".into(), 4)));
        let mut b = vec![Ballot::new("A", 1, 0.6)];
        b.extend(prior_ballots(
            &[("B".into(), 4, 0.9), ("A".into(), 1, 0.1)],
            0.5,
        ));
        assert_eq!(vote(&b, None).winner, Some(("A".into(), 1)));
    }

    fn ballot() -> impl Strategy<Value = Ballot> {
        (0usize..3, 0usize..4, 0.0f64..=1.0)
            .prop_map(|(a, t, c)| Ballot::new(["A", "B", "C"][a], t, c))
    }

    proptest! {
        #[test]
        fn permutation_invariant(bs in proptest::collection::vec(ballot(), 0..8), seed in any::<u64>()) {
            let mut shuffled = bs.clone();
            // Deterministic Fisher-Yates driven by the proptest seed.
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let j = (s >> 33) as usize % (i + 1);
                shuffled.swap(i, j);
            }
            prop_assert_eq!(vote(&bs, Some(("A", 1))), vote(&shuffled, Some(("A", 1))));
            prop_assert_eq!(vote(&bs, None), vote(&shuffled, None));
        }

        #[test]
        fn raising_winner_confidence_keeps_it_winning(bs in proptest::collection::vec(ballot(), 1..8), bump in 0.0f64..1.0) {
            let out = vote(&bs, None);
            let winner = out.winner.clone().unwrap();
            let mut raised = bs.clone();
            for b in raised.iter_mut() {
                if (b.agent.clone(), b.step) == winner {
                    b.confidence = (b.confidence + bump).min(1.0);
                }
            }
            prop_assert_eq!(vote(&raised, None).winner, Some(winner));
        }

        #[test]
        fn winner_has_maximal_support(bs in proptest::collection::vec(ballot(), 1..8)) {
            let out = vote(&bs, None);
            let best = out.support[0].score;
            prop_assert!(out.support.iter().all(|s| s.score <= best));
            let (a, t) = out.winner.unwrap();
            prop_assert_eq!((&out.support[0].agent, out.support[0].step), (&a, t));
        }

        #[test]
        fn tie_break_is_earliest_step_among_equal_single_ballots(steps in proptest::collection::btree_set(0usize..50, 2..6), c in 0.01f64..1.0) {
            let bs: Vec<Ballot> = steps.iter().rev().map(|&t| Ballot::new("X", t, c)).collect();
            let out = vote(&bs, None);
            prop_assert!(out.tied);
            prop_assert_eq!(out.winner.unwrap().1, *steps.iter().next().unwrap());
        }
    }
}
