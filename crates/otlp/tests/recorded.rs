//! The assembler on exports recorded from real runs (tests/otel/recorded, made by the scripts in
//! tests/otel: the OpenTelemetry SDK in GenAI conventions, AutoGen AgentChat and LangGraph with
//! their OpenInference instrumentors against `maslens serve-model`). Each summary file holds what
//! the producing script printed about its run.

use std::path::PathBuf;

fn recorded(name: &str) -> (maslens_trace::Trace, serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/otel/recorded");
    let read = maslens_otlp::file::read_paths(&[dir.join(format!("{name}.jsonl"))]);
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    let traces = maslens_otlp::assemble::traces(&read.spans);
    assert_eq!(traces.len(), 1, "one run in {name}");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{name}.summary.json"))).expect("summary"),
    )
    .expect("summary JSON");
    (traces.into_iter().next().expect("one"), summary)
}

fn agents_in_order(t: &maslens_trace::Trace) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in &t.steps {
        if out.last() != Some(&s.agent) {
            out.push(s.agent.clone());
        }
    }
    out
}

#[test]
fn genai_sdk_run() {
    let (t, summary) = recorded("genai");
    assert_eq!(t.id, summary["conversation_id"].as_str().expect("id"));
    assert_eq!(
        t.steps.len() as u64,
        summary["steps"].as_u64().expect("steps")
    );
    let mistake = summary["mistake_span_id"].as_str().expect("span");
    let step = t
        .steps
        .iter()
        .find(|s| s.span.as_ref().is_some_and(|sp| sp.span_id == mistake))
        .expect("the mistaken span is a step");
    assert_eq!(
        step.agent,
        summary["mistake_agent"].as_str().expect("agent")
    );
    eprintln!("{:?}", agents_in_order(&t));
}

#[test]
fn autogen_agentchat_run() {
    let (t, summary) = recorded("autogen");
    let want: Vec<String> = summary["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect();
    eprintln!("{:?}", agents_in_order(&t));
    assert_eq!(agents_in_order(&t), want);
    assert_eq!(
        t.steps.len() as u64,
        summary["llm_spans"].as_u64().expect("n")
    );
    // AutoGen 0.7 sends each agent's system message in the `developer` role.
    for name in &want {
        let prompt = t.agent(name).and_then(|a| a.system_prompt.clone());
        let prompt = prompt.unwrap_or_default();
        assert!(
            prompt.starts_with(&format!("You are {name}.")),
            "{name}: {prompt:?}"
        );
    }
}

#[test]
fn langgraph_run() {
    let (t, summary) = recorded("langgraph");
    let names: Vec<String> = summary["transcript"]
        .as_array()
        .expect("transcript")
        .iter()
        .skip(1)
        .map(|m| m["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let steps: Vec<String> = t.steps.iter().map(|s| s.agent.clone()).collect();
    eprintln!("{steps:?}");
    assert_eq!(steps, names);
    assert_eq!(t.id, summary["thread_id"].as_str().expect("thread"));
}

/// The store reads a run's spans back for assembly with only the attributes assembly reads
/// (`keep_read_attributes`): on every recorded run, that gives the same trace as all of them.
#[test]
fn every_recorded_run_assembles_the_same_from_the_attributes_assembly_reads() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/otel/recorded");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("recordings")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 14, "{files:?}");
    let mut dropped = 0;
    for file in files {
        let read = maslens_otlp::file::read_paths(std::slice::from_ref(&file));
        let mut kept = read.spans.clone();
        for span in &mut kept {
            let before = span.attributes.len();
            maslens_otlp::assemble::keep_read_attributes(span);
            dropped += before - span.attributes.len();
        }
        let all = serde_json::to_value(maslens_otlp::assemble::traces(&read.spans)).expect("json");
        let read_only = serde_json::to_value(maslens_otlp::assemble::traces(&kept)).expect("json");
        assert_eq!(all, read_only, "{}", file.display());
    }
    // The recordings carry attributes assembly does not read (88 of 1,424: `server.port`,
    // `logfire.msg`, `crew_id`, ...), so the comparison is not of a no-op.
    assert!(dropped > 0, "dropped {dropped}");
}
