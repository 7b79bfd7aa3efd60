//! Credit computation (section 4.3 and 5.1): fusion of the critic score q and the peer-view score
//! p, structural credit per role, temporal credit per round, the EMA temporal credit updated only
//! on informative failures, and the selection rules (bottom-K, threshold).

use crate::config::{RoleSelection, RoundSelection};
use crate::critic::{PeerView, TurnEval};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// c = lambda*q + (1-lambda)*p; when one signal is missing the other is used alone.
pub fn fuse(q: Option<f64>, p: Option<f64>, lambda: f64) -> Option<f64> {
    match (q, p) {
        (Some(q), Some(p)) => Some(lambda * q + (1.0 - lambda) * p),
        (Some(q), None) => Some(q),
        (None, Some(p)) => Some(p),
        (None, None) => None,
    }
}

/// Critic results for one debate run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCritique {
    pub question_id: String,
    /// `turn[t][i]`: AgentTurnEval of role i's utterance in round t (None when not evaluated).
    pub turn: Vec<Vec<Option<TurnEval>>>,
    /// `peer[t]`: the peer-view judge of round t.
    pub peer: Vec<Option<PeerView>>,
    /// `agg[t]`: the aggregator critic of S_t.
    pub agg: Vec<Option<TurnEval>>,
}

impl RunCritique {
    /// Fused c_{i,t} for role i at round t.
    pub fn fused(&self, i: usize, t: usize, lambda: f64) -> Option<f64> {
        let q = self
            .turn
            .get(t)
            .and_then(|r| r.get(i))
            .and_then(|e| e.as_ref())
            .map(TurnEval::q);
        let p = self
            .peer
            .get(t)
            .and_then(|p| p.as_ref())
            .and_then(|p| p.scores.get(i).copied().flatten());
        // The peer view alone does not make a cell when AgentTurnEval was not asked for this round.
        if q.is_none() && self.turn.get(t).and_then(|r| r.get(i)).is_none() {
            return None;
        }
        fuse(q, p, lambda)
    }
}

fn mean(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (s, n) = xs
        .into_iter()
        .fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

/// Role x round credit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreditTable {
    pub roles: Vec<String>,
    /// Row labels (e.g. `round 1`, or phase / window names for imported traces).
    pub rounds: Vec<String>,
    /// `cell[i][t]`: mean fused c_{i,t} over runs.
    pub cell: Vec<Vec<Option<f64>>>,
    /// Runs contributing to each cell.
    pub cell_n: Vec<Vec<usize>>,
    /// Structural credit C_role_i: per run the mean of c_{i,t} over rounds, then the mean over runs.
    pub role_credit: Vec<Option<f64>>,
    /// Temporal credit C_time_t: the mean aggregator critic score q_agg_t over runs.
    pub round_credit: Vec<Option<f64>>,
}

/// Build the credit table from critiques of `rounds` rounds.
pub fn credit_table(
    roles: &[String],
    rounds: usize,
    critiques: &[RunCritique],
    lambda: f64,
) -> CreditTable {
    let n = roles.len();
    let mut cell = vec![vec![None; rounds]; n];
    let mut cell_n = vec![vec![0; rounds]; n];
    let mut role_credit = vec![None; n];
    for i in 0..n {
        for t in 0..rounds {
            let vals: Vec<f64> = critiques
                .iter()
                .filter_map(|c| c.fused(i, t, lambda))
                .collect();
            cell_n[i][t] = vals.len();
            cell[i][t] = mean(vals);
        }
        role_credit[i] = mean(
            critiques
                .iter()
                .filter_map(|c| mean((0..rounds).filter_map(|t| c.fused(i, t, lambda)))),
        );
    }
    let round_credit = (0..rounds)
        .map(|t| {
            mean(
                critiques
                    .iter()
                    .filter_map(|c| c.agg.get(t).and_then(|e| e.as_ref()).map(TurnEval::q)),
            )
        })
        .collect();
    CreditTable {
        roles: roles.to_vec(),
        rounds: (0..rounds).map(|t| format!("round {}", t + 1)).collect(),
        cell,
        cell_n,
        role_credit,
        round_credit,
    }
}

/// An informative failure of round t: the aggregator carried a wrong answer forward while at
/// least one agent of that round was right.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InformativeFailure {
    pub question: crate::data::Mcq,
    /// 0-based round.
    pub round: usize,
    /// `(role, answer text)` of the round.
    pub messages: Vec<(String, String)>,
    pub state: String,
    pub q_agg: f64,
    pub explanation: String,
}

