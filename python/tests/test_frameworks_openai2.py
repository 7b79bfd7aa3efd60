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


def _crewai_llm(serve_model: ServeModel, max_tokens: int) -> Any:
    """CrewAI's LLM pointed at `serve-model` (greedy), with CrewAI's telemetry off; skips the
    test where CrewAI is not installed."""
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    crewai = pytest.importorskip("crewai")
    return crewai.LLM(model="openai/smollm2-135m", base_url=serve_model.base_url, api_key="unused", max_tokens=max_tokens, temperature=0)


def test_crewai_crew_output(serve_model: ServeModel) -> None:
    llm = _crewai_llm(serve_model, 60)
    from crewai import Agent, Crew, Process, Task

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


def test_crewai_system_in_the_improvement_loop(serve_model: ServeModel, tmp_path: Any) -> None:
    """A CrewAI crew as a maslens.System: each run builds the crew from the prompts (the agents'
    backstories); the loop rewrites only the chosen agent and writes its report."""
    llm = _crewai_llm(serve_model, 24)
    from crewai import Agent, Crew, Process, Task

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
    # The crew resumes, so the candidate was replayed (or each run says why not).
    replay = r.report["replay"]
    assert "unsupported" not in replay and (replay["rows"] or replay["skipped"]), replay


def test_crewai_system_resumes_at_the_named_task(serve_model: ServeModel) -> None:
    """A crew resumes as CrewAI resumes from a checkpoint: the history's answers become the
    outputs of the tasks before the replayed one (kept, not run again, and passed on as
    context), and the crew runs from the named agent's task with its changed prompt."""
    llm = _crewai_llm(serve_model, 24)
    from crewai import Agent, Crew, Process, Task

    built: list[dict[str, str]] = []

    def make_crew(prompts: Any) -> Any:
        built.append(dict(prompts))
        agents = {
            name: Agent(role=name, goal=goal, backstory=prompts[name], llm=llm, allow_delegation=False, max_iter=1)
            for name, goal in (("Solver", "Answer the question."), ("Checker", "Check the answer."), ("Scribe", "State the final number."))
        }
        tasks = [
            Task(description="{task}", expected_output="A number.", agent=agents["Solver"]),
            Task(description="Is the answer right?", expected_output="YES or NO.", agent=agents["Checker"]),
            Task(description="Repeat the final number.", expected_output="A number.", agent=agents["Scribe"]),
        ]
        return Crew(agents=list(agents.values()), tasks=tasks, process=Process.sequential, verbose=False)

    shipped = {"Solver": "You answer with a number.", "Checker": "You check answers.", "Scribe": "You repeat numbers."}
    system = maslens.CrewAISystem(make_crew, shipped)
    assert maslens.systems.can_resume(system)
    task = "What is 2 + 3?"
    history = [
        {"role": "user", "name": "user", "content": task},
        {"role": "assistant", "name": "Crew", "content": task},
        {"role": "assistant", "name": "Solver", "content": "The answer is 41."},
    ]
    changed = {**shipped, "Checker": "You are Checker. Reply only YES or NO."}
    run = system.resume(task, changed, history, "Checker")
    assert built[-1] == changed
    out = run.extra["result"]
    assert [t.agent for t in out.tasks_output] == ["Solver", "Checker", "Scribe"]
    assert out.tasks_output[0].raw == "The answer is 41.", "the history's answer is kept, not run again"
    checker = out.tasks_output[1].messages
    assert any(changed["Checker"] in str(m["content"]) for m in checker if m["role"] == "system"), checker
    assert any("The answer is 41." in str(m["content"]) for m in checker if m["role"] == "user"), "the history is the Checker's context"
    steps = run.trace.steps
    assert steps[-1]["agent"] == "Scribe" and run.output == out.raw

    with pytest.raises(ValueError, match="next task after the history is 'Checker''s, not 'Scribe''s"):
        system.resume(task, shipped, history, "Scribe")
    with pytest.raises(ValueError, match="'Checker' answered where 'Solver' works"):
        system.resume(task, shipped, [{"role": "assistant", "name": "Checker", "content": "YES"}], "Scribe")
    every = history + [{"role": "assistant", "name": "Checker", "content": "NO"}, {"role": "assistant", "name": "Scribe", "content": "5"}]
    with pytest.raises(ValueError, match="nothing is left to run"):
        system.resume(task, shipped, every, "Solver")
