//! Framework runs as they arrive: the assembler on OTLP exports recorded from real runs of
//! agent frameworks (tests/otel/recorded/<name>.jsonl, made by tests/otel/<name>_run.py against
//! tests/otel/scripted_model.py; see tests/otel/README.md). One table row per recording: the
//! agents in order (no container among them), the model and tool steps, the outcome, the
//! run-level warnings, and a few facts that each framework's spans hide somewhere else.
//! No framework is needed: the recordings are replayed.

use maslens_trace::{AgentKind, Outcome, Trace};
use std::path::PathBuf;

struct Case {
    /// tests/otel/recorded/<name>.jsonl
    name: &'static str,
    /// Acting agents in step order, consecutive repeats merged.
    agents: &'static [&'static str],
    /// Span names of containers (workflow roots, group managers) that must not be agents.
    containers: &'static [&'static str],
    /// Model-call steps (steps by an agent that is not a tool).
    model_steps: usize,
    /// Tool steps, in order.
    tools: &'static [&'static str],
    outcome: Outcome,
    /// Run-level warning codes (metadata `otel_warnings[].code`).
    warnings: &'static [&'static str],
    /// (agent, text its system prompt contains).
    system_prompt: Option<(&'static str, &'static str)>,
    /// Text some step's content must contain (an error raised above the model calls).
    step_text: Option<&'static str>,
    /// (tool call name, its arguments) on a model step.
    tool_call: Option<(&'static str, &'static str)>,
}

