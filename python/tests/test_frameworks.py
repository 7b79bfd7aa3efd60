"""Adapters on the real objects of real framework runs against `maslens serve-model` (the embedded
SmolLM2): AutoGen AgentChat, LangGraph, OpenAI Agents SDK (handoffs and a function tool). AG2 and
CrewAI need openai<3 and run in their own venv (test_frameworks_openai2.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import maslens
from maslens import adapters
from conftest import ServeModel

TASK = "Is 91 a prime number? Answer briefly."


def _check(trace: maslens.Trace, agents: set[str], framework: str) -> None:
    assert trace.metadata["framework"] == framework
    speakers = {s["agent"] for s in trace.steps}
    assert agents <= speakers, (agents, speakers)
    assert len(trace) >= len(agents)
    for i, s in enumerate(trace.steps):
        assert s["index"] == i
    # The trace is usable by every method: the prior localizes it, its verdict inside the trace.
    (v,) = maslens.locate(trace, method="prior", progress=False)
    assert v.error is None and v.step is not None and 0 <= v.step < len(trace)


def test_autogen_agentchat_task_result(serve_model: ServeModel) -> None:
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    async def run() -> Any:
        client = OpenAIChatCompletionClient(
            model="local:smollm2-135m",
            base_url=serve_model.base_url,
            api_key="unused",
            model_info={"vision": False, "function_calling": False, "json_output": False, "family": "unknown", "structured_output": False},
            max_tokens=40,
            temperature=0.0,
        )
        team = RoundRobinGroupChat(
            [
                AssistantAgent("Solver", model_client=client, system_message="You are Solver. Answer in one sentence."),
                AssistantAgent("Checker", model_client=client, system_message="You are Checker. Say if the answer is right."),
            ],
            termination_condition=MaxMessageTermination(3),
        )
        result = await team.run(task=TASK)
        await client.close()
        return result

    result = asyncio.run(run())
    trace = adapters.from_autogen(result, outcome="unknown")
    _check(trace, {"user", "Solver", "Checker"}, "autogen-agentchat")
    assert trace.task == TASK
    assert [s["agent"] for s in trace.steps] == [m.source for m in result.messages]
    assert trace.steps[1]["content"] == result.messages[1].to_text()
    assert trace.metadata["stop_reason"] == result.stop_reason


def test_langgraph_state_and_stream_updates(serve_model: ServeModel) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = ChatOpenAI(model="local:smollm2-135m", base_url=serve_model.base_url, api_key="unused", max_tokens=40, temperature=0)

    def agent(name: str, role: str) -> Any:
        def node(state: MessagesState) -> dict[str, Any]:
            reply = llm.invoke([("system", f"You are {name}. {role}"), *state["messages"]])
            # Names unset on purpose: the stream adapter attributes messages to their node.
            return {"messages": [AIMessage(content=reply.content)]}

        return node

    g = StateGraph(MessagesState)
    g.add_node("researcher", agent("researcher", "Find the facts."))
    g.add_node("writer", agent("writer", "Write the answer in one sentence."))
    g.add_edge(START, "researcher")
    g.add_edge("researcher", "writer")
    g.add_edge("writer", END)
    graph = g.compile()
    chunks = list(graph.stream({"messages": [HumanMessage(content=TASK)]}, stream_mode="updates"))
    trace = adapters.from_langgraph(chunks, task=TASK)
    _check(trace, {"researcher", "writer"}, "langgraph")
    assert [s["agent"] for s in trace.steps] == ["researcher", "writer"]
    # The final state: names set by the node carry through.
    state = graph.invoke({"messages": [HumanMessage(content=TASK)]})
    for m in state["messages"][1:]:
        m.name = "team"
    from_state = adapters.from_langgraph(state)
    assert [s["agent"] for s in from_state.steps] == ["user", "team", "team"]


def test_openai_agents_sdk_handoff_and_tool(serve_model: ServeModel) -> None:
    agents_sdk = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=serve_model.base_url, api_key="unused")
    model = OpenAIChatCompletionsModel(model="local:smollm2-135m", openai_client=client)

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    math_agent = Agent(
        name="Math agent",
        instructions="You add numbers with the add tool.",
        model=model,
        tools=[add],
        model_settings=ModelSettings(tool_choice="required", max_tokens=40),
        tool_use_behavior="stop_on_first_tool",
    )
    triage = Agent(
        name="Triage agent",
        instructions="Hand arithmetic questions to the Math agent.",
        model=model,
        handoffs=[math_agent],
        model_settings=ModelSettings(tool_choice="required", max_tokens=40),
    )
    result = asyncio.run(Runner.run(triage, "What is 2 + 3?", max_turns=4))
    kinds = [type(i).__name__ for i in result.new_items]
    assert "HandoffCallItem" in kinds and "HandoffOutputItem" in kinds, kinds
    assert "ToolCallItem" in kinds and "ToolCallOutputItem" in kinds, kinds
    trace = adapters.from_openai_agents(result)
    _check(trace, {"Triage agent", "Math agent"}, "openai-agents")
    assert trace.metadata["handoffs"] == [{"from": "Triage agent", "to": "Math agent"}]
    calls = [s for s in trace.steps if s.get("tool_calls")]
    assert [c["agent"] for c in calls] == ["Triage agent", "Math agent"]
    assert calls[0]["tool_calls"][0]["name"] == "transfer_to_math_agent"
    assert calls[1]["tool_calls"][0]["name"] == "add"
    # The tool really ran: its output is the run's final output and a step of the trace.
    assert str(result.final_output) in [s["content"] for s in trace.steps]
    assert agents_sdk is not None


def test_messages_from_openai_sdk_objects() -> None:
    from openai.types.chat import ChatCompletionMessage

    msg = ChatCompletionMessage(role="assistant", content="Paris.")
    trace = adapters.from_messages([{"role": "user", "content": "Capital of France?"}, msg], task="capital")
    assert [s["content"] for s in trace.steps] == ["Capital of France?", "Paris."]
    with pytest.raises(maslens.TraceError, match=r"messages\[0\]"):
        adapters.from_messages([42])
    with pytest.raises(maslens.TraceError, match="from_openai_agents"):
        adapters.from_openai_agents({"not": "a run"})
