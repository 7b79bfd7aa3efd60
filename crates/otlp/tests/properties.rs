//! Properties of span assembly over generated span sets (random parents, cycles included, random
//! conventions and attribute shapes): it never panics, a run's trace does not depend on the order
//! spans arrive in or on repeats, and every trace it builds is well formed.

use maslens_otlp::assemble::traces;
use maslens_otlp::span::SpanRecord;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn attrs() -> impl Strategy<Value = Map<String, Value>> {
    let key = prop_oneof![
        Just("gen_ai.operation.name"),
        Just("gen_ai.agent.name"),
        Just("agent.name"),
        Just("openinference.span.kind"),
        Just("gen_ai.output.messages"),
        Just("gen_ai.input.messages"),
        Just("llm.output_messages.0.message.content"),
        Just("llm.output_messages.1.message.tool_calls.0.tool_call.function.name"),
        Just("gen_ai.completion.0.content"),
        Just("gen_ai.tool.name"),
        Just("gen_ai.conversation.id"),
        Just("graph.node.id"),
        Just("output.value"),
        Just("gen_ai.system_instructions"),
    ];
    let value = prop_oneof![
        prop_oneof![
            Just("chat"),
            Just("execute_tool"),
            Just("invoke_agent"),
            Just("LLM"),
            Just("TOOL"),
            Just("AGENT"),
            Just("A"),
            Just("B"),
            Just("c1"),
            Just("[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"x\"}]}]"),
            Just("[{\"role\":\"user\",\"parts\":[{\"type\":\"tool_call\",\"name\":\"t\"}]}]"),
            Just("[1, {\"parts\": 3}]"),
            Just("{not json"),
        ]
        .prop_map(|s| json!(s)),
        any::<i64>().prop_map(|i| json!(i)),
        Just(json!([{"role": "assistant", "parts": [{"type": "text", "content": 5}]}])),
        Just(json!({"nested": [null, true]})),
    ];
    proptest::collection::btree_map(key, value, 0..6)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn spans() -> impl Strategy<Value = Vec<SpanRecord>> {
    proptest::collection::vec(
        (
            0u8..3,
            0u8..12,
            proptest::option::of(0u8..12),
            0u64..50,
            attrs(),
            any::<bool>(),
        ),
        0..14,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .map(|(t, id, parent, start, attributes, err)| SpanRecord {
                trace_id: format!("{:032x}", u128::from(t) + 1),
                span_id: format!("{:016x}", u64::from(id) + 1),
                parent_span_id: parent.map(|p| format!("{:016x}", u64::from(p) + 1)),
                name: format!("span {id}"),
                start_ns: start,
                end_ns: start + 5,
                error: err.then(|| "boom".to_string()),
                attributes,
                events: Vec::new(),
                service: Some("svc".into()),
            })
            .collect()
    })
}

/// One copy per (trace id, span id), as a store keeps them: the first copy wins.
fn dedup(spans: &[SpanRecord]) -> Vec<SpanRecord> {
    let mut seen = std::collections::HashSet::new();
    spans
        .iter()
        .filter(|s| seen.insert((s.trace_id.clone(), s.span_id.clone())))
        .cloned()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn assembly_is_total_order_free_and_well_formed(spans in spans(), seed in any::<u64>()) {
        let unique = dedup(&spans);
        let once = traces(&unique);
        // Arrival order and repeats do not matter.
        let mut shuffled = unique.clone();
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(i as u64 + 7) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        shuffled.extend(unique.iter().take(3).cloned());
        prop_assert_eq!(traces(&shuffled), once.clone());
        for t in &once {
            for (i, s) in t.steps.iter().enumerate() {
                prop_assert_eq!(s.index, i);
                prop_assert!(t.agent(&s.agent).is_some(), "step agent {} is listed", s.agent);
                prop_assert!(s.span.is_some());
            }
            let errors = maslens_trace::validate(t)
                .into_iter()
                .filter(|d| d.severity == maslens_trace::Severity::Error)
                .count();
            prop_assert_eq!(errors, 0);
        }
    }
}
