"""The systems the improvement loop runs (maslens.systems): real AutoGen AgentChat and OpenAI
Agents SDK systems against `maslens serve-model` (the embedded SmolLM2), run twice with one
agent's prompt changed. The HTTP requests the frameworks send are recorded
(an event hook on the client the openai SDK takes) to check that the changed prompt, and only
it, reached the model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from openai import DefaultAsyncHttpxClient

import maslens
from maslens.systems import AgentChatSystem, FunctionSystem, OpenAIAgentsSystem, Run, System, check_prompts
from conftest import ServeModel

TASK = "Is 91 a prime number? Answer briefly."
MODEL = "local:smollm2-135m"


class Requests:
    """The chat-completion requests sent through `client()`: their system prompts, in order."""

    def __init__(self) -> None:
        self.system_prompts: list[str] = []

    def client(self) -> Any:
        async def record(request: Any) -> None:
            body = json.loads(request.content or b"{}")
            self.system_prompts += [m["content"] for m in body.get("messages", []) if m.get("role") in ("system", "developer")]

        return DefaultAsyncHttpxClient(event_hooks={"request": [record]})


def _speakers(trace: maslens.Trace) -> set[str]:
    return {s["agent"] for s in trace.steps}


def _changed(prompts: Mapping[str, str], agent: str, text: str) -> dict[str, str]:
    return {**prompts, agent: text}


def test_function_system_checks_prompts() -> None:
    trace = maslens.Trace.from_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "name": "a", "content": "yo"}])
    seen: list[Mapping[str, str]] = []

    def fn(task: str, prompts: Mapping[str, str]) -> Run:
        seen.append(prompts)
        return Run(trace, f"{task}:{prompts['a']}")

    system = FunctionSystem(fn, {"a": "be brief", "b": "check"})
    assert isinstance(system, System)
    run = system.run("t", {"a": "be long", "b": "check"})
    assert run.output == "t:be long" and run.trace is trace and run.extra == {}
    assert seen == [{"a": "be long", "b": "check"}]
    with pytest.raises(ValueError, match="'b'"):
        system.run("t", {"a": "x"})
    with pytest.raises(ValueError, match="'c'"):
        system.run("t", {"a": "x", "b": "y", "c": "z"})
    assert len(seen) == 1
    with pytest.raises(ValueError, match="'a'"):
        check_prompts(system, {"b": "y"})


def test_autogen_agentchat_system_takes_the_changed_prompt(serve_model: ServeModel) -> None:
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    requests = Requests()
    # One client for every run, as users write it: its connections outlive a run's event loop.
    client = OpenAIChatCompletionClient(  # type: ignore[call-arg]
        model=MODEL,
        base_url=serve_model.base_url,
        api_key="unused",
        model_info={"vision": False, "function_calling": False, "json_output": False, "family": "unknown", "structured_output": False},
        max_tokens=40,
        temperature=0.0,
        http_client=requests.client(),  # not in the typed config, passed on to AsyncOpenAI
    )

    def make_team(prompts: Mapping[str, str]) -> Any:
        agents: list[Any] = [AssistantAgent(name, model_client=client, system_message=prompts[name]) for name in ("Solver", "Checker")]
        return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(3))

    shipped = {"Solver": "You are Solver. Answer in one sentence.", "Checker": "You are Checker. Say if the answer is right."}
    system = AgentChatSystem(make_team, shipped)
    assert isinstance(system, System)
    first = system.run(TASK, shipped)
    assert {"user", "Solver", "Checker"} <= _speakers(first.trace)
    assert first.trace.metadata["framework"] == "autogen-agentchat" and first.trace.task == TASK
    assert first.output == first.extra["result"].messages[-1].to_text() and first.output
    assert set(requests.system_prompts) == set(shipped.values())

    requests.system_prompts.clear()
    changed = _changed(shipped, "Checker", "You are Checker. Reply only YES or NO.")

    async def inside_loop() -> Run:  # a notebook, an async app
        return system.run(TASK, changed)

    second = asyncio.run(inside_loop())
    assert {"user", "Solver", "Checker"} <= _speakers(second.trace)
    solver, checker = system.last_team._participants
    assert [m.content for m in checker._system_messages] == [changed["Checker"]]
    assert [m.content for m in solver._system_messages] == [shipped["Solver"]]
    # What reached the model: the new Checker prompt, the old one no more, Solver's unchanged.
    assert set(requests.system_prompts) == {shipped["Solver"], changed["Checker"]}

    with pytest.raises(ValueError, match="'Checker'"):
        system.run(TASK, {"Solver": "x"})


def test_autogen_agentchat_system_resumes_with_the_named_agent_next(serve_model: ServeModel) -> None:
    """Replay needs the named agent to speak right after the history: a fresh round-robin team
    would start at its first participant (Solver); resume makes it Checker, with Checker's
    changed prompt, and the history reaches the model as it happened."""
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    requests = Requests()
    info = {"vision": False, "function_calling": False, "json_output": False, "family": "unknown", "structured_output": False}
    client = OpenAIChatCompletionClient(model=MODEL, base_url=serve_model.base_url, api_key="unused", model_info=info, max_tokens=24, temperature=0.0, http_client=requests.client())  # type: ignore[arg-type]

    def make_team(prompts: Mapping[str, str]) -> Any:
        agents: list[Any] = [AssistantAgent(name, model_client=client, system_message=prompts[name]) for name in ("Solver", "Checker", "Scribe")]
        return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(4))

    shipped = {"Solver": "You are Solver. Answer in one sentence.", "Checker": "You are Checker. Say if the answer is right.", "Scribe": "You are Scribe. Summarize."}
    system = AgentChatSystem(make_team, shipped)
    assert maslens.systems.can_resume(system)
    history = [{"role": "user", "name": "user", "content": TASK}, {"role": "assistant", "name": "Solver", "content": "91 is prime."}]
    changed = _changed(shipped, "Checker", "You are Checker. Reply only YES or NO.")
    run = system.resume(TASK, changed, history, "Checker")
    steps = run.trace.steps
    assert [s["agent"] for s in steps[:2]] == ["user", "Solver"] and steps[1]["content"] == "91 is prime."
    # MaxMessageTermination(4) counts the history: two new messages, Checker's then Scribe's.
    assert [s["agent"] for s in steps[2:]] == ["Checker", "Scribe"], steps
    assert run.trace.task == TASK and run.output == steps[-1]["content"]
    assert requests.system_prompts[0] == changed["Checker"], "the changed Checker spoke first"
    assert shipped["Solver"] not in requests.system_prompts

    # Scribe next, skipping Checker: the index follows the participants' order.
    again = system.resume(TASK, shipped, history, "Scribe")
    assert [s["agent"] for s in again.trace.steps[2:]] == ["Scribe", "Solver"]

    with pytest.raises(ValueError, match="no participant named 'Editor'"):
        system.resume(TASK, shipped, history, "Editor")
    with pytest.raises(ValueError, match="history is empty"):
        system.resume(TASK, shipped, [], "Checker")
    # A history as long as the termination's limit: the team stops before anyone speaks.
    full = history + [{"role": "assistant", "name": "Checker", "content": "yes"}, {"role": "assistant", "name": "Scribe", "content": "ok"}]
    with pytest.raises(ValueError, match="stopped before anyone spoke"):
        system.resume(TASK, shipped, full, "Solver")


def test_langgraph_system_resumes_at_the_named_node(serve_model: ServeModel) -> None:
    """A graph solver -> checker -> scribe resumed at checker: the history is the state a solver
    wrote (a checkpointer copy of the graph), checker runs first with its changed prompt and
    sees the history; resumed at solver (START's node) the graph simply runs from the history."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    seen: list[tuple[str, str, list[str]]] = []
    llm = ChatOpenAI(model=MODEL, base_url=serve_model.base_url, api_key="unused", max_tokens=16, temperature=0)  # type: ignore[call-arg, arg-type]

    def make_graph(prompts: Mapping[str, str]) -> Any:
        def node(name: str) -> Any:
            def call(state: MessagesState) -> dict[str, Any]:
                seen.append((name, prompts[name], [str(m.content) for m in state["messages"]]))
                return {"messages": [AIMessage(content=llm.invoke([("system", prompts[name]), *state["messages"]]).content)]}

            return call

        g = StateGraph(MessagesState)
        for name in ("solver", "checker", "scribe"):
            g.add_node(name, node(name))  # type: ignore[call-overload]
        g.add_edge(START, "solver")
        g.add_edge("solver", "checker")
        g.add_edge("checker", "scribe")
        g.add_edge("scribe", END)
        return g.compile()

    shipped = {"solver": "Answer briefly.", "checker": "Say if it is right.", "scribe": "Summarize."}
    system = maslens.LangGraphSystem(make_graph, shipped)
    assert maslens.systems.can_resume(system)
    history = [{"role": "user", "name": "user", "content": TASK}, {"role": "assistant", "name": "solver", "content": "91 is prime."}]
    changed = _changed(shipped, "checker", "Reply only YES or NO.")
    run = system.resume(TASK, changed, history, "checker")
    assert [name for name, _, _ in seen] == ["checker", "scribe"]
    assert seen[0][1] == changed["checker"] and seen[0][2] == [TASK, "91 is prime."]
    steps = run.trace.steps
    assert [s["agent"] for s in steps if s["agent"] != "user"] == ["solver", "checker", "scribe"], steps
    assert run.output == steps[-1]["content"]

    seen.clear()
    system.resume(TASK, shipped, history[:1], "solver")
    assert [name for name, _, _ in seen] == ["solver", "checker", "scribe"] and seen[0][2] == [TASK]
    with pytest.raises(ValueError, match="no node 'editor'"):
        system.resume(TASK, shipped, history, "editor")


def test_openai_agents_system_takes_the_changed_prompt(serve_model: ServeModel) -> None:
    pytest.importorskip("agents")
    from openai import AsyncOpenAI

    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, set_tracing_disabled

    set_tracing_disabled(True)
    requests = Requests()
    # One client for every run, as users write it: its connections outlive a run's event loop.
    client = AsyncOpenAI(base_url=serve_model.base_url, api_key="unused", http_client=requests.client())
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)

    def make_agent(prompts: Mapping[str, str]) -> Any:
        writer = Agent(name="Writer", instructions=prompts["Writer"], model=model, model_settings=ModelSettings(max_tokens=40))
        return Agent(
            name="Triage",
            instructions=prompts["Triage"],
            model=model,
            handoffs=[writer],
            model_settings=ModelSettings(tool_choice="required", max_tokens=40),
        )

    shipped = {"Triage": "Hand every question to the Writer.", "Writer": "Answer in one short sentence."}
    system = OpenAIAgentsSystem(make_agent, shipped, max_turns=4)
    assert isinstance(system, System)
    first = system.run(TASK, shipped)
    assert "error" not in first.extra, first.extra
    assert {"user", "Triage", "Writer"} <= _speakers(first.trace)
    assert first.trace.metadata["handoffs"] == [{"from": "Triage", "to": "Writer"}]
    assert first.output == str(first.extra["result"].final_output)
    assert set(requests.system_prompts) == set(shipped.values())

    # The second run from inside a running event loop (a notebook, an async app).
    requests.system_prompts.clear()
    changed = _changed(shipped, "Writer", "Answer with one word.")

    async def inside_loop() -> Run:
        return system.run(TASK, changed)

    second = asyncio.run(inside_loop())
    assert "error" not in second.extra, second.extra
    assert {"user", "Triage", "Writer"} <= _speakers(second.trace)
    assert system.last_agent.instructions == shipped["Triage"]
    assert system.last_agent.handoffs[0].instructions == changed["Writer"]
    assert set(requests.system_prompts) == {shipped["Triage"], changed["Writer"]}

    with pytest.raises(ValueError, match="'Writer'"):
        system.run(TASK, {"Triage": "x"})
    with pytest.raises(ValueError, match="'Editor'"):
        system.run(TASK, {**shipped, "Editor": "x"})

    # Too few turns: MaxTurnsExceeded ends the run, not the loop; the trace keeps what ran.
    short = OpenAIAgentsSystem(make_agent, shipped, max_turns=1)
    failed = short.run(TASK, shipped)
    assert failed.output == ""
    assert failed.extra["error"].startswith("MaxTurnsExceeded"), failed.extra
    assert failed.trace.outcome == "failure" and failed.trace.task == TASK
    assert "Triage" in _speakers(failed.trace)
    assert failed.trace.metadata["error"] == failed.extra["error"]
