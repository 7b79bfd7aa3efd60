//! Bad input: one clear error naming file, record and JSON path; the rest of the corpus goes on.

use maslens_trace::import::{read_path, Format};
use maslens_trace::{ImportError, Imported, Severity};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures")).join(name)
}

fn read(name: &str, format: Format) -> Vec<Result<Imported, ImportError>> {
    read_path(&fixture(name), format).collect()
}

fn only_err(name: &str, format: Format) -> ImportError {
    let mut items = read(name, format);
    assert_eq!(items.len(), 1, "{name}");
    match items.remove(0) {
        Err(e) => e,
        Ok(t) => panic!("{name}: expected an error, got {}", t.trace.id),
    }
}

#[test]
fn truncated_json_names_file_and_path() {
    let e = only_err("truncated.json", Format::Auto);
    assert!(e.file.ends_with("fixtures/truncated.json"), "{e}");
    assert_eq!(e.record, None);
    assert_eq!(e.path.as_deref(), Some("history[1]"), "{e}");
    assert!(e.message.contains("invalid JSON: EOF while parsing"), "{e}");
    assert!(e
        .to_string()
        .contains("truncated.json: at history[1]: invalid JSON"));
}

#[test]
fn wrong_type_names_path_and_expectation() {
    let e = only_err("whowhen_bad_type.json", Format::Auto);
    assert_eq!(e.path.as_deref(), Some("history[1].role"), "{e}");
    assert!(
        e.message
            .contains("invalid type: integer `3`, expected a string"),
        "{e}"
    );
}

#[test]
fn unparseable_mistake_step_drops_label_with_error_diagnostic() {
    let items = read("whowhen_bad_step.json", Format::WhoWhen);
    let imp = items.into_iter().next().unwrap().unwrap();
    assert!(imp.trace.labels.decisive.is_none());
    let d = imp
        .diagnostics
        .iter()
        .find(|d| d.path.as_deref() == Some("mistake_step"))
        .expect("a diagnostic at mistake_step");
    assert_eq!(d.severity, Severity::Error);
    assert!(d.message.contains("\"one\""), "{d}");
    assert!(d
        .file
        .as_deref()
        .unwrap()
        .ends_with("whowhen_bad_step.json"));
}

#[test]
fn label_out_of_range_and_wrong_case_are_reported_not_fixed() {
    let imp = read("whowhen_label_range.json", Format::Auto)
        .remove(0)
        .unwrap();
    let label = imp.trace.labels.decisive.as_ref().unwrap();
    assert_eq!((label.agent.as_str(), label.step), ("assistant", 7));
    let msgs: Vec<String> = imp.diagnostics.iter().map(|d| d.to_string()).collect();
    assert!(
        msgs.iter().any(|m| m.starts_with("error:")
            && m.contains("at labels.decisive.step: decisive label step 7 is out of range")),
        "{msgs:#?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("unknown agent `assistant` (did you mean `Assistant`?)")),
        "{msgs:#?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("at steps[1].content: empty content")),
        "{msgs:#?}"
    );
    // Single-line file: the record is line 1.
    assert!(msgs.iter().all(|m| m.contains("line 1")), "{msgs:#?}");
}

#[test]
fn jsonl_goes_on_after_bad_lines() {
    let items = read("mixed.jsonl", Format::Auto);
    assert_eq!(items.len(), 5, "blank line 4 is skipped");
    assert_eq!(items[0].as_ref().unwrap().trace.id, "ok-1");
    let e = items[1].as_ref().unwrap_err();
    assert_eq!(e.record.as_deref(), Some("line 2"));
    assert_eq!(e.path.as_deref(), Some("steps[0].index"), "{e}");
    assert!(e.message.contains("expected a non-negative integer"), "{e}");
    let e = items[2].as_ref().unwrap_err();
    assert_eq!(e.record.as_deref(), Some("line 3"));
    assert!(e.message.contains("EOF while parsing"), "{e}");
    let e = items[3].as_ref().unwrap_err();
    assert_eq!(e.record.as_deref(), Some("line 5"));
    assert!(e.message.contains("unknown field `surprise`"), "{e}");
    assert_eq!(items[4].as_ref().unwrap().trace.id, "ok-2");
}

#[test]
fn aegis_missing_and_wrong_fields() {
    let items = read("aegis_bad.jsonl", Format::Aegis);
    assert_eq!(items.len(), 3);
    assert!(items[0].is_ok());
    let e = items[1].as_ref().unwrap_err();
    assert_eq!(e.record.as_deref(), Some("line 2"));
    assert_eq!(e.path.as_deref(), Some("input"), "{e}");
    assert!(
        e.message.contains("missing field `conversation_history`"),
        "{e}"
    );
    let e = items[2].as_ref().unwrap_err();
    assert_eq!(
        e.path.as_deref(),
        Some("input.conversation_history[0].agent_name"),
        "{e}"
    );
}

#[test]
fn undetectable_empty_scalar_and_non_utf8_inputs() {
    let e = only_err("unknown.json", Format::Auto);
    assert!(e.message.contains("cannot detect the format"), "{e}");
    assert!(e.message.contains("--format"), "{e}");
    let e = only_err("empty.json", Format::Auto);
    assert!(e.message.contains("empty file"), "{e}");
    let e = only_err("scalar.json", Format::Auto);
    assert!(e.message.contains("cannot detect"), "{e}");
    let e = only_err("scalar.json", Format::WhoWhen);
    assert!(e.message.contains("expected a JSON object"), "{e}");
    let e = only_err("not_utf8.jsonl", Format::Auto);
    assert_eq!(e.record.as_deref(), Some("line 1"));
    assert!(e.message.contains("invalid UTF-8"), "{e}");
    let e = only_err("not_utf8.jsonl", Format::Native);
    assert!(e.message.contains("not a valid maslens trace"), "{e}");
}

#[test]
fn missing_path_is_an_error_not_a_panic() {
    let items: Vec<_> = read_path(&fixture("does-not-exist.json"), Format::Auto).collect();
    assert_eq!(items.len(), 1);
    let e = items[0].as_ref().unwrap_err();
    assert!(e.message.contains("cannot read"), "{e}");
}

#[cfg(unix)]
#[test]
fn symlink_loops_end() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.jsonl"), "{\"id\":\"x\",\"steps\":[]}\n").unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("loop")).unwrap();
    let items: Vec<_> = read_path(dir.path(), Format::Auto).collect();
    assert_eq!(items.len(), 1, "{items:?}");
}
