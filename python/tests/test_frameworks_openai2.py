"""Adapters on real AG2 (classic API) group chats and CrewAI crews against `maslens serve-model`.

Both need openai<3, so they run in their own venv (`scripts/pyenv.sh --openai2`); in the main venv
these tests are skipped, and scripts/python-test.sh runs them in the other one."""

from __future__ import annotations

import os
from typing import Any

import pytest

import maslens
from maslens import adapters
from conftest import ServeModel

TASK = "Is 91 a prime number? Answer briefly."


def test_ag2_group_chat(serve_model: ServeModel) -> None:
    autogen = pytest.importorskip("autogen")
    if not hasattr(autogen, "GroupChat"):
        pytest.skip("AG2 classic API (autogen.GroupChat) not installed")
    from autogen import ConversableAgent, GroupChat, GroupChatManager

    llm_config: dict[str, Any] = {
        "config_list": [{"model": "smollm2-135m", "base_url": serve_model.base_url, "api_key": "unused", "price": [0, 0]}],
        "cache_seed": None,
        "max_tokens": 40,
        "temperature": 0,
    }
    solver = ConversableAgent("Solver", system_message="You are Solver. Answer in one sentence.", llm_config=llm_config, human_input_mode="NEVER")
    checker = ConversableAgent("Checker", system_message="You are Checker. Say if the answer is right.", llm_config=llm_config, human_input_mode="NEVER")
    user = ConversableAgent("user", llm_config=False, human_input_mode="NEVER", default_auto_reply="Thanks.")
    chat = GroupChat(agents=[user, solver, checker], messages=[], max_round=3, speaker_selection_method="round_robin")
    manager = GroupChatManager(groupchat=chat, llm_config=llm_config)
    result = user.initiate_chat(manager, message=TASK)
    for run in (chat, manager):
        trace = adapters.from_ag2(run, task=TASK)
        assert trace.metadata["framework"] == "ag2"
        assert [s["agent"] for s in trace.steps] == [m["name"] for m in chat.messages]
        assert {"user", "Solver", "Checker"} <= {s["agent"] for s in trace.steps}
    from_result = adapters.from_ag2(result, task=TASK)
    assert len(from_result) == len(result.chat_history)
    (v,) = maslens.locate(adapters.from_ag2(chat), method="prior", progress=False)
    assert v.error is None and v.step is not None


def test_crewai_crew_output(serve_model: ServeModel) -> None:
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    crewai = pytest.importorskip("crewai")
    from crewai import LLM, Agent, Crew, Process, Task

    llm = LLM(model="openai/smollm2-135m", base_url=serve_model.base_url, api_key="unused", max_tokens=60, temperature=0)
    researcher = Agent(role="Researcher", goal="Find out whether 91 is prime.", backstory="A careful mathematician.", llm=llm, allow_delegation=False, max_iter=2)
    writer = Agent(role="Writer", goal="Write a one-sentence answer.", backstory="A concise writer.", llm=llm, allow_delegation=False, max_iter=2)
    tasks = [
        Task(description=TASK, expected_output="One sentence.", agent=researcher),
        Task(description="Write the final answer to the question.", expected_output="One sentence.", agent=writer),
    ]
    output = Crew(agents=[researcher, writer], tasks=tasks, process=Process.sequential, verbose=False).kickoff()
    trace = adapters.from_crewai(output)
    assert trace.metadata["framework"] == "crewai"
    assert {"Researcher", "Writer"} <= {s["agent"] for s in trace.steps}, trace.steps
    assert trace.task == TASK
    # Each task's final output is a step of its agent.
    for t in output.tasks_output:
        contents = [s["content"] for s in trace.steps if s["agent"] == t.agent]
        assert contents and any(t.raw.strip() in c or c.strip() in t.raw for c in contents), (t.agent, t.raw)
    (v,) = maslens.locate(trace, method="prior", progress=False)
    assert v.error is None and v.step is not None
    assert crewai is not None


def test_crewai_system_in_the_improvement_loop(serve_model: ServeModel, tmp_path: Any) -> None:
    """A CrewAI crew as a maslens.System: each run builds the crew from the prompts (the agents'
    backstories); the loop rewrites only the chosen agent and writes its report."""
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    pytest.importorskip("crewai")
    from crewai import LLM, Agent, Crew, Process, Task

    llm = LLM(model="openai/smollm2-135m", base_url=serve_model.base_url, api_key="unused", max_tokens=24, temperature=0)
    built: list[dict[str, str]] = []

    def make_crew(prompts: Any) -> Any:
        built.append(dict(prompts))
        solver = Agent(role="Solver", goal="Answer the question.", backstory=prompts["Solver"], llm=llm, allow_delegation=False, max_iter=1)
        checker = Agent(role="Checker", goal="Check the answer.", backstory=prompts["Checker"], llm=llm, allow_delegation=False, max_iter=1)
        tasks = [
            Task(description="{task}", expected_output="A number.", agent=solver),
            Task(description="Repeat the final number.", expected_output="A number.", agent=checker),
        ]
        return Crew(agents=[solver, checker], tasks=tasks, process=Process.sequential, verbose=False)

    system = maslens.CrewAISystem(make_crew, {"Solver": "You answer with a number.", "Checker": "You repeat the number."})
    tasks = [{"task": "What is 2 + 3?", "answer": "5"}, {"task": "What is 4 + 4?", "answer": "8"}]
    r = maslens.improve(
        system, tasks, lambda output, task: 0.0, model=serve_model.spec, locate_method="prior", iterations=1,
        rewrite_max_tokens=32, baseline=False, out=tmp_path, cache_path=str(tmp_path / "cache.sqlite"),
    )
    it = r.report["iterations"][0]
    assert it["chosen"] and [w["agent"] for w in it["rewrites"]] == it["chosen"]
    assert {"Solver", "Checker"} <= {s["agent"] for s in maslens.read(tmp_path / "traces.jsonl")[0].steps}
    # Every crew was built from the prompts the loop passed: the shipped ones, then a candidate
    # differing in the chosen agent only.
    changed = [p for p in built if p != dict(system.prompts)]
    assert all({a for a in p if p[a] != system.prompts[a]} <= set(it["chosen"]) for p in changed)
