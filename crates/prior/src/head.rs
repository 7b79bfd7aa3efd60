//! A standardized linear scorer: logistic-regression weights over named features, fit pointwise
//! (smartcore, LBFGS) or listwise (softmax cross-entropy per trace), and the checks a loaded head
//! must pass.

use crate::model::softmax;
use crate::PriorError;
use serde::{Deserialize, Serialize};
use smartcore::linalg::basic::arrays::Array;
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::linear::logistic_regression::{LogisticRegression, LogisticRegressionParameters};
use smartcore::optimization::first_order::lbfgs::LBFGS;
use smartcore::optimization::first_order::FirstOrderOptimizer;
use smartcore::optimization::line_search::Backtracking;
use smartcore::optimization::FunctionOrder;

/// A standardized linear scorer (logistic regression weights over named features).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearHead {
    /// Feature names in row order.
    pub features: Vec<String>,
    pub mean: Vec<f64>,
    pub scale: Vec<f64>,
    pub weights: Vec<f64>,
    pub intercept: f64,
}

impl LinearHead {
    /// Fit an L2-regularized logistic regression (smartcore, LBFGS) on standardized rows.
    pub fn fit(
        names: &[&str],
        xs: &[Vec<f64>],
        ys: &[u32],
        alpha: f64,
    ) -> Result<LinearHead, PriorError> {
        let width = names.len();
        let positives = ys.iter().filter(|y| **y == 1).count();
        if xs.is_empty() || positives == 0 || positives == ys.len() {
            return Err(PriorError::Train(format!(
                "need at least one positive and one negative row ({} rows, {positives} positive)",
                xs.len()
            )));
        }
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(PriorError::Train(format!(
                "alpha must be a finite number >= 0, got {alpha}"
            )));
        }
        let (mean, scale, standardized) = standardize(width, xs);
        let matrix = DenseMatrix::from_2d_vec(&standardized)
            .map_err(|e| PriorError::Train(format!("feature matrix: {e}")))?;
        let params = LogisticRegressionParameters::default().with_alpha(alpha);
        let ys = ys.to_vec();
        let lr: LogisticRegression<f64, u32, DenseMatrix<f64>, Vec<u32>> =
            LogisticRegression::fit(&matrix, &ys, params)
                .map_err(|e| PriorError::Train(format!("logistic regression: {e}")))?;
        // smartcore orders classes ascending, so the coefficients are those of class 1.
        let coef = lr.coefficients();
        let weights: Vec<f64> = (0..width).map(|j| *coef.get((0, j))).collect();
        let intercept = *lr.intercept().get((0, 0));
        if weights.iter().any(|w| !w.is_finite()) || !intercept.is_finite() {
            return Err(PriorError::Train(
                "logistic regression produced non-finite weights".into(),
            ));
        }
        Ok(LinearHead {
            features: names.iter().map(|s| s.to_string()).collect(),
            mean,
            scale,
            weights,
            intercept,
        })
    }

    /// Fit a conditional logit on standardized rows: each group is the rows of one trace with
    /// the positions of its positive rows; the loss is, summed over groups,
    /// `-ln(sum_{pos} softmax(X w)_pos)`, plus `0.5 * alpha * |w|^2`. Minimized with smartcore's
    /// LBFGS (deterministic). There is no intercept: a constant shifts every row of a trace alike.
    pub fn fit_listwise(
        names: &[&str],
        groups: &[(Vec<Vec<f64>>, Vec<usize>)],
        alpha: f64,
    ) -> Result<LinearHead, PriorError> {
        let width = names.len();
        let usable: Vec<&(Vec<Vec<f64>>, Vec<usize>)> = groups
            .iter()
            .filter(|(rows, pos)| {
                rows.len() >= 2 && !pos.is_empty() && pos.iter().all(|p| *p < rows.len())
            })
            .filter(|(rows, pos)| pos.len() < rows.len())
            .collect();
        if usable.is_empty() {
            return Err(PriorError::Train(format!(
                "need at least one trace with two or more rows and a labelled row ({} given)",
                groups.len()
            )));
        }
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(PriorError::Train(format!(
                "alpha must be a finite number >= 0, got {alpha}"
            )));
        }
        let all: Vec<Vec<f64>> = usable.iter().flat_map(|(r, _)| r.iter().cloned()).collect();
        let (mean, scale, standardized) = standardize(width, &all);
        let mut data: Vec<(Vec<Vec<f64>>, Vec<bool>)> = Vec::with_capacity(usable.len());
        let mut at = 0;
        for (rows, pos) in &usable {
            let xs = standardized[at..at + rows.len()].to_vec();
            at += rows.len();
            let mut is_pos = vec![false; rows.len()];
            for p in pos {
                is_pos[*p] = true;
            }
            data.push((xs, is_pos));
        }
        let loss = |w: &Vec<f64>| -> f64 {
            let mut total = 0.5 * alpha * w.iter().map(|x| x * x).sum::<f64>();
            for (xs, is_pos) in &data {
                let z: Vec<f64> = xs.iter().map(|x| dot(w, x)).collect();
                let all = log_sum_exp(z.iter().copied());
                let pos = log_sum_exp(z.iter().zip(is_pos).filter(|(_, p)| **p).map(|(z, _)| *z));
                total += all - pos;
            }
            total
        };
        let grad = |g: &mut Vec<f64>, w: &Vec<f64>| {
            for (gj, wj) in g.iter_mut().zip(w) {
                *gj = alpha * wj;
            }
            for (xs, is_pos) in &data {
                let z: Vec<f64> = xs.iter().map(|x| dot(w, x)).collect();
                let all = softmax(&z);
                let masked: Vec<f64> = z
                    .iter()
                    .zip(is_pos)
                    .map(|(z, p)| if *p { *z } else { f64::NEG_INFINITY })
                    .collect();
                let pos = softmax(&masked);
                for ((x, a), p) in xs.iter().zip(&all).zip(&pos) {
                    let c = a - p;
                    if c != 0.0 {
                        for (gj, xj) in g.iter_mut().zip(x) {
                            *gj += c * xj;
                        }
                    }
                }
            }
        };
        let ls: Backtracking<f64> = Backtracking {
            order: FunctionOrder::THIRD,
            ..Default::default()
        };
        let optimizer = LBFGS::default();
        let result = optimizer.optimize(&loss, &grad, &vec![0.0; width], &ls);
        let weights = result.x;
        if weights.iter().any(|w| !w.is_finite()) {
            return Err(PriorError::Train(
                "conditional logit produced non-finite weights".into(),
            ));
        }
        Ok(LinearHead {
            features: names.iter().map(|s| s.to_string()).collect(),
            mean,
            scale,
            weights,
            intercept: 0.0,
        })
    }

    /// Logit of one row (rows shorter than the head are padded with the mean).
    pub fn logit(&self, row: &[f64]) -> f64 {
        let mut z = self.intercept;
        for (j, x) in row.iter().enumerate().take(self.weights.len()) {
            z += self.weights[j] * (x - self.mean[j]) / self.scale[j];
        }
        z
    }

    pub(crate) fn check(&self, expected: &[&str], head: &str) -> Result<(), String> {
        let names: Vec<&str> = self.features.iter().map(String::as_str).collect();
        if names != expected {
            return Err(format!(
                "field `{head}.features` does not match this build's features ({} vs {}); retrain with `maslens prior train`",
                names.len(),
                expected.len()
            ));
        }
        for (field, v) in [
            ("mean", &self.mean),
            ("scale", &self.scale),
            ("weights", &self.weights),
        ] {
            if v.len() != expected.len() {
                return Err(format!(
                    "field `{head}.{field}` has {} values, expected {}",
                    v.len(),
                    expected.len()
                ));
            }
            if v.iter().any(|x| !x.is_finite()) {
                return Err(format!("field `{head}.{field}` holds a non-finite number"));
            }
        }
        if self.scale.iter().any(|s| *s <= 0.0) {
            return Err(format!("field `{head}.scale` holds a value <= 0"));
        }
        if !self.intercept.is_finite() {
            return Err(format!("field `{head}.intercept` is not finite"));
        }
        Ok(())
    }
}

/// Column means and standard deviations of `xs` (a constant column gets scale 1) and the
/// standardized rows.
fn standardize(width: usize, xs: &[Vec<f64>]) -> (Vec<f64>, Vec<f64>, Vec<Vec<f64>>) {
    let rows = xs.len().max(1) as f64;
    let mut mean = vec![0.0; width];
    for x in xs {
        for (m, v) in mean.iter_mut().zip(x) {
            *m += v / rows;
        }
    }
    let mut scale = vec![0.0; width];
    for x in xs {
        for j in 0..width {
            scale[j] += (x[j] - mean[j]).powi(2) / rows;
        }
    }
    for s in &mut scale {
        *s = if s.sqrt() > 1e-9 { s.sqrt() } else { 1.0 };
    }
    let standardized = xs
        .iter()
        .map(|x| (0..width).map(|j| (x[j] - mean[j]) / scale[j]).collect())
        .collect();
    (mean, scale, standardized)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `ln(sum(exp(z)))`, stable; `-inf` for no values.
fn log_sum_exp(z: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = z.clone().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return max;
    }
    max + z.map(|v| (v - max).exp()).sum::<f64>().ln()
}