const CASES: &[Case] = &[
    Case {
        // Root AGENT span "Agent workflow" (no agent.name) is a container; the handoff is a tool.
        name: "openai_agents",
        containers: &["Agent workflow"],
        agents: &["Triage", "Researcher"],
        model_steps: 3,
        tools: &["handoff to Researcher", "lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("Triage", "You are Triage.")),
        step_text: None,
        // The instrumentor drops function.arguments; output.value still has them.
        tool_call: Some(("transfer_to_researcher", "{}")),
    },
    Case {
        // MaxTurnsExceeded: ERROR only on the Researcher AGENT span, the root is OK.
        name: "openai_agents_fail",
        containers: &["Agent workflow"],
        agents: &["Triage", "Researcher"],
        model_steps: 2,
        tools: &["handoff to Researcher", "lookup_fact"],
        outcome: Outcome::Failure,
        warnings: &[],
        system_prompt: Some(("Researcher", "You are Researcher.")),
        step_text: Some("Max turns exceeded"),
        tool_call: None,
    },
    Case {
        // AGENT spans `manager.run` / `researcher.run` with no agent-name attribute.
        name: "smolagents",
        containers: &["manager.run", "researcher.run"],
        agents: &["manager", "researcher", "manager"],
        model_steps: 4,
        tools: &["lookup_fact", "final_answer", "final_answer"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("researcher", "You are an expert assistant")),
        step_text: None,
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // smolagents with a CodeAgent manager that the model never answers with code: each step's
        // AgentParsingError is an exception event on its `Step N` CHAIN span, shown on the model
        // step under it; smolagents then asks for a final answer (the run ends normally).
        name: "smolagents_code",
        containers: &["manager.run"],
        agents: &["manager"],
        model_steps: 4,
        tools: &[],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("manager", "You are an expert assistant")),
        step_text: Some("AgentParsingError: Error in code parsing"),
        tool_call: None,
    },
    Case {
        // Native GenAI spans; `execute_tool ask_researcher` contains the researcher's run.
        name: "pydantic_ai",
        containers: &[],
        agents: &["coordinator", "researcher", "coordinator"],
        model_steps: 4,
        tools: &["lookup_fact", "ask_researcher"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("coordinator", "You are coordinator.")),
        step_text: None,
        tool_call: Some(("ask_researcher", "Apollo 11")),
    },
    Case {
        // Three LLM-kind spans per model call; agent names only in run_agent_step inputs.
        name: "llamaindex",
        containers: &["AgentWorkflow.run"],
        agents: &["triage", "researcher"],
        model_steps: 2,
        tools: &["handoff"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("triage", "You are triage.")),
        step_text: None,
        tool_call: Some(("handoff", "\"to_agent\": \"researcher\"")),
    },
    Case {
        // The same workflow through LlamaIndex's own exporter (llama-index-observability-otel),
        // agents streaming (their default): no span kind, one span per method; the model call is
        // the span with `LLMChatStartEvent` (messages as JSON), the tool the `call_tool` step. The
        // streamed answers are not recorded (the end event comes after the span closed): the
        // handoff call is read from the next call's input, the final answer is missing.
        name: "llamaindex_native",
        containers: &["AgentWorkflow.run", "AgentWorkflow"],
        agents: &["triage", "researcher"],
        model_steps: 2,
        tools: &["handoff"],
        outcome: Outcome::Unknown,
        warnings: &["no_output"],
        system_prompt: Some(("researcher", "You are researcher.")),
        step_text: Some("Agent researcher is now handling the request"),
        tool_call: Some(("handoff", "\"to_agent\": \"researcher\"")),
    },
    Case {
        // LlamaIndex's own exporter with FunctionAgent(streaming=False): `LLMChatEndEvent` holds
        // each call's answer.
        name: "llamaindex_native_nostream",
        containers: &["AgentWorkflow.run", "AgentWorkflow"],
        agents: &["triage", "researcher"],
        model_steps: 2,
        tools: &["handoff"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("triage", "You are triage.")),
        step_text: Some("The answer is: Agent researcher is now handling the request"),
        tool_call: Some(("handoff", "\"to_agent\": \"researcher\"")),
    },
    Case {
        // AG2 GroupChat, native GenAI spans: `invoke_agent chat_manager` is the group manager (a
        // container); the tool executor's `invoke_agent user` and its `execute_tool` are one step.
        name: "ag2",
        containers: &["chat_manager"],
        agents: &["researcher", "writer"],
        model_steps: 3,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("writer", "You are writer.")),
        step_text: None,
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // LangGraph supervisor whose workers are prebuilt ReAct agents (create_react_agent
        // subgraphs, OpenInference LangChain): inside a worker the `langgraph_node` is the
        // subgraph's own "agent" / "tools"; the worker is the first node of the checkpoint
        // namespace. The ToolNode's output is a serialized ToolMessage: its content is the result.
        name: "langgraph_react",
        containers: &["LangGraph", "agent"],
        agents: &[
            "supervisor",
            "research_agent",
            "supervisor",
            "writer_agent",
            "supervisor",
        ],
        model_steps: 6,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("research_agent", "You are research_agent.")),
        step_text: Some("2 to the power 10 is 1024"),
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // pydantic-ai whose tool always asks for a retry (ModelRetry): the tool span's status is
        // ERROR with no description and an `exception` event (ToolRetryError); the step shows the
        // event's text. The model then answers with the error: a quiet failure, outcome unknown.
        name: "pydantic_ai_retry",
        containers: &[],
        agents: &["coordinator", "researcher", "coordinator"],
        model_steps: 4,
        tools: &["lookup_fact", "ask_researcher"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: None,
        step_text: Some("[error: pydantic_ai.exceptions.ToolRetryError: the archive is offline"),
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // AutoGen AgentChat SelectorGroupChat (OpenInference): the selector's model calls sit
        // directly under the root `SelectorGroupChat.run_stream` CHAIN span with no agent: they
        // are the team's (an orchestrator), not the service's, and their prompt is not the task.
        name: "autogen_selector",
        containers: &[],
        agents: &[
            "SelectorGroupChat",
            "Solver",
            "SelectorGroupChat",
            "Checker",
            "SelectorGroupChat",
            "Reporter",
            "SelectorGroupChat",
            "Solver",
            "SelectorGroupChat",
            "Checker",
        ],
        model_steps: 10,
        tools: &[],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("Solver", "You are Solver.")),
        step_text: Some("Reporter"),
        tool_call: None,
    },
    Case {
        // AutoGen AgentChat Swarm: each handoff is a `transfer_to_<name>` tool call and its
        // result, then the next agent's turn.
        name: "autogen_swarm",
        containers: &[],
        agents: &["Solver", "Checker", "Reporter", "Solver", "Checker"],
        model_steps: 5,
        tools: &[
            "transfer_to_checker",
            "transfer_to_reporter",
            "transfer_to_solver",
            "transfer_to_checker",
            "transfer_to_reporter",
        ],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("Checker", "You are Checker.")),
        step_text: Some("Transferred to Checker"),
        tool_call: Some(("transfer_to_checker", "{}")),
    },
    Case {
        // OpenAI Agents SDK, Researcher as a tool of Triage (`Agent.as_tool`): the tool span
        // holds Researcher's whole run, so its result comes after Researcher's steps.
        name: "openai_agents_tool",
        containers: &["Agent workflow"],
        agents: &["Triage", "Researcher", "Triage"],
        model_steps: 4,
        tools: &["lookup_fact", "ask_researcher"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("Researcher", "You are Researcher.")),
        step_text: Some("Apollo 11 landed on 20 July 1969."),
        tool_call: Some(("ask_researcher", "Apollo 11")),
    },
    Case {
        // AG2 GroupChat with speaker_selection_method="auto": before each turn the manager's
        // model picks the next speaker through AG2's internal `speaker_selection_agent` (its
        // `chat` spans name it; their text is the role chosen). The last turn, `user`'s empty
        // auto-reply (`invoke_agent user`, output ""), is no step.
        name: "ag2_auto",
        containers: &["chat_manager"],
        agents: &[
            "speaker_selection_agent",
            "researcher",
            "speaker_selection_agent",
            "writer",
            "speaker_selection_agent",
        ],
        model_steps: 5,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("speaker_selection_agent", "You are in a role play game.")),
        step_text: Some("writer"),
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // AG2's AutoPattern through initiate_group_chat, traced by instrument_pattern: the
        // pattern's own agents (`_Group_Tool_Executor` runs the tools, `checking_agent` validates
        // each speaker selection) have agent spans but are AG2's internals, not agents.
        name: "ag2_pattern",
        containers: &["chat_manager", "_Group_Tool_Executor", "checking_agent"],
        agents: &[
            "researcher",
            "speaker_selection_agent",
            "writer",
            "speaker_selection_agent",
            "writer",
            "speaker_selection_agent",
        ],
        model_steps: 7,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("researcher", "You are researcher.")),
        step_text: Some("Apollo 11 landed on 20 July 1969."),
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // Google ADK, native GenAI spans with content (SPAN_ONLY): `invoke_workflow pipeline` >
        // `invoke_agent pipeline` (the SequentialAgent, named like an agent: a container) >
        // `invoke_agent {researcher,writer}` > `generate_content` / `execute_tool`.
        name: "adk",
        containers: &["pipeline"],
        agents: &["researcher", "writer"],
        model_steps: 3,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("researcher", "You are researcher.")),
        step_text: Some("Apollo 11 landed on 20 July 1969."),
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // The same ADK run with ADK's defaults: no message content in any span.
        name: "adk_no_content",
        containers: &["pipeline"],
        agents: &["researcher", "writer"],
        model_steps: 3,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &["no_content"],
        system_prompt: None,
        step_text: None,
        tool_call: None,
    },
    Case {
        // CrewAI (sequential crew) with OpenInference's CrewAI + LiteLLM instrumentors: the crew's
        // `apollo_crew.kickoff` CHAIN > `<role>._execute_core` AGENT (role in graph.node.id) >
        // LiteLLM `completion` LLM spans and the `lookup_fact.run` TOOL span.
        name: "crewai",
        containers: &["apollo_crew", "apollo_crew.kickoff"],
        agents: &["researcher", "writer"],
        model_steps: 3,
        tools: &["lookup_fact"],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("writer", "You are writer.")),
        step_text: Some("Apollo 11 landed on 20 July 1969."),
        tool_call: Some(("lookup_fact", "Apollo 11")),
    },
    Case {
        // CrewAI Process.hierarchical: the manager ("Crew Manager", an AGENT span per task)
        // delegates through the TOOL "Delegate work to coworker"; the coworker's calls run inside
        // that tool span with no AGENT span, and the tool's `coworker` argument names them.
        name: "crewai_hierarchical",
        containers: &["apollo_crew", "apollo_crew.kickoff"],
        agents: &[
            "Crew Manager",
            "researcher",
            "Crew Manager",
            "researcher",
            "Crew Manager",
        ],
        model_steps: 8,
        tools: &[
            "lookup_fact",
            "Delegate work to coworker",
            "lookup_fact",
            "Delegate work to coworker",
        ],
        outcome: Outcome::Unknown,
        warnings: &[],
        system_prompt: Some(("researcher", "You are researcher.")),
        step_text: Some("Apollo 11 landed on 20 July 1969."),
        tool_call: Some(("delegate_work_to_coworker", "\"coworker\": \"researcher\"")),
    },
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/otel/recorded")
}

