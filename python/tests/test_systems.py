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
