//! IF-GRPO advantages (MASIF eq. 1-4, appendix D.1).
//!
//! Per group: A_i^GRPO = (y_i - mean(y)) / (s_y + eps) with the sample standard deviation
//! (n - 1) and eps = 1e-6. Only mixed-outcome groups are shaped; all-success and all-failure
//! groups get zero advantage. Among successes S with IF costs C_i,
//! z_i = (c_max - C_i) / (c_max - c_min) - 1/2, and z_i = 0 when |S| < 2 or all costs are
//! equal. A_i = A_i^GRPO (1 + z_i) for successes, A_i^GRPO for failures.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Epsilon of eq. 1 (appendix D.1).
pub const EPSILON: f64 = 1e-6;

/// One trajectory: its group, id, outcome and IF cost C_i (eq. 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdvantageInput {
    pub group: String,
    pub id: String,
    pub success: bool,
    pub if_cost: f64,
}

/// One output line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdvantageOutput {
    pub group: String,
    pub id: String,
    pub advantage: f64,
}

/// The z_i of eq. 3 for one group's successful traces' costs (zeros when fewer than two or all equal).
pub fn z_scores(success_costs: &[f64]) -> Vec<f64> {
    if success_costs.len() < 2 {
        return vec![0.0; success_costs.len()];
    }
    let cmax = success_costs
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let cmin = success_costs.iter().copied().fold(f64::INFINITY, f64::min);
    // On halves: finite costs may span more than f64 (1e308 and -1e308), where cmax - cmin
    // overflows to infinity; the halves' difference cannot, and halving is exact for normal
    // numbers, so the ratio is the same.
    let (hmax, hmin) = (cmax / 2.0, cmin / 2.0);
    if hmax - hmin <= 0.0 {
        return vec![0.0; success_costs.len()];
    }
    success_costs
        .iter()
        .map(|c| (hmax - c / 2.0) / (hmax - hmin) - 0.5)
        .collect()
}

/// Advantages of one group, in its order (`(success, cost)` pairs).
pub fn group_advantages(items: &[(bool, f64)], eps: f64) -> Vec<f64> {
    let n = items.len();
    let n_succ = items.iter().filter(|(s, _)| *s).count();
    if n_succ == 0 || n_succ == n {
        return vec![0.0; n];
    }
    let ys: Vec<f64> = items
        .iter()
        .map(|(s, _)| if *s { 1.0 } else { 0.0 })
        .collect();
    let ybar = ys.iter().sum::<f64>() / n as f64;
    // Mixed group has n >= 2, so the sample std exists and is > 0.
    let sy = maslens_eval::stats::sample_std(&ys).unwrap_or(0.0);
    let costs: Vec<f64> = items.iter().filter(|(s, _)| *s).map(|(_, c)| *c).collect();
    let z = z_scores(&costs);
    let mut zi = z.into_iter();
    ys.iter()
        .map(|y| {
            let a = (y - ybar) / (sy + eps);
            if *y > 0.5 {
                a * (1.0 + zi.next().unwrap_or(0.0))
            } else {
                a
            }
        })
        .collect()
}

/// Errors in advantage input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("record {record} (group {group:?}, id {id:?}): field if_cost: {message}")]
pub struct AdvantageInputError {
    pub record: usize,
    pub group: String,
    pub id: String,
    pub message: String,
}