fn spans(name: &str) -> Vec<maslens_otlp::span::SpanRecord> {
    let read = maslens_otlp::file::read_paths(&[dir().join(format!("{name}.jsonl"))]);
    assert!(read.problems.is_empty(), "{name}: {:?}", read.problems);
    read.spans
}

fn one_run(name: &str, spans: &[maslens_otlp::span::SpanRecord]) -> Trace {
    let mut traces = maslens_otlp::assemble::traces(spans);
    assert_eq!(traces.len(), 1, "{name}: one run");
    traces.remove(0)
}

fn agents_in_order(t: &Trace) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in t
        .steps
        .iter()
        .filter(|s| t.agent_kind(&s.agent) != AgentKind::Tool)
    {
        if out.last() != Some(&s.agent) {
            out.push(s.agent.clone());
        }
    }
    out
}

fn warning_codes(t: &Trace) -> Vec<String> {
    t.metadata
        .get("otel_warnings")
        .and_then(|w| w.as_array())
        .into_iter()
        .flatten()
        .filter_map(|w| w["code"].as_str().map(String::from))
        .collect()
}

fn check(c: &Case, t: &Trace) -> Vec<String> {
    let mut bad = Vec::new();
    let mut expect = |what: &str, got: String, want: String| {
        if got != want {
            bad.push(format!("{}: {what}: got {got}, want {want}", c.name));
        }
    };
    expect(
        "agents",
        format!("{:?}", agents_in_order(t)),
        format!("{:?}", c.agents),
    );
    let declared: Vec<&str> = t.agents.iter().map(|a| a.name.as_str()).collect();
    for container in c.containers {
        expect(
            &format!("container {container:?} among the agents {declared:?}"),
            declared.contains(container).to_string(),
            "false".into(),
        );
    }
    let (tools, models): (Vec<_>, Vec<_>) = t
        .steps
        .iter()
        .partition(|s| t.agent_kind(&s.agent) == AgentKind::Tool);
    expect(
        "model steps",
        models.len().to_string(),
        c.model_steps.to_string(),
    );
    let tool_names: Vec<&str> = tools.iter().map(|s| s.agent.as_str()).collect();
    expect(
        "tool steps",
        format!("{tool_names:?}"),
        format!("{:?}", c.tools),
    );
    expect(
        "outcome",
        format!("{:?}", t.outcome),
        format!("{:?}", c.outcome),
    );
    expect(
        "warnings",
        format!("{:?}", warning_codes(t)),
        format!("{:?}", c.warnings),
    );
    if let Some((agent, text)) = c.system_prompt {
        let p = t
            .agent(agent)
            .and_then(|a| a.system_prompt.clone())
            .unwrap_or_default();
        expect(
            &format!("system prompt of {agent} contains {text:?} (it is {p:?})"),
            p.contains(text).to_string(),
            "true".into(),
        );
    }
    if let Some(text) = c.step_text {
        let found = t.steps.iter().any(|s| s.content.contains(text));
        expect(
            &format!("some step contains {text:?}"),
            found.to_string(),
            "true".into(),
        );
    }
    if let Some((name, args)) = c.tool_call {
        let call = t
            .steps
            .iter()
            .flat_map(|s| &s.tool_calls)
            .find(|tc| tc.name == name);
        let got = call.map(|tc| tc.arguments.clone()).unwrap_or_default();
        expect(
            &format!("arguments of {name} contain {args:?} (they are {got:?})"),
            got.contains(args).to_string(),
            "true".into(),
        );
    }
    // A run recorded without content has no task to show (its warning says so).
    if t.task.is_empty() && !c.warnings.contains(&"no_content") {
        bad.push(format!("{}: empty task", c.name));
    }
    bad
}

