//! Progress off a terminal (issue 37 item 4): a run longer than a few seconds whose stderr is a
//! pipe (a CI log) says how far it is, with the time left, instead of staying silent.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn a_long_run_off_a_terminal_prints_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    // Every model call takes 0.3 s; the answer is no verdict, so each trace takes its Judge call,
    // a repair and the Evaluators' calls: about 2.5 s a trace, 4 traces, so lines after the 5 s.
    let (base, calls) = stub_model_server_with(Duration::from_millis(300), Some("I cannot tell."));
    let traces: Vec<String> = [10, 12, 14, 19]
        .iter()
        .map(|n| {
            data(&format!("whowhen/Hand-Crafted/{n}.json"))
                .display()
                .to_string()
        })
        .collect();
    let mut args: Vec<&str> = vec!["locate", "--method", "llm", "--cache-mode", "off"];
    args.extend(traces.iter().map(String::as_str));
    let model = format!("openai:x@{base}");
    args.extend(["--model", &model, "--max-retries", "0"]);
    let o = maslens(dir.path(), &args).output().unwrap();
    let e = stderr(&o);
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 4, "{e}");
    let lines: Vec<&str> = e.lines().filter(|l| l.starts_with("locate: ")).collect();
    assert!(
        lines.iter().any(|l| l.contains("/4 done, ")
            && l.contains(" so far, about ")
            && l.ends_with(" left")),
        "a progress line with the time left: {e}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("locate: 4/4 done in ")),
        "the last line says it is done: {e}"
    );
    // --quiet: none.
    args.push("--quiet");
    let o = maslens(dir.path(), &args).output().unwrap();
    assert!(!stderr(&o).contains("locate: "), "{}", stderr(&o));
}
