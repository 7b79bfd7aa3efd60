//! Benchmark importers on the sample files in examples/benchmarks/ and on malformed records:
//! each bad record is an error naming file, record and field, and the other records import.

use maslens_trace::import::{parse_record, read_path, Format, RecordCtx};
use maslens_trace::Outcome;
use serde_json::json;
use std::path::{Path, PathBuf};

fn example(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/benchmarks")
        .join(rel)
}

fn write_temp(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn mad_sample_imports_with_trace_level_modes_only() {
    for format in [Format::Mad, Format::Auto] {
        let items: Vec<_> = read_path(&example("mad-sample.jsonl"), format)
            .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let summary: Vec<String> = items
            .iter()
            .map(|i| {
                let t = &i.trace;
                format!(
                    "{} steps={} agent={} outcome={} modes={} unannotated={} source={}",
                    t.id,
                    t.steps.len(),
                    t.steps[0].agent,
                    t.outcome.as_str(),
                    t.metadata["failure_modes"],
                    t.metadata
                        .get("unannotated_modes")
                        .map_or("-".to_string(), |v| v.to_string()),
                    t.source.format,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                "ChatDev_ProgramDev_GPT4o/0 steps=1 agent=ChatDev outcome=failure \
                 modes=[\"FM-2.2\",\"FM-3.2\"] unannotated=- source=mad",
                "MetaGPT_ProgramDev_GPT4o/1 steps=1 agent=MetaGPT outcome=unknown \
                 modes=[] unannotated=- source=mad",
                "AG2_GSM-Plus_GPT4o/2 steps=1 agent=AG2 outcome=failure \
                 modes=[\"FM-3.3\"] unannotated=[\"FM-1.5\",\"FM-2.6\"] source=mad",
            ]
        );
        // No agent or step gold: eval can score neither, and the trace says so.
        assert!(items.iter().all(|i| i.trace.gold().is_none()));
        assert!(items[0].trace.steps[0].content.contains("ChatDev Starts"));
        assert_eq!(items[2].trace.metadata["llm_name"], json!("GPT-4o"));
    }
}

#[test]
fn mad_malformed_records_name_file_record_and_field_and_the_rest_import() {
    let good = std::fs::read_to_string(example("mad-sample.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    let mut bad_mode: serde_json::Value = serde_json::from_str(first).unwrap();
    bad_mode["mast_annotation"]["2.2"] = json!("yes");
    let mut no_trajectory: serde_json::Value = serde_json::from_str(first).unwrap();
    no_trajectory["trace"]
        .as_object_mut()
        .unwrap()
        .remove("trajectory");
    let text = format!("{first}\n{bad_mode}\n{no_trajectory}\n{{\"mast_annotation\": 3, \"trace\": {{}}}}\n{first}\n");
    let (_dir, p) = write_temp("mad.jsonl", &text);
    let items: Vec<_> = read_path(&p, Format::Mad).collect();
    assert_eq!(items.len(), 5);
    assert!(items[0].is_ok() && items[4].is_ok());
    let err = |i: usize| items[i].as_ref().unwrap_err().clone();
    let e = err(1);
    assert!(e.file.ends_with("mad.jsonl"));
    assert_eq!(e.record.as_deref(), Some("line 2"));
    assert_eq!(e.path.as_deref(), Some("mast_annotation.2.2"));
    assert!(e.message.contains("expected 1, 0 or null"), "{e}");
    let e = err(2);
    assert_eq!(e.record.as_deref(), Some("line 3"));
    assert_eq!(e.path.as_deref(), Some("trace"));
    assert!(e.message.contains("trajectory"), "{e}");
    let e = err(3);
    assert_eq!(e.record.as_deref(), Some("line 4"));
    assert!(e.path.is_some(), "{e}");
}

#[test]
fn mad_array_file_is_refused_with_the_conversion_command() {
    let good = std::fs::read_to_string(example("mad-sample.jsonl")).unwrap();
    let array = format!("[\n{}\n]\n", good.trim_end().replace('\n', ",\n"));
    let (_dir, p) = write_temp("MAD_full_dataset.json", &array);
    for format in [Format::Auto, Format::Mad] {
        let items: Vec<_> = read_path(&p, format).collect();
        assert_eq!(items.len(), 1);
        let e = items[0].as_ref().unwrap_err();
        assert!(e.message.contains("jq -c '.[]'"), "{format}: {e}");
    }
}

fn aegis_record() -> serde_json::Value {
    json!({
        "id": "x",
        "input": {
            "query": "q",
            "conversation_history": [
                {"step": 0, "agent_name": "Solver", "content": "a"},
                {"step": 1, "agent_name": "Critic", "content": "b"}
            ],
            "final_output": "No final output available"
        },
        "output": {"faulty_agents": [{"agent_name": "solver", "error_type": "FM-2.4"}]},
        "ground_truth": {"correct_answer": "4", "injected_agents": [], "is_injection_successful": true}
    })
}

#[test]
fn aegis_zero_based_steps_and_placeholder_output() {
    let ctx = RecordCtx::memory("aegis.jsonl");
    let bytes = serde_json::to_vec(&aegis_record()).unwrap();
    let imp = parse_record(&bytes, Format::Aegis, &ctx).unwrap();
    // 0..n-1 source numbering is contiguous: no warning.
    assert!(
        imp.diagnostics.is_empty(),
        "unexpected diagnostics: {:?}",
        imp.diagnostics
    );
    assert_eq!(imp.trace.metadata["source_steps"], json!([0, 1]));
    // The builders' placeholder is no final output.
    assert!(!imp.trace.metadata.contains_key("final_output"));
    assert_eq!(imp.trace.metadata["is_injection_successful"], json!(true));
    assert_eq!(imp.trace.outcome, Outcome::Unknown);
    // Agent-level gold only: no step.
    let gold = imp.trace.gold().unwrap();
    assert_eq!(gold.step, None);
    assert_eq!(gold.agent, None);
    assert_eq!(
        gold.faulty,
        [("Solver".to_string(), Some("FM-2.4".to_string()))]
    );
}

#[test]
fn aegis_gapped_steps_still_warn() {
    let mut rec = aegis_record();
    rec["input"]["conversation_history"][1]["step"] = json!(3);
    let ctx = RecordCtx::memory("aegis.jsonl");
    let imp = parse_record(&serde_json::to_vec(&rec).unwrap(), Format::Aegis, &ctx).unwrap();
    assert!(imp
        .diagnostics
        .iter()
        .any(|d| d.message.contains("not 1..n")));
}
