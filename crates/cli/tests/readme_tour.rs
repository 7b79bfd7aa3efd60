//! Every command of the README's tour runs, as a user would type it, with the real embedded model
//! (a documented command that fails is a bug). Each line's wall time goes to stderr and to
//! `target/tmp/readme-tour.tsv`; `maslens serve` and `serve-model` must start and keep running
//! for 5 s. The lines `common::tour::RUN_BY` names are run, verbatim, by the end-to-end tests that
//! check their output in depth, not twice. Slow (real model calls): named `e2e_*`; the structural
//! test (every tour line is a maslens command) is fast.
#![cfg(feature = "local")]

mod common;

use common::tour::{self, TourHome};
use std::path::Path;
use std::time::Instant;

#[test]
fn the_tour_is_found_and_every_line_calls_maslens() {
    let lines = tour::lines();
    assert!(lines.len() >= 25, "{lines:#?}");
    for l in &lines {
        assert!(
            l.starts_with("$m "),
            "a tour line that is not a maslens command: {l}"
        );
    }
    // Each line another test runs is in the tour, once.
    for (start, _) in tour::RUN_BY {
        tour::line(start);
    }
}

// In CI: about 5 minutes alone on 2 cores with the embedded model (the per-line times are in
// target/tmp/readme-tour.tsv). `cargo nextest run --workspace -E 'test(e2e_readme_tour)'`.
#[test]
fn e2e_readme_tour_commands_run() {
    let home = TourHome::new();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for line in &tour::lines() {
        if let Some(test) = tour::run_by(line) {
            eprintln!("   (run by {test})  {line}");
            continue;
        }
        let server = line.starts_with("$m serve");
        let script = if server {
            // Must start and still be serving after 5 s (timeout's exit 124).
            format!("timeout 5 {line}")
        } else {
            line.clone()
        };
        let started = Instant::now();
        let out = home.run(&script);
        let secs = started.elapsed().as_secs_f64();
        let code = out.status.code().unwrap_or(-1);
        let ok = if server {
            code == 124
        } else {
            code == 0 || code == 1
        };
        eprintln!("{secs:7.1} s  exit {code}  {line}");
        rows.push(format!("{secs:.1}\t{code}\t{line}"));
        if !ok {
            failures.push(format!(
                "{line}: exit {code}\n{}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .rev()
                    .take(8)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    let tsv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-tour.tsv");
    let _ = std::fs::write(&tsv, rows.join("\n") + "\n");
    assert!(
        failures.is_empty(),
        "README tour commands failed:\n{}",
        failures.join("\n\n")
    );
}
