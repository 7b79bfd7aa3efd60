//! Native format round-trips exactly: serialize(deserialize(x)) == x for our own output, and
//! every importer's output survives native export + import unchanged.

use maslens_trace::export::{to_json_pretty, to_jsonl_line};
use maslens_trace::import::{parse_record, read_path, Format, RecordCtx};
use maslens_trace::*;
use proptest::prelude::*;
use std::path::PathBuf;

fn shared(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/"
    ))
    .join(rel)
}

fn examples(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/")).join(rel)
}

fn assert_round_trip(t: &Trace) {
    let line = to_jsonl_line(t).unwrap();
    assert!(!line.contains('\n'));
    let back = parse_record(line.as_bytes(), Format::Native, &RecordCtx::memory("mem"))
        .unwrap()
        .trace;
    assert_eq!(&back, t);
    assert_eq!(to_jsonl_line(&back).unwrap(), line);
    // Auto-detection recognises native output too, and pretty JSON reads back the same.
    let auto = parse_record(line.as_bytes(), Format::Auto, &RecordCtx::memory("mem")).unwrap();
    assert_eq!(&auto.trace, t);
    let pretty = to_json_pretty(t).unwrap();
    let back = parse_record(pretty.as_bytes(), Format::Auto, &RecordCtx::memory("mem")).unwrap();
    assert_eq!(&back.trace, t);
}

#[test]
fn imported_real_data_round_trips() {
    let mut n = 0;
    for p in ["whowhen", "aegis/sample.jsonl"] {
        for item in read_path(&shared(p), Format::Auto) {
            assert_round_trip(&item.unwrap().trace);
            n += 1;
        }
    }
    assert_eq!(n, 98 + 5);
}

#[test]
fn examples_import_cleanly_and_round_trip() {
    let mut n = 0;
    for item in read_path(&examples(""), Format::Auto) {
        // OpenTelemetry exports are read with --otlp (maslens-otlp, tested there and in the CLI);
        // the trace reader says so.
        let imp = match item {
            Err(e) if e.file.contains("examples/otlp/") => {
                assert!(e.message.contains("--otlp"), "{e}");
                continue;
            }
            // Inputs to other commands (GRPO groups, batch requests) are not traces; the reader says
            // it cannot tell the format.
            Err(e) if e.file.contains("examples/inputs/") => {
                assert!(e.message.contains("cannot detect the format"), "{e}");
                continue;
            }
            item => item.unwrap(),
        };
        assert!(
            imp.diagnostics.is_empty(),
            "{}: {:?}",
            imp.trace.id,
            imp.diagnostics
        );
        assert_round_trip(&imp.trace);
        n += 1;
    }
    assert!(n >= 6, "{n}");
    // The native example is stored byte-for-byte as we write it.
    let text = std::fs::read_to_string(examples("native.jsonl")).unwrap();
    for line in text.lines() {
        let t = parse_record(line.as_bytes(), Format::Native, &RecordCtx::memory("x"))
            .unwrap()
            .trace;
        assert_eq!(to_jsonl_line(&t).unwrap(), line);
    }
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 _()\\->]{0,12}",
        any::<String>(),
        Just(String::new()),
        Just("Orchestrator (-> WebSurfer)".to_string()),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn trace() -> impl Strategy<Value = Trace> {
    (
        text(),
        text(),
        prop::option::of(text()),
        prop_oneof![
            Just(Outcome::Success),
            Just(Outcome::Failure),
            Just(Outcome::Unknown)
        ],
        prop::collection::vec((text(), 0..4u8, prop::option::of(text())), 0..4),
        prop::collection::vec(
            (
                text(),
                text(),
                prop::option::of(0..10u32),
                prop::option::of(any::<u64>()),
                prop::collection::vec((prop::option::of(text()), text(), text()), 0..2),
            ),
            0..6,
        ),
        prop::option::of((text(), 0..8usize, prop::option::of(text()))),
        prop::collection::vec(
            (
                0..8usize,
                text(),
                prop::option::of(any::<f64>().prop_filter("finite", |f| f.is_finite())),
            ),
            0..2,
        ),
        prop::collection::btree_map(text(), json_value(), 0..3),
    )
        .prop_map(
            |(id, task, gt, outcome, agents, steps, decisive, implicit, meta)| {
                let mut t = Trace::new(id);
                t.task = task;
                t.ground_truth = gt;
                t.outcome = outcome;
                for (name, kind, sp) in agents {
                    t.agents.push(Agent {
                        name,
                        kind: [
                            AgentKind::Worker,
                            AgentKind::Orchestrator,
                            AgentKind::Tool,
                            AgentKind::Human,
                        ][kind as usize],
                        role: None,
                        system_prompt: sp,
                    });
                }
                for (i, (agent, content, round, tokens, calls)) in steps.into_iter().enumerate() {
                    t.steps.push(Step {
                        index: i,
                        speaker: format!("{agent} (thought)"),
                        agent,
                        content,
                        round,
                        tokens,
                        tool_calls: calls
                            .into_iter()
                            .map(|(id, name, arguments)| ToolCall {
                                id,
                                name,
                                arguments,
                            })
                            .collect(),
                        ..Step::default()
                    });
                }
                t.labels.decisive = decisive.map(|(agent, step, reason)| DecisiveLabel {
                    agent,
                    step,
                    reason,
                });
                for (step, agent, severity) in implicit {
                    t.labels.implicit.push(ImplicitLabel {
                        step,
                        agent,
                        error_type: "factual_error".into(),
                        absorption: None,
                        severity,
                        description: None,
                    });
                }
                t.metadata = meta.into_iter().collect();
                t
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn native_round_trips_exactly(t in trace()) {
        let line = to_jsonl_line(&t).unwrap();
        let back = parse_record(line.as_bytes(), Format::Native, &RecordCtx::memory("p")).unwrap().trace;
        prop_assert_eq!(&back, &t);
        prop_assert_eq!(to_jsonl_line(&back).unwrap(), line);
    }
}