/// IF-GRPO advantages for all inputs, returned in input order.
pub fn if_grpo_advantages(
    inputs: &[AdvantageInput],
) -> Result<Vec<AdvantageOutput>, AdvantageInputError> {
    for (i, x) in inputs.iter().enumerate() {
        if !x.if_cost.is_finite() {
            return Err(AdvantageInputError {
                record: i + 1,
                group: x.group.clone(),
                id: x.id.clone(),
                message: format!("{} is not a finite number", x.if_cost),
            });
        }
    }
    let mut by_group: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, x) in inputs.iter().enumerate() {
        by_group.entry(x.group.as_str()).or_default().push(i);
    }
    let mut adv = vec![0.0; inputs.len()];
    for idx in by_group.values() {
        let items: Vec<(bool, f64)> = idx
            .iter()
            .map(|&i| (inputs[i].success, inputs[i].if_cost))
            .collect();
        for (k, a) in group_advantages(&items, EPSILON).into_iter().enumerate() {
            adv[idx[k]] = a;
        }
    }
    // A trainer reads these as numbers: never hand it a NaN (written as JSON null).
    if let Some((i, x)) = inputs
        .iter()
        .enumerate()
        .find(|(i, _)| !adv[*i].is_finite())
    {
        return Err(AdvantageInputError {
            record: i + 1,
            group: x.group.clone(),
            id: x.id.clone(),
            message: format!(
                "the advantage came out as {} (costs of this group out of range)",
                adv[i]
            ),
        });
    }
    Ok(inputs
        .iter()
        .zip(adv)
        .map(|(x, a)| AdvantageOutput {
            group: x.group.clone(),
            id: x.id.clone(),
            advantage: a,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn costs_spanning_more_than_f64_give_finite_advantages() {
        // Before: cmax - cmin overflowed to infinity and the advantages became NaN (JSON null).
        let out = if_grpo_advantages(&[
            AdvantageInput {
                group: "g".into(),
                id: "a".into(),
                success: true,
                if_cost: 1e308,
            },
            AdvantageInput {
                group: "g".into(),
                id: "b".into(),
                success: true,
                if_cost: -1e308,
            },
            AdvantageInput {
                group: "g".into(),
                id: "c".into(),
                success: false,
                if_cost: 0.0,
            },
        ])
        .expect("finite input");
        assert!(out.iter().all(|o| o.advantage.is_finite()), "{out:?}");
        // The cheaper success is the better one: z = +0.5 vs -0.5.
        assert!(out[1].advantage > out[0].advantage);
        assert_eq!(z_scores(&[1e308, -1e308]), vec![-0.5, 0.5]);
    }

    #[test]
    fn hand_computed_group() {
        // y = [1, 1, 0, 0], costs of successes 0.5 and 1.5.
        // mean 0.5, sample std = sqrt(4 * 0.25 / 3) = sqrt(1/3) = 0.5773502691896258
        // A_grpo(success) = 0.5 / (0.57735... + 1e-6) = 0.8660239...; failure = -0.8660239...
        // z(cost 0.5) = (1.5 - 0.5) / 1.0 - 0.5 = 0.5; z(cost 1.5) = -0.5
        let a = group_advantages(
            &[(true, 0.5), (true, 1.5), (false, 9.0), (false, 0.0)],
            EPSILON,
        );
        let base = 0.5 / (1.0f64 / 3.0).sqrt().add_eps();
        assert!(close(a[0], base * 1.5), "{a:?}");
        assert!(close(a[1], base * 0.5));
        assert!(close(a[2], -base));
        assert!(close(a[3], -base));
        assert!(close(base, 0.8660239037870368), "{base}");
    }

    trait AddEps {
        fn add_eps(self) -> f64;
    }
    impl AddEps for f64 {
        fn add_eps(self) -> f64 {
            self + EPSILON
        }
    }

    #[test]
    fn three_successes_middle_cost() {
        // y = [1,1,1,0]: mean 0.75, s = sqrt((3*0.0625 + 0.5625)/3) = 0.5
        // A_grpo success = 0.25/0.500001, failure = -0.75/0.500001
        // costs 0, 1, 2 -> z = 0.5, 0, -0.5
        let a = group_advantages(
            &[(true, 0.0), (true, 1.0), (true, 2.0), (false, 0.0)],
            EPSILON,
        );
        let s = 0.5 + EPSILON;
        assert!(close(a[0], 0.25 / s * 1.5));
        assert!(close(a[1], 0.25 / s));
        assert!(close(a[2], 0.25 / s * 0.5));
        assert!(close(a[3], -0.75 / s));
    }

    #[test]
    fn special_cases() {
        // all success / all failure: zero
        assert_eq!(
            group_advantages(&[(true, 1.0), (true, 2.0)], EPSILON),
            vec![0.0, 0.0]
        );
        assert_eq!(
            group_advantages(&[(false, 1.0), (false, 2.0)], EPSILON),
            vec![0.0, 0.0]
        );
        assert_eq!(group_advantages(&[(true, 1.0)], EPSILON), vec![0.0]);
        // one success: z = 0, plain GRPO. y=[1,0]: mean .5, s = sqrt(.5) -> 0.5/0.7071078
        let a = group_advantages(&[(true, 3.0), (false, 0.0)], EPSILON);
        assert!(close(a[0], 0.5 / (0.5f64.sqrt() + EPSILON)));
        // equal costs: z = 0
        let a = group_advantages(&[(true, 1.0), (true, 1.0), (false, 0.0)], EPSILON);
        assert!(close(a[0], a[1]));
    }

    #[test]
    fn keeps_input_order_across_groups_and_rejects_nan() {
        let inp = vec![
            AdvantageInput {
                group: "g2".into(),
                id: "a".into(),
                success: true,
                if_cost: 0.0,
            },
            AdvantageInput {
                group: "g1".into(),
                id: "b".into(),
                success: false,
                if_cost: 0.0,
            },
            AdvantageInput {
                group: "g2".into(),
                id: "c".into(),
                success: false,
                if_cost: 0.0,
            },
            AdvantageInput {
                group: "g1".into(),
                id: "d".into(),
                success: false,
                if_cost: 0.0,
            },
        ];
        let out = if_grpo_advantages(&inp).unwrap();
        assert_eq!(
            out.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
        assert!(out[0].advantage > 0.0 && out[2].advantage < 0.0);
        assert_eq!(out[1].advantage, 0.0);
        let mut bad = inp.clone();
        bad[2].if_cost = f64::NAN;
        let e = if_grpo_advantages(&bad).unwrap_err();
        assert_eq!(e.record, 3);
    }

    proptest! {
        #[test]
        fn z_in_range(costs in proptest::collection::vec(0.0f64..20.0, 0..12)) {
            for z in z_scores(&costs) {
                prop_assert!((-0.5..=0.5).contains(&z));
            }
        }

        #[test]
        fn success_never_below_failure(items in proptest::collection::vec((any::<bool>(), 0.0f64..20.0), 1..16)) {
            let a = group_advantages(&items, EPSILON);
            let min_s = items.iter().zip(&a).filter(|((s, _), _)| *s).map(|(_, a)| *a).fold(f64::INFINITY, f64::min);
            let max_f = items.iter().zip(&a).filter(|((s, _), _)| !*s).map(|(_, a)| *a).fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(min_s >= max_f || min_s == f64::INFINITY || max_f == f64::NEG_INFINITY);
            let mixed = items.iter().any(|(s, _)| *s) && items.iter().any(|(s, _)| !*s);
            if mixed {
                prop_assert!(min_s > 0.0 && max_f < 0.0);
            }
        }

        #[test]
        fn all_same_groups_are_zero(n in 1usize..10, s in any::<bool>(), costs in proptest::collection::vec(0.0f64..5.0, 10)) {
            let items: Vec<(bool, f64)> = (0..n).map(|i| (s, costs[i])).collect();
            prop_assert!(group_advantages(&items, EPSILON).iter().all(|a| *a == 0.0));
        }
    }
}
