//! Chat transcripts: OpenAI message arrays and objects with `messages`/`history`.

use maslens_trace::import::{parse_record, read_path, Format, RecordCtx};
use maslens_trace::{AgentKind, Outcome};
use std::path::PathBuf;

fn examples(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/")).join(rel)
}

#[test]
fn openai_array_with_tool_calls() {
    let imp = read_path(&examples("openai-messages.json"), Format::Auto)
        .next()
        .unwrap()
        .unwrap();
    let t = &imp.trace;
    assert_eq!(t.id, "openai-messages");
    assert_eq!(t.source.format, "chat");
    assert_eq!(t.task, "What is 17% of 2,340?");
    assert_eq!(t.steps.len(), 5);
    // No `name`: the agent is the role.
    assert_eq!(t.steps[2].agent, "assistant");
    assert_eq!(t.steps[2].tool_calls[0].name, "calculator");
    assert_eq!(t.steps[2].tool_calls[0].id.as_deref(), Some("call_a"));
    assert!(t.steps[2].tool_calls[0].arguments.contains("0.17 * 2340"));
    assert_eq!(t.steps[3].tool_call_id.as_deref(), Some("call_a"));
    assert_eq!(t.agent_kind("tool"), AgentKind::Tool);
    assert_eq!(t.agent_kind("user"), AgentKind::Human);
    assert_eq!(t.agent_kind("system"), AgentKind::Human);
    assert_eq!(t.agent_kind("assistant"), AgentKind::Worker);
    assert!(imp.diagnostics.is_empty(), "{:?}", imp.diagnostics);
}

#[test]
fn group_chat_object_with_names_and_parts() {
    let t = read_path(&examples("groupchat.json"), Format::Chat)
        .next()
        .unwrap()
        .unwrap()
        .trace;
    assert_eq!(t.id, "groupchat-refund-policy");
    assert_eq!(t.outcome, Outcome::Failure);
    assert!(t.task.starts_with("A customer bought a kettle"));
    assert_eq!(t.steps[1].agent, "chat_manager");
    assert_eq!(t.agent_kind("chat_manager"), AgentKind::Orchestrator);
    assert_eq!(t.agent_kind("customer"), AgentKind::Human);
    assert_eq!(t.agent_kind("lookup_policy"), AgentKind::Tool);
    assert_eq!(
        t.steps[5].content,
        "Good news: you are eligible for a full refund.\nPlease send us your receipt."
    );
    assert_eq!(t.metadata["framework"], serde_json::json!("ag2-groupchat"));
}

#[test]
fn history_key_and_error_paths() {
    let ctx = RecordCtx::memory("inline");
    let ok = br#"{"history": [{"role": "user", "content": "hi"}, {"role": "assistant", "name": "Bot", "content": "hello"}]}"#;
    let t = parse_record(ok, Format::Chat, &ctx).unwrap().trace;
    assert_eq!(t.steps[1].agent, "Bot");
    assert_eq!(t.id, "inline");
    let bad = br#"{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": 5}]}"#;
    let e = parse_record(bad, Format::Chat, &ctx).unwrap_err();
    assert_eq!(e.path.as_deref(), Some("messages[1].tool_calls"), "{e}");
    let bad = br#"[{"role": "user", "content": {"x": 7}}]"#;
    let e = parse_record(bad, Format::Chat, &ctx).unwrap_err();
    assert_eq!(e.path.as_deref(), Some("[0].content"), "{e}");
    let e = parse_record(b"{\"foo\": []}", Format::Chat, &ctx).unwrap_err();
    assert!(e.message.contains("`messages` or `history`"), "{e}");
}

#[test]
fn read_trace_takes_the_first_record_or_explains() {
    let t = maslens_trace::read_trace(&examples("aegis-style.jsonl"), Format::Auto)
        .unwrap()
        .trace;
    assert_eq!(t.id, "example-debate-1");
    // `solver2` in the labels is written as the conversation spells it.
    assert_eq!(t.labels.faulty_agents[0].agent, "Solver2");
    assert_eq!(
        t.labels.faulty_agents[0].description.as_deref(),
        Some("Multiply instead of divide.")
    );
    let dir = tempfile::tempdir().unwrap();
    let e = maslens_trace::read_trace(dir.path(), Format::Auto).unwrap_err();
    assert!(e.message.contains("no trace found"), "{e}");
}
