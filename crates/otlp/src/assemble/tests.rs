//! Hand-written span fixtures in the shapes the conventions define (not framework output;
//! the framework runs are in the server's end-to-end tests).
use super::*;
use crate::span::SpanEvent;
use serde_json::json;

fn span(id: &str, parent: Option<&str>, start: u64, attrs: Value) -> SpanRecord {
    SpanRecord {
        trace_id: "ab".repeat(16),
        span_id: format!("{id:0>16}"),
        parent_span_id: parent.map(|p| format!("{p:0>16}")),
        name: String::new(),
        start_ns: start,
        end_ns: start + 10,
        error: None,
        attributes: attrs.as_object().cloned().unwrap_or_default(),
        events: Vec::new(),
        service: Some("travel-crew".into()),
    }
}

/// A GenAI-convention run: an orchestrator that calls a tool, then hands off to a coder.
fn genai_run() -> Vec<SpanRecord> {
    let out =
        |parts: Value| Value::String(json!([{"role": "assistant", "parts": parts}]).to_string());
    let mut root = span(
        "1",
        None,
        100,
        json!({
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Orchestrator",
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.system_instructions": "[{\"type\":\"text\",\"content\":\"You route work.\"}]"}),
    );
    root.error = Some("budget exceeded".into());
    vec![
        root,
        span(
            "2",
            Some("1"),
            110,
            json!({
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json!([{"role": "user", "parts": [{"type": "text", "content": "Book a flight to Oslo."}]}]).to_string(),
            "gen_ai.output.messages": out(json!([
                {"type": "text", "content": "Searching flights."},
                {"type": "tool_call", "id": "call_1", "name": "search_flights", "arguments": {"to": "OSL"}}])),
            "gen_ai.usage.output_tokens": 12}),
        ),
        span(
            "3",
            Some("1"),
            130,
            json!({
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_flights",
            "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.result": {"flights": 0}}),
        ),
        span(
            "4",
            Some("1"),
            150,
            json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Coder"}),
        ),
        span(
            "5",
            Some("4"),
            160,
            json!({
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": out(json!([{"type": "text", "content": "No flights; I will invent one."}]))}),
        ),
    ]
}

#[test]
fn genai_run_becomes_steps_agents_task_and_outcome() {
    let spans = genai_run();
    let ts = traces(&spans);
    assert_eq!(ts.len(), 1);
    let t = &ts[0];
    assert_eq!(t.id, "conv-7");
    assert_eq!(t.task, "Book a flight to Oslo.");
    assert_eq!(t.outcome, Outcome::Failure, "root span status ERROR");
    let steps: Vec<(&str, &str)> = t
        .steps
        .iter()
        .map(|s| (s.agent.as_str(), s.content.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("Orchestrator", "Searching flights."),
            ("search_flights", "{\"flights\":0}"),
            ("Coder", "No flights; I will invent one."),
        ]
    );
    let call = &t.steps[0].tool_calls[0];
    assert_eq!(
        (
            call.id.as_deref(),
            call.name.as_str(),
            call.arguments.as_str()
        ),
        (Some("call_1"), "search_flights", "{\"to\":\"OSL\"}")
    );
    assert_eq!(t.steps[0].tokens, Some(12));
    assert_eq!(t.steps[1].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(t.steps[1].speaker, "tool:search_flights");
    assert_eq!(t.agent_kind("search_flights"), AgentKind::Tool);
    assert_eq!(t.acting_agents(), ["Orchestrator", "Coder"]);
    assert_eq!(
        t.agent("Orchestrator")
            .and_then(|a| a.system_prompt.as_deref()),
        Some("You route work.")
    );
    let s = t.steps[2].span.as_ref().unwrap();
    assert_eq!(
        (s.span_id.as_str(), s.parent_span_id.as_deref()),
        ("0000000000000005", Some("0000000000000004"))
    );
    assert_eq!(t.group().as_deref(), Some("travel-crew"));
    assert!(t.steps[0]
        .timestamp
        .as_deref()
        .unwrap()
        .starts_with("1970-01-01T00:00:00.000000110"));
    assert_eq!(
        maslens_trace::validate(t)
            .iter()
            .filter(|d| d.severity == maslens_trace::Severity::Error)
            .count(),
        0
    );
}

#[test]
fn arrival_order_and_repeats_do_not_change_the_trace() {
    let spans = genai_run();
    let once = traces(&spans);
    let mut shuffled: Vec<SpanRecord> = spans.iter().rev().cloned().collect();
    shuffled.extend(spans.iter().cloned());
    assert_eq!(traces(&shuffled), once);
    // A late span of the same conversation in another OpenTelemetry trace joins the run.
    let mut late = span(
        "9",
        None,
        500,
        json!({"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv-7",
        "gen_ai.agent.name": "Coder", "gen_ai.output.messages": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Done.\"}]}]"}),
    );
    late.trace_id = "cd".repeat(16);
    shuffled.push(late);
    let grown = traces(&shuffled);
    assert_eq!(grown.len(), 1);
    assert_eq!(grown[0].steps.len(), 4);
    assert_eq!(grown[0].steps[3].content, "Done.");
    assert_eq!(
        grown[0].metadata["otel_trace_ids"].as_array().map(Vec::len),
        Some(2)
    );
}

#[test]
fn span_ids_are_scoped_by_their_trace() {
    // Two OpenTelemetry traces of one conversation that reuse a span id: both calls are steps,
    // and each finds its own parent.
    let chat = |trace: &str, agent_parent: &str, text: &str, start: u64| {
        let mut agent = span(
            agent_parent,
            None,
            start,
            json!({"gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": text, "gen_ai.conversation.id": "c"}),
        );
        let mut call = span(
            "7",
            Some(agent_parent),
            start + 1,
            json!({"gen_ai.operation.name": "chat",
            "gen_ai.output.messages": format!("[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{text}\"}}]}}]")}),
        );
        agent.trace_id = trace.repeat(16);
        call.trace_id = trace.repeat(16);
        [agent, call]
    };
    let mut spans = chat("aa", "1", "Planner", 10).to_vec();
    spans.extend(chat("bb", "2", "Coder", 20));
    let t = &traces(&spans)[0];
    let steps: Vec<(&str, &str)> = t
        .steps
        .iter()
        .map(|s| (s.agent.as_str(), s.content.as_str()))
        .collect();
    assert_eq!(steps, [("Planner", "Planner"), ("Coder", "Coder")]);
}

#[test]
fn openinference_run_with_langgraph_nodes_and_a_parent_cycle() {
    let spans = vec![
        span(
            "a",
            None,
            10,
            json!({"openinference.span.kind": "CHAIN", "input.value": "Summarise the report.", "session.id": "s-1"}),
        ),
        span(
            "b",
            Some("a"),
            20,
            json!({"openinference.span.kind": "CHAIN", "graph.node.id": "researcher"}),
        ),
        span(
            "c",
            Some("b"),
            30,
            json!({
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Calling the reader.",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "t1",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "read_pdf",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{\"path\":\"r.pdf\"}",
            "llm.token_count.completion": "7"}),
        ),
        span(
            "d",
            Some("b"),
            40,
            json!({"openinference.span.kind": "TOOL", "tool.name": "read_pdf", "output.value": "404"}),
        ),
        span(
            "e",
            Some("f"),
            50,
            json!({"openinference.span.kind": "AGENT", "agent.name": "writer"}),
        ),
        span(
            "f",
            Some("e"),
            55,
            json!({"openinference.span.kind": "LLM", "output.value": "The report says nothing."}),
        ),
    ];
    let t = &traces(&spans)[0];
    assert_eq!(t.id, "s-1");
    assert_eq!(t.task, "Summarise the report.");
    let steps: Vec<(&str, &str)> = t
        .steps
        .iter()
        .map(|s| (s.agent.as_str(), s.content.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("researcher", "Calling the reader."),
            ("read_pdf", "404"),
            ("writer", "The report says nothing."),
        ]
    );
    assert_eq!(t.steps[0].tool_calls[0].arguments, "{\"path\":\"r.pdf\"}");
    assert_eq!(t.steps[0].tokens, Some(7));
    assert_eq!(t.outcome, Outcome::Unknown);
}

#[test]
fn older_flattened_attributes_events_and_agent_only_spans() {
    let mut ev = span("2", Some("1"), 20, json!({"gen_ai.system": "openai"}));
    ev.events.push(SpanEvent {
        name: "gen_ai.choice".into(),
        time_ns: 25,
        attributes: json!({"message": "{\"role\":\"assistant\",\"content\":\"From an event.\"}"})
            .as_object()
            .cloned()
            .unwrap(),
    });
    ev.attributes
        .insert("gen_ai.operation.name".into(), json!("chat"));
    let spans = vec![
        span(
            "1",
            None,
            10,
            json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Solver"}),
        ),
        ev,
        span(
            "3",
            Some("1"),
            30,
            json!({
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "2+2?",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "5"}),
        ),
        span(
            "4",
            None,
            40,
            json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Checker",
            "gen_ai.output.messages": "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Wrong: 4.\"}]}]"}),
        ),
    ];
    let t = &traces(&spans)[0];
    let steps: Vec<(&str, &str)> = t
        .steps
        .iter()
        .map(|s| (s.agent.as_str(), s.content.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("Solver", "From an event."),
            ("Solver", "5"),
            ("Checker", "Wrong: 4.")
        ]
    );
    assert_eq!(t.task, "2+2?");
}

#[test]
fn an_agent_span_that_only_runs_other_agents_is_a_container() {
    // Google ADK: invoke_workflow > invoke_agent pipeline (a SequentialAgent, named like any
    // agent) > invoke_agent researcher / writer > their model calls. A coordinator that
    // calls the model itself before delegating stays an agent.
    let chat = |id: &str, parent: &str, start: u64, agent: &str| {
        span(
            id,
            Some(parent),
            start,
            json!({"gen_ai.operation.name": "generate_content", "gen_ai.agent.name": agent,
            "gen_ai.output.messages": format!("[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{agent} says\"}}]}}]")}),
        )
    };
    let agent = |id: &str, parent: &str, start: u64, name: &str| {
        span(
            id,
            Some(parent),
            start,
            json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}),
        )
    };
    let mut spans = vec![
        span(
            "1",
            None,
            10,
            json!({"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "pipeline"}),
        ),
        agent("2", "1", 11, "pipeline"),
        agent("3", "2", 12, "researcher"),
        chat("4", "3", 13, "researcher"),
        agent("5", "2", 20, "writer"),
        chat("6", "5", 21, "writer"),
    ];
    let t = &traces(&spans)[0];
    let declared: Vec<&str> = t.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(declared, ["researcher", "writer"]);
    assert_eq!(t.acting_agents(), ["researcher", "writer"]);
    // The same tree where `pipeline` first calls the model itself: a coordinator, an agent.
    spans.push(chat("7", "2", 11, "pipeline"));
    let t = &traces(&spans)[0];
    let declared: Vec<&str> = t.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(declared, ["pipeline", "researcher", "writer"]);
}

fn warning_codes(t: &Trace) -> Vec<&str> {
    t.metadata
        .get("otel_warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|w| w["code"].as_str())
        .collect()
}

#[test]
fn each_span_is_credited_to_its_own_service_and_a_nameless_run_says_so() {
    let out = |text: &str| {
        Value::String(
            json!([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
                .to_string(),
        )
    };
    let mut a = span(
        "1",
        None,
        10,
        json!({"gen_ai.operation.name": "chat",
        "gen_ai.output.messages": out("from a")}),
    );
    let mut b = span(
        "2",
        None,
        20,
        json!({"gen_ai.operation.name": "chat",
        "gen_ai.output.messages": out("from b")}),
    );
    a.service = Some("planner-svc".into());
    b.service = Some("coder-svc".into());
    let t = &traces(&[a, b])[0];
    let agents: Vec<&str> = t.steps.iter().map(|s| s.agent.as_str()).collect();
    assert_eq!(agents, ["planner-svc", "coder-svc"]);
    assert_eq!(warning_codes(t), ["agents_from_service"]);
    let w = &t.metadata["otel_warnings"][0];
    assert!(w["fix"]
        .as_str()
        .is_some_and(|f| f.contains("gen_ai.agent.name")));
}

#[test]
fn a_run_without_model_or_tool_spans_says_so() {
    let spans = vec![span(
        "1",
        None,
        10,
        json!({"openinference.span.kind": "CHAIN",
        "input.value": "hello"}),
    )];
    let t = &traces(&spans)[0];
    assert!(t.steps.is_empty());
    assert_eq!(warning_codes(t), ["no_steps"]);
    assert_eq!(warning_codes(&traces(&genai_run())[0]), Vec::<&str>::new());
}

#[test]
fn an_exception_event_on_a_chain_shows_on_the_step_under_it() {
    // smolagents: AgentParsingError as an exception event on the CHAIN span "Step 2".
    let mut chain = span(
        "2",
        Some("1"),
        20,
        json!({"openinference.span.kind": "CHAIN"}),
    );
    chain.events.push(SpanEvent {
        name: "exception".into(),
        time_ns: 30,
        attributes: json!({"exception.type": "AgentParsingError",
            "exception.message": "no tool call"})
        .as_object()
        .cloned()
        .unwrap_or_default(),
    });
    let spans = vec![
        span(
            "1",
            None,
            10,
            json!({"openinference.span.kind": "AGENT", "input.value": "Q"}),
        ),
        chain,
        span(
            "3",
            Some("2"),
            25,
            json!({"openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "garbled"}),
        ),
    ];
    let t = &traces(&spans)[0];
    assert_eq!(t.steps.len(), 1);
    assert_eq!(
        t.steps[0].content,
        "garbled\n[error: AgentParsingError: no tool call]"
    );
    assert_eq!(
        t.outcome,
        Outcome::Unknown,
        "the agent went on: a CHAIN error is no failure"
    );
}

/// A parent chain `depth` spans deep, alternating a nameless CHAIN span and a chat span with
/// no agent name (every chat is a step; its agent is looked up the whole chain).
pub(crate) fn deep_chain(depth: usize) -> Vec<SpanRecord> {
    (0..depth)
        .map(|i| {
            let attrs = if i % 2 == 1 {
                json!({"gen_ai.operation.name": "chat", "gen_ai.output.messages":
                    format!("[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{i}\"}}]}}]")})
            } else {
                json!({"openinference.span.kind": "CHAIN"})
            };
            let parent = (i > 0).then(|| format!("{:x}", i));
            span(&format!("{:x}", i + 1), parent.as_deref(), i as u64, attrs)
        })
        .collect()
}

#[test]
fn a_10000_deep_chain_assembles_in_linear_time() {
    // Quadratic before (each step walked the chain to the root): 5,000 steps x 10,000 spans.
    let spans = deep_chain(10_000);
    let started = std::time::Instant::now();
    let t = &traces(&spans)[0];
    let took = started.elapsed();
    assert_eq!(t.steps.len(), 5_000);
    assert_eq!(t.steps[4_999].content, "9999");
    assert!(took.as_secs_f64() < 2.0, "10,000-deep chain took {took:?}");
}

/// Every attribute key the assembly sources name (a dotted lower-case literal, or one of the
/// undotted keys read by name) is kept by `keep_read_attributes`: a key added to the code
/// without its namespace in `ATTRIBUTE_NAMESPACES` fails here, not silently in `serve`.
#[test]
fn every_attribute_key_the_assembly_names_is_kept_for_it() {
    let sources = [
        include_str!("../assemble.rs"),
        include_str!("agents.rs"),
        include_str!("continued.rs"),
        include_str!("messages.rs"),
        include_str!("steps.rs"),
    ];
    let mut keys = vec!["metadata".to_string()];
    for source in sources {
        // The code before its tests, with the char literal '"' out of the way of the split.
        let code = source.split("#[cfg(test)]").next().unwrap_or(source);
        let code = code.replace("'\"'", "'_'");
        for (i, literal) in code.split('"').enumerate() {
            let dotted = literal.contains('.')
                && literal
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._".contains(c));
            if i % 2 == 1 && dotted && !literal.starts_with('.') {
                keys.push(literal.to_string());
            }
        }
    }
    assert!(keys.len() > 30, "the scan found the keys: {keys:?}");
    let dropped: Vec<&String> = keys.iter().filter(|k| !reads_attribute(k)).collect();
    assert!(
        dropped.is_empty(),
        "keys assembly reads but the store would drop: {dropped:?}"
    );
    assert!(!reads_attribute("http.method") && !reads_attribute("k1"));
}