#[test]
fn every_recorded_framework_run_assembles_as_the_run_it_was() {
    let mut bad = Vec::new();
    for c in CASES {
        let spans = spans(c.name);
        let t = one_run(c.name, &spans);
        bad.extend(check(c, &t));
        // Arrival order does not change the run (serve may get the nested agent's spans first).
        let reversed: Vec<_> = spans.iter().rev().cloned().collect();
        if one_run(c.name, &reversed) != t {
            bad.push(format!("{}: reversed arrival changes the run", c.name));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_earlier_recordings_carry_no_warnings() {
    for name in ["genai", "autogen", "langgraph"] {
        let t = one_run(name, &spans(name));
        assert_eq!(warning_codes(&t), Vec::<String>::new(), "{name}");
    }
}

#[test]
fn a_nested_agents_spans_arriving_alone_join_the_outer_run() {
    // pydantic-ai: the researcher's spans carry their own gen_ai.conversation.id. They end (and
    // are exported) before the coordinator's; assembled alone, as `maslens serve` first sees
    // them, they still belong to the coordinator's run (the root span's conversation id).
    let spans = spans("pydantic_ai");
    let root = spans
        .iter()
        .find(|s| s.parent_span_id.is_none())
        .expect("a root span");
    let want = root.attributes["gen_ai.conversation.id"]
        .as_str()
        .expect("root conversation id");
    let nested: Vec<_> = spans
        .iter()
        .filter(|s| s.attributes.get("gen_ai.agent.name") == Some(&"researcher".into()))
        .cloned()
        .collect();
    assert!(nested.len() >= 3);
    assert_eq!(one_run("pydantic_ai", &nested).id, want);
    assert_eq!(one_run("pydantic_ai", &spans).id, want);
}

#[test]
fn a_run_without_message_content_says_so() {
    // pydantic-ai with content capture off: the same spans without their messages.
    let mut spans = spans("pydantic_ai");
    for s in &mut spans {
        s.attributes.retain(|k, _| {
            !matches!(
                k.as_str(),
                "gen_ai.input.messages"
                    | "gen_ai.output.messages"
                    | "gen_ai.system_instructions"
                    | "gen_ai.tool.call.arguments"
                    | "gen_ai.tool.call.result"
                    | "pydantic_ai.all_messages"
                    | "final_result"
                    | "logfire.msg"
            )
        });
    }
    let t = one_run("pydantic_ai", &spans);
    assert!(
        warning_codes(&t).contains(&"no_content".to_string()),
        "{:?}",
        t.metadata.get("otel_warnings")
    );
}

#[test]
fn adk_without_content_names_the_capture_switch() {
    // ADK captures no message content unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
    // says SPAN_ONLY (or SPAN_AND_EVENT): the warning's fix must name it.
    let t = one_run("adk_no_content", &spans("adk_no_content"));
    let fix = t.metadata["otel_warnings"][0]["fix"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        fix.contains("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            && fix.contains("SPAN_ONLY"),
        "{fix}"
    );
    // With content, the same run has the messages and no warning.
    let t = one_run("adk", &spans("adk"));
    assert_eq!(t.task, "When did Apollo 11 land on the Moon?");
}

#[test]
fn llamaindex_native_exporter_runs_read_from_summaries_events_and_the_next_call() {
    // LlamaIndex's own exporter: the first agent's name is cut off in the 200-character summary
    // of its `run_agent_step` (and so of its model call), and comes from its `setup_agent`.
    let native = spans("llamaindex_native");
    let first_step = native
        .iter()
        .filter(|s| s.name == "AgentWorkflow.run_agent_step")
        .min_by_key(|s| s.start_ns)
        .expect("a run_agent_step span");
    let summary = first_step.attributes["llamaindex.step.input_summary"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !summary.contains("current_agent_name") && summary.ends_with("..."),
        "{summary}"
    );
    let t = one_run("llamaindex_native", &native);
    assert_eq!(t.task, "When did Apollo 11 land on the Moon?");
    let model: Vec<_> = t
        .steps
        .iter()
        .filter(|s| t.agent_kind(&s.agent) != AgentKind::Tool)
        .collect();
    // triage's streamed answer (the handoff call) is read from the researcher's input ...
    assert_eq!(model[0].agent, "triage");
    assert_eq!(model[0].tool_calls.len(), 1, "{:?}", model[0]);
    // ... the handoff's result from the `tool` message with its call id ...
    let tool = &t.steps[1];
    assert_eq!(tool.agent, "handoff");
    assert!(tool.tool_call_id.is_some());
    assert_eq!(model[0].tool_calls[0].id, tool.tool_call_id);
    assert!(
        tool.content.starts_with("Agent researcher is now handling"),
        "{tool:?}"
    );
    // ... and the researcher's streamed answer is nowhere: the warning says so and how to fix it.
    assert_eq!(model[1].agent, "researcher");
    assert!(model[1].content.is_empty() && model[1].tool_calls.is_empty());
    let w = &t.metadata["otel_warnings"][0];
    assert!(
        w["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("1 of 2"),
        "{w}"
    );
    assert!(
        w["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("streaming=False"),
        "{w}"
    );
    // Not streamed: the answers are in LLMChatEndEvent.
    let t = one_run(
        "llamaindex_native_nostream",
        &spans("llamaindex_native_nostream"),
    );
    let last = t.steps.last().expect("steps");
    assert_eq!(last.agent, "researcher");
    assert!(last.content.starts_with("The answer is: "), "{last:?}");
}

#[test]
fn a_cut_off_llamaindex_agent_name_is_no_name_and_a_handoff_names_the_next_agent() {
    // The researcher's summaries cut off before its name closes (a long input, no system
    // prompt): no agent "resea..."; the triage's handoff to researcher names it.
    let mut spans = spans("llamaindex_native");
    for s in &mut spans {
        if let Some(v) = s.attributes.get_mut("llamaindex.step.input_summary") {
            let cut = v.as_str().unwrap_or_default().replace(
                "current_agent_name='researcher')",
                "current_agent_name='resea...",
            );
            *v = cut.into();
        }
    }
    let t = one_run("llamaindex_native", &spans);
    assert_eq!(agents_in_order(&t), ["triage", "researcher"]);
}

#[test]
fn a_first_llamaindex_agent_whose_summaries_are_all_cut_is_the_one_its_handoff_does_not_offer() {
    // A long first question: the summaries of triage's `setup_agent` and `run_agent_step` both
    // cut off before its name. Its handoff tool offers {'researcher': ...}, the researcher's
    // offers {'triage': ...}: the one agent of the run triage's call does not offer is triage.
    for name in ["llamaindex_native", "llamaindex_native_nostream"] {
        let mut spans = spans(name);
        for s in &mut spans {
            if let Some(v) = s.attributes.get_mut("llamaindex.step.input_summary") {
                let cut = v
                    .as_str()
                    .unwrap_or_default()
                    .replace("current_agent_name='triage')", "current_agent_na...");
                *v = cut.into();
            }
        }
        let t = one_run(name, &spans);
        assert_eq!(agents_in_order(&t), ["triage", "researcher"], "{name}");
        // Without the offers (another exporter), the name stays unknown: no guess.
        for s in &mut spans {
            for e in &mut s.events {
                e.attributes.remove("additional_kwargs.tools");
            }
        }
        let t = one_run(name, &spans);
        assert!(
            !agents_in_order(&t).contains(&"triage".to_string()),
            "{name}"
        );
    }
}

/// A team's own model call (AutoGen's selector) is the team's, an orchestrator, and its prompt
/// ("You are in a role play game...") is never taken for the task.
#[test]
fn a_selector_call_belongs_to_its_team_and_is_not_the_task() {
    let t = one_run("autogen_selector", &spans("autogen_selector"));
    assert_eq!(t.task, "Is 91 a prime number? Explain briefly.");
    assert_eq!(t.agent_kind("SelectorGroupChat"), AgentKind::Orchestrator);
    assert_eq!(t.steps[0].content.trim(), "Solver");
    assert!(t.agent("autogen-agentchat-mas").is_none(), "{:?}", t.agents);
}

/// A LangChain tool's output is the serialized ToolMessage; the step is its content alone.
#[test]
fn a_langchain_tool_step_is_the_tool_messages_content() {
    let t = one_run("langgraph_react", &spans("langgraph_react"));
    let tool = t
        .steps
        .iter()
        .find(|s| s.agent == "lookup_fact")
        .expect("the tool step");
    assert_eq!(
        tool.content,
        "2 to the power 10 is 1024; 10 to the power 3 is 1000."
    );
}
