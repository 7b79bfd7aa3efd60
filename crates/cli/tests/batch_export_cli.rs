//! `--batch-export FILE` on the LLM-backed commands: nothing is sent (no key, no network), the
//! run ends with exit 0 and one line saying how many calls went to FILE and what to do next,
//! with no accuracy report and no `error:` line for the deferred cases.

mod common;
use common::*;

use std::path::Path;
use std::process::Output;

/// The export line of a run, checked against the file it names: `N calls exported to FILE; ...`.
fn exported_line(o: &Output, file: &Path) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        !e.lines().any(|l| l.starts_with("error:")),
        "an error line in export mode: {e}"
    );
    let line = e
        .lines()
        .find(|l| l.contains(" exported to "))
        .unwrap_or_else(|| panic!("no export line: {e}"))
        .to_string();
    let n: usize = line
        .split(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("the line does not start with a count: {line:?}"));
    let want = format!(
        "{n} call{} exported to {}; run `maslens batch import OUTPUT.jsonl` then rerun this command",
        if n == 1 { "" } else { "s" },
        file.display()
    );
    assert!(line.starts_with(&want), "{line:?} is not {want:?}...");
    let lines = std::fs::read_to_string(file).unwrap();
    assert_eq!(
        lines.lines().count(),
        n,
        "{line:?} but the file has {lines}"
    );
    assert!(n > 0, "{line:?}");
    line
}

#[test]
fn batch_export_ends_cleanly_with_one_line_and_the_rounds_left() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let trace = data("whowhen/Hand-Crafted/10.json");
    let trace = trace.to_str().unwrap();
    let file = home.join("batch.jsonl");
    let f = file.to_str().unwrap();
    let model = ["--model", "openai:gpt-4o-mini", "--batch-export", f];

    // The Judge alone: one round, nothing said about more.
    let mut args = vec!["locate", trace, "--method", "llm", "--variant", "judge"];
    args.extend(model);
    let o = maslens(home, &args).output().unwrap();
    let line = exported_line(&o, &file);
    assert!(!line.contains("round"), "{line:?}");
    assert!(
        o.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&o.stdout)
    );

    // Judge then Evaluators (the default variant), under the stacked default: more rounds follow.
    let mut args = vec!["locate", trace];
    args.extend(model);
    let o = maslens(home, &args).output().unwrap();
    let line = exported_line(&o, &file);
    assert!(
        line.contains("the Evaluators' calls need the Judge's answers: 1 more round, at most 3"),
        "{line:?}"
    );

    // eval locate: no accuracy report, exit 0.
    let ds = format!("whowhen:{}", data("whowhen").display());
    let mut args = vec![
        "eval",
        "locate",
        &ds,
        "--subset",
        "Hand-Crafted/",
        "--limit",
        "2",
    ];
    args.extend(model);
    let o = maslens(home, &args).output().unwrap();
    exported_line(&o, &file);
    assert!(
        o.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&o.stdout)
    );

    // scan and credit: no empty report or table of 0 traces, no "problem:" for deferred ones.
    for cmd in ["scan", "credit"] {
        let mut args = vec![cmd, trace];
        args.extend(model);
        let o = maslens(home, &args).output().unwrap();
        exported_line(&o, &file);
        assert!(
            o.stdout.is_empty(),
            "{cmd}: {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
        let e = stderr(&o);
        assert!(
            !e.contains("warning:") && !e.contains("problem:"),
            "{cmd}: {e}"
        );
    }
}
