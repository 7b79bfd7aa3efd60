//! Small things a newcomer reads (issue 37 item 8): counts in the right number, and `config show`
//! naming only sources that are in force.

mod common;
use common::*;

#[test]
fn one_imported_trace_is_one_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = data("whowhen/Hand-Crafted/10.json");
    let out = dir.path().join("one.jsonl");
    let o = maslens(
        dir.path(),
        &[
            "import",
            trace.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("imported 1 trace, skipped 0 records (0 warnings, 0 validation errors, 0 duplicate ids)"),
        "{e}"
    );
    let o = maslens(dir.path(), &["validate", out.to_str().unwrap()])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("1 trace: 0 errors, 0 warnings, 0 unreadable records skipped"),
        "{s}"
    );
}

/// The source column of the rows that come from the maslens home (models dir) names
/// `MASLENS_HOME` only when it is set.
#[test]
fn config_show_names_maslens_home_only_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let source = |set: bool| {
        let mut c = maslens(home, &["--json", "config", "show"]);
        if !set {
            c.env_remove("MASLENS_HOME").env("HOME", home);
        }
        let o = c.output().unwrap();
        let rows = stdout_json(&o);
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["setting"] == "models dir")
            .unwrap_or_else(|| panic!("no models dir row: {rows}"))
            .clone();
        row["source"].as_str().unwrap().to_string()
    };
    let unset = source(false);
    assert!(!unset.contains("MASLENS_HOME"), "{unset}");
    assert!(unset.starts_with("default"), "{unset}");
    assert_eq!(source(true), "env MASLENS_HOME");
}

/// A WARN log on stderr that is not a terminal (a pipe here, a log file or CI): plain text, no
/// ANSI colour codes.
#[test]
fn warn_logs_off_a_terminal_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = data("whowhen/Hand-Crafted/10.json");
    let batch = dir.path().join("b.jsonl");
    // The stacked default with a model its weights were not fit for logs a warning.
    let o = maslens(
        dir.path(),
        &[
            "eval",
            "locate",
            trace.to_str().unwrap(),
            "--model",
            "openai:gpt-4o-mini",
            "--batch-export",
            batch.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let e = stderr(&o);
    assert!(e.contains("WARN"), "no warning logged: {e}");
    assert!(!e.contains('\u{1b}'), "colour codes in {e:?}");
}
