//! Statistics checked against numpy/scipy reference values.
//! The expected numbers were produced by `python3 crates/eval/tests/reference_stats.py`
//! (numpy 2 / scipy 1.x) and pasted here; the data sets below are the script's.

use maslens_eval::stats::*;

const X: [f64; 20] = [
    3.1, 0.4, 2.2, 5.9, 1.0, 2.2, 4.4, 0.0, 3.3, 1.7, 2.8, 6.1, 0.9, 2.2, 3.0, 4.8, 1.1, 0.2, 2.5,
    3.9,
];
const Y: [f64; 20] = [
    2.0, 1.0, 2.0, 6.0, 1.5, 3.0, 4.0, 0.5, 3.0, 2.0, 2.0, 5.0, 1.0, 2.0, 3.5, 4.0, 1.0, 0.5, 2.0,
    6.0,
];
const P: [u8; 30] = [
    1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0,
];
const U: [(&str, f64, f64); 16] = [
    ("t0", 0.0, 1.0),
    ("t0", 0.0, 0.5),
    ("t1", 0.0, 0.0),
    ("t2", 1.0, 1.0),
    ("t3", 0.0, 1.0),
    ("t3", 0.0, 0.0),
    ("t3", 0.5, 1.0),
    ("t4", 0.0, 0.0),
    ("t5", 0.0, 1.0),
    ("t6", 0.0, 0.0),
    ("t7", 1.0, 0.0),
    ("t8", 0.0, 1.0),
    ("t9", 0.0, 0.5),
    ("t9", 0.0, 1.0),
    ("t10", 0.0, 0.0),
    ("t11", 0.0, 1.0),
];

fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} (tol {tol})"
    );
}

#[test]
fn mean_std_quantiles_match_numpy() {
    assert_close(mean(&X).unwrap(), 2.585, 1e-12, "mean");
    assert_close(
        sample_std(&X).unwrap(),
        1.7800872243560957,
        1e-12,
        "std ddof=1",
    );
    let qs = [0.0, 0.025, 0.1, 0.5, 0.9, 0.975, 1.0];
    let want = [
        0.0,
        0.09500000000000001,
        0.38000000000000006,
        2.35,
        4.910000000000001,
        6.005,
        6.1,
    ];
    for (q, w) in qs.iter().zip(want) {
        assert_close(
            quantile(&X, *q).unwrap(),
            w,
            1e-12,
            &format!("quantile {q}"),
        );
    }
}

#[test]
fn spearman_matches_scipy() {
    assert_close(
        spearman(&X, &Y).unwrap(),
        0.9331311129209522,
        1e-12,
        "spearman X,Y",
    );
    assert_close(
        spearman(&[1.0, 1.0, 2.0, 2.0, 3.0], &[1.0, 2.0, 2.0, 3.0, 3.0]).unwrap(),
        0.8055555555555555,
        1e-12,
        "spearman ties",
    );
    let want = [
        9.5, 4.0, 9.5, 19.5, 6.0, 13.5, 16.5, 1.5, 13.5, 9.5, 9.5, 18.0, 4.0, 9.5, 15.0, 16.5, 4.0,
        1.5, 9.5, 19.5,
    ];
    assert_eq!(average_ranks(&Y), want.to_vec());
}

// Bootstrap intervals: numpy reference with 200,000 resamples; ours uses 5,000 resamples with
// a different generator, so they agree up to Monte-Carlo error (tolerances below are a few
// times that error; proportions move in steps of 1/30).
#[test]
fn bootstrap_mean_matches_numpy_reference() {
    let ci = bootstrap_mean_ci(&X, DEFAULT_RESAMPLES, 0.95, 42).unwrap();
    assert_close(ci.estimate, 2.585, 1e-12, "estimate");
    assert_close(ci.lo, 1.8450000000000002, 0.04, "lo");
    assert_close(ci.hi, 3.3649999999999998, 0.04, "hi");
    assert_eq!(ci.resamples, DEFAULT_RESAMPLES);
}

#[test]
fn bootstrap_proportion_matches_numpy_reference() {
    let p: Vec<bool> = P.iter().map(|&v| v == 1).collect();
    let ci = bootstrap_proportion_ci(&p, DEFAULT_RESAMPLES, 0.95, 42).unwrap();
    assert_close(ci.estimate, 13.0 / 30.0, 1e-12, "estimate");
    assert_close(ci.lo, 0.26666666666666666, 0.034, "lo");
    assert_close(ci.hi, 0.6, 0.034, "hi");
}

#[test]
fn paired_cluster_bootstrap_matches_numpy_reference() {
    let units: Vec<PairedUnit> = U
        .iter()
        .map(|(c, a, b)| PairedUnit {
            cluster: c.to_string(),
            a: *a,
            b: *b,
        })
        .collect();
    let ci = paired_cluster_bootstrap(&units, DEFAULT_RESAMPLES, 0.95, 42).unwrap();
    assert_close(ci.estimate, 0.40625, 1e-12, "estimate");
    assert_close(ci.lo, 0.08333333333333331, 0.03, "lo");
    assert_close(ci.hi, 0.6470588235294118, 0.03, "hi");
}