/// EMA temporal credit alpha_t per round (section 5.1, RQ3).
///
/// alpha_t starts at 1 (no evidence against the round). On an informative failure of round t it
/// moves towards the aggregator critic score: alpha_t <- (1-beta)*alpha_t + beta*q_agg_t; other
/// outcomes leave it unchanged. Round t is selected for an aggregator rewrite when alpha_t < tau
/// and at least m informative failures have been observed since its prompt last changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmaCredit {
    pub alpha: Vec<f64>,
    pub beta: f64,
    pub tau: f64,
    pub m: usize,
    /// Informative failures counted since the round's last reset.
    pub failures: Vec<usize>,
    /// The last m informative failures per round (examples for the rewrite).
    pub buffer: Vec<VecDeque<InformativeFailure>>,
    /// alpha trajectories: one entry per update, `(round, alpha after)`.
    pub history: Vec<(usize, f64)>,
}

impl EmaCredit {
    pub fn new(rounds: usize, beta: f64, tau: f64, m: usize) -> Self {
        EmaCredit {
            alpha: vec![1.0; rounds],
            beta,
            tau,
            m,
            failures: vec![0; rounds],
            buffer: vec![VecDeque::new(); rounds],
            history: Vec::new(),
        }
    }

    /// Observe round t of one run. Returns whether alpha_t was updated.
    pub fn observe(
        &mut self,
        t: usize,
        agg_correct: bool,
        any_agent_correct: bool,
        q_agg: f64,
    ) -> bool {
        if t >= self.alpha.len() || agg_correct || !any_agent_correct {
            return false;
        }
        self.alpha[t] = (1.0 - self.beta) * self.alpha[t] + self.beta * q_agg.clamp(0.0, 1.0);
        self.failures[t] += 1;
        self.history.push((t, self.alpha[t]));
        true
    }

    /// Observe and keep the failure as an example (at most m kept, newest last).
    pub fn observe_failure(
        &mut self,
        f: InformativeFailure,
        agg_correct: bool,
        any_agent_correct: bool,
    ) -> bool {
        let t = f.round;
        if !self.observe(t, agg_correct, any_agent_correct, f.q_agg) {
            return false;
        }
        let cap = self.m.max(1);
        let buf = &mut self.buffer[t];
        buf.push_back(f);
        while buf.len() > cap {
            buf.pop_front();
        }
        true
    }

    /// Rounds whose alpha is below tau with at least m informative failures.
    pub fn triggered(&self) -> Vec<usize> {
        (0..self.alpha.len())
            .filter(|&t| self.alpha[t] < self.tau && self.failures[t] >= self.m)
            .collect()
    }

    /// Forget round t's evidence after its aggregator prompt changed.
    pub fn reset(&mut self, t: usize) {
        if t < self.alpha.len() {
            self.alpha[t] = 1.0;
            self.failures[t] = 0;
            self.buffer[t].clear();
        }
    }
}

/// Indices of the `k` lowest values (ties by index); missing values are never selected.
pub fn bottom_k(values: &[Option<f64>], k: usize) -> Vec<usize> {
    let mut idx: Vec<(usize, f64)> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .collect();
    idx.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut out: Vec<usize> = idx.into_iter().take(k).map(|(i, _)| i).collect();
    out.sort_unstable();
    out
}

/// Indices whose value is strictly below `threshold`.
pub fn below_threshold(values: &[Option<f64>], threshold: f64) -> Vec<usize> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.filter(|v| *v < threshold).map(|_| i))
        .collect()
}

/// Apply a role selection rule to structural credits.
pub fn select_roles(credits: &[Option<f64>], rule: RoleSelection) -> Vec<usize> {
    match rule {
        RoleSelection::BottomK { k } => bottom_k(credits, k),
        RoleSelection::Threshold { threshold } => below_threshold(credits, threshold),
        RoleSelection::BottomKBelow { k, threshold } => {
            let masked: Vec<Option<f64>> = credits
                .iter()
                .map(|v| v.filter(|v| *v < threshold))
                .collect();
            bottom_k(&masked, k)
        }
    }
}

/// Apply a round selection rule.
pub fn select_rounds(
    ema: &EmaCredit,
    round_credit: &[Option<f64>],
    rule: RoundSelection,
) -> Vec<usize> {
    match rule {
        RoundSelection::Ema => ema.triggered(),
        RoundSelection::BottomK { k } => bottom_k(round_credit, k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critic::TurnEval;

    fn te(score: u8) -> Option<TurnEval> {
        Some(TurnEval {
            correct: score >= 3,
            label: None,
            explanation: String::new(),
            score,
            abstained: false,
            abstain_reason: None,
            calls: 1,
        })
    }

    #[test]
    fn fusion_and_structural_credit() {
        assert_eq!(fuse(Some(1.0), Some(0.0), 0.25), Some(0.25));
        assert_eq!(fuse(None, Some(0.4), 0.5), Some(0.4));
        assert_eq!(fuse(None, None, 0.5), None);
        let c = RunCritique {
            question_id: "q".into(),
            turn: vec![vec![te(5), te(0)], vec![te(5), te(5)]],
            peer: vec![
                Some(PeerView {
                    scores: vec![Some(0.0), Some(1.0)],
                    abstain_reason: None,
                    calls: 1,
                }),
                None,
            ],
            agg: vec![te(1), te(5)],
        };
        let roles = vec!["a".to_string(), "b".to_string()];
        let tab = credit_table(&roles, 2, &[c], 0.5);
        // role a: round 1 = 0.5*1 + 0.5*0 = 0.5, round 2 = 1 (no peer) -> mean 0.75
        assert_eq!(tab.cell[0], vec![Some(0.5), Some(1.0)]);
        assert_eq!(tab.role_credit[0], Some(0.75));
        // role b: round 1 = 0.5*0 + 0.5*1 = 0.5, round 2 = 1 -> 0.75
        assert_eq!(tab.role_credit[1], Some(0.75));
        assert_eq!(tab.round_credit, vec![Some(0.2), Some(1.0)]);
    }

    #[test]
    fn final_round_only_critique_ignores_unasked_rounds() {
        let c = RunCritique {
            question_id: "q".into(),
            turn: vec![vec![], vec![te(5)]],
            peer: vec![
                Some(PeerView {
                    scores: vec![Some(0.0)],
                    abstain_reason: None,
                    calls: 1,
                }),
                None,
            ],
            agg: vec![None, None],
        };
        let tab = credit_table(&["a".to_string()], 2, &[c], 0.5);
        assert_eq!(tab.cell[0], vec![None, Some(1.0)]);
        assert_eq!(tab.role_credit[0], Some(1.0));
        assert_eq!(tab.round_credit, vec![None, None]);
    }

    #[test]
    fn ema_updates_only_on_informative_failures() {
        let mut e = EmaCredit::new(2, 0.5, 0.5, 2);
        // aggregator right: no update
        assert!(!e.observe(0, true, true, 0.0));
        // aggregator wrong but no agent right: not informative
        assert!(!e.observe(0, false, false, 0.0));
        assert_eq!(e.alpha, vec![1.0, 1.0]);
        // informative: alpha <- 0.5*1 + 0.5*0.2 = 0.6
        assert!(e.observe(0, false, true, 0.2));
        assert!((e.alpha[0] - 0.6).abs() < 1e-12);
        // below tau is not enough without m failures
        assert!(e.triggered().is_empty());
        assert!(e.observe(0, false, true, 0.2)); // 0.5*0.6 + 0.1 = 0.4
        assert!((e.alpha[0] - 0.4).abs() < 1e-12);
        assert_eq!(e.triggered(), vec![0]);
        // enough failures but alpha above tau: not triggered
        let mut f = EmaCredit::new(1, 0.1, 0.5, 1);
        f.observe(0, false, true, 0.0);
        assert!((f.alpha[0] - 0.9).abs() < 1e-12);
        assert!(f.triggered().is_empty());
        e.reset(0);
        assert_eq!((e.alpha[0], e.failures[0]), (1.0, 0));
        assert_eq!(e.history.len(), 2);
    }

    #[test]
    fn ema_buffer_keeps_last_m() {
        let mut e = EmaCredit::new(1, 0.5, 0.5, 2);
        for k in 0..3 {
            let f = InformativeFailure {
                question: crate::data::Mcq {
                    id: format!("q{k}"),
                    question: String::new(),
                    options: vec![],
                    answer: 'A',
                    subject: None,
                },
                round: 0,
                messages: vec![],
                state: String::new(),
                q_agg: 0.0,
                explanation: String::new(),
            };
            e.observe_failure(f, false, true);
        }
        let ids: Vec<&str> = e.buffer[0].iter().map(|f| f.question.id.as_str()).collect();
        assert_eq!(ids, vec!["q1", "q2"]);
        assert_eq!(e.failures[0], 3);
    }

    #[test]
    fn selection_rules() {
        let v = vec![Some(0.9), Some(0.2), None, Some(0.2), Some(0.5)];
        assert_eq!(bottom_k(&v, 1), vec![1]);
        assert_eq!(bottom_k(&v, 2), vec![1, 3]);
        assert_eq!(bottom_k(&v, 3), vec![1, 3, 4]);
        assert_eq!(bottom_k(&v, 10), vec![0, 1, 3, 4]);
        assert_eq!(below_threshold(&v, 0.5), vec![1, 3]);
        assert_eq!(
            select_roles(
                &v,
                RoleSelection::BottomKBelow {
                    k: 3,
                    threshold: 0.3
                }
            ),
            vec![1, 3]
        );
        assert_eq!(
            select_roles(&v, RoleSelection::Threshold { threshold: 0.1 }),
            Vec::<usize>::new()
        );
        let ema = EmaCredit::new(2, 0.3, 0.5, 3);
        assert_eq!(
            select_rounds(
                &ema,
                &[Some(0.3), Some(0.1)],
                RoundSelection::BottomK { k: 1 }
            ),
            vec![1]
        );
        assert!(select_rounds(&ema, &[Some(0.3), Some(0.1)], RoundSelection::Ema).is_empty());
    }
}
