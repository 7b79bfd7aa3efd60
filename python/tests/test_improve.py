"""maslens.improve: the loop on scripted planted-flaw systems (a fixture rewriter: decisions, files,
resume, budgets) and against the real embedded model (the loop runs; the 135M model shows nothing
about whether it helps)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

import maslens
from conftest import ServeModel
from maslens import testing


class Counting:
    """A system that counts its runs (what a resume must not repeat)."""

    def __init__(self, inner: testing.PlantedFlawSystem) -> None:
        self.inner = inner
        self.prompts = inner.prompts
        self.runs = 0

    def run(self, task: str, prompts: Mapping[str, str]) -> maslens.Run:
        self.runs += 1
        return self.inner.run(task, prompts)


def test_the_loop_changes_only_the_planted_agent_and_writes_its_report(tmp_path: Path) -> None:
    system = testing.PlantedFlawSystem("chain4", "Planner", "wrong-value", seed=2)
    with testing.FixtureModel() as spec:
        r = maslens.improve(system, testing.tasks(16, 2), model=spec, locate_method="prior", iterations=6, out=tmp_path, cache="off")
    assert r.changed == ["Planner"]
    assert r.report["initial_score"] < 0.5 and r.report["final_score"] == 1.0
    for it in r.report["iterations"]:
        for w in it["rewrites"]:
            assert w["agent"] in it["chosen"], "only the chosen agents are rewritten"
    kept = [it for it in r.report["iterations"] if (it.get("acceptance") or {}).get("accepted")]
    assert [it["chosen"] for it in kept] == [["Planner"]]
    assert kept[0]["acceptance"]["lo"] > 0
    # The baseline had the loop's call budget and changed every agent.
    b = r.report["baseline"]
    assert b["budget_calls"] == r.report["usage"]["calls"] and b["calls"] <= b["budget_calls"]
    assert sorted(b["final_prompts"]) == sorted(system.prompts)
    for name in ("report.json", "report.md", "report.html", "prompts.diff", "traces.jsonl", "state.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "+++ b/Planner" in (tmp_path / "prompts.diff").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["final_prompts"]["Planner"] == r.prompts["Planner"]
    assert "## Black-box baseline" in r.markdown
    # The trace set (every run, the baseline's too) reads back as traces.
    runs = json.loads((tmp_path / "state.json").read_text())["runs"]
    assert len(maslens.read(tmp_path / "traces.jsonl")) == len(runs) > r.report["system_runs"]


def test_a_stopped_loop_resumes_without_repeating_runs_or_calls(tmp_path: Path) -> None:
    system = Counting(testing.PlantedFlawSystem("star", "Adder", "dropped-operand", seed=1))
    tasks = testing.tasks(12, 1)
    cache = str(tmp_path / "cache.sqlite")
    with testing.FixtureModel() as spec:
        stopped = maslens.improve(system, tasks, model=spec, locate_method="prior", out=tmp_path, max_runs=20, cache_path=cache)
        assert "20 system runs made" in stopped.report["stopped"]
        assert system.runs == 20
        done = maslens.improve(system, tasks, model=spec, locate_method="prior", out=tmp_path, cache_path=cache)
        assert done.report.get("stopped") is None and done.changed == ["Adder"]
        first = system.runs
        again = maslens.improve(system, tasks, model=spec, locate_method="prior", out=tmp_path, cache_path=cache)
    assert system.runs == first, "a finished loop rerun makes no system run"
    assert again.report["system_runs"] == 0
    assert again.prompts == done.prompts
    usage = again.report["usage"]
    assert usage["calls"] > 0 and usage.get("cache_hits", 0) == usage["calls"], usage


def test_the_model_budget_stops_the_loop_with_a_report(tmp_path: Path) -> None:
    # The prior blames Reader last on this system (bench/improve_planted.py): the loop needs four
    # rewrites, and one call is allowed.
    system = testing.PlantedFlawSystem("chain4", "Reader", "wrong-value", seed=1)
    fixture = testing.FixtureModel()
    with fixture as spec:
        model = maslens.Model(spec, max_calls=1, cache="off")
        r = maslens.improve(system, testing.tasks(16, 1), model=model, locate_method="prior", iterations=6, out=tmp_path)
    assert "limit 1" in r.report["stopped"], r.report
    assert "Stopped early" in r.markdown and (tmp_path / "report.md").exists()
    assert fixture.calls == 1, "one request reached the model; the second was refused"
    assert model.usage()["total"]["errors"] == 1
    assert r.changed == [] and len(r.report["iterations"]) == 1


def test_bad_arguments_are_refused() -> None:
    system = testing.PlantedFlawSystem("chain3", "Solver", "wrong-value")
    with pytest.raises(ValueError, match="held_out"):
        maslens.improve(system, testing.tasks(4, 0), held_out=1.5, model="openai:x@http://127.0.0.1:9/v1")
    with pytest.raises(TypeError, match="maslens.System"):
        maslens.improve(object(), [], model=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_call"):
        maslens.improve(system, [], max_call=3)  # type: ignore[call-arg]


def test_replay_from_the_decisive_step_verifies_the_kept_change(tmp_path: Path) -> None:
    """Failed runs re-run from their located step: with the old prompts the planted flaw fails
    again (RR 0), with the kept change it is repaired (RR 1); successes stay successes (SPR 1).
    A resumed run is kept in the state like any other."""
    system = Counting(testing.PlantedFlawSystem("chain4", "Solver", "wrong-value", seed=1))
    system.resume = system.inner.resume  # type: ignore[attr-defined]
    with testing.FixtureModel() as spec:
        r = maslens.improve(system, testing.tasks(16, 2), model=spec, locate_method="prior", out=tmp_path, cache="off", baseline=False, resamples=500)
    assert r.changed == ["Solver"]
    replay = r.report["replay"]
    assert replay["kept"] and replay["changed"] == ["Solver"] and replay["system_runs"] > 0
    stats = {c["config"]: c for c in replay["stats"]}
    held = stats["held-out"]
    assert held["failure_traces"] > 0 and held["rr_noop"] == 0.0 and held["rr_fix"] == 1.0
    assert held["delta_rr"]["lo"] > 0 and held["spr_fix"] == 1.0
    for row in replay["rows"]:
        assert row["if_step"] >= 1 and row["intervention"] in ("noop", "fix")
    assert "## Replay from the decisive step" in r.markdown and "| held-out |" in r.markdown
    before = system.runs
    with testing.FixtureModel() as spec:
        again = maslens.improve(system, testing.tasks(16, 2), model=spec, locate_method="prior", out=tmp_path, cache="off", baseline=False, resamples=500)
    assert system.runs == before and again.report["replay"]["rows"] == replay["rows"]


def test_a_system_that_cannot_resume_is_said_so_and_a_bad_history_is_skipped(tmp_path: Path) -> None:
    inner = testing.PlantedFlawSystem("chain3", "Planner", "dropped-operand", seed=3)
    plain = maslens.FunctionSystem(inner.run, inner.prompts)
    assert not maslens.systems.can_resume(plain)
    with testing.FixtureModel() as spec:
        r = maslens.improve(plain, testing.tasks(12, 3), model=spec, locate_method="prior", out=tmp_path / "a", cache="off", baseline=False, resamples=200)
    assert "cannot go on from a message history" in r.report["replay"]["unsupported"]
    assert "Not replayed: FunctionSystem cannot" in r.markdown

    def refuse(task: str, prompts: Mapping[str, str], history: object, agent: str) -> maslens.Run:
        raise ValueError("no such turn")

    picky = maslens.FunctionSystem(inner.run, inner.prompts, resume_fn=refuse)
    with testing.FixtureModel() as spec:
        r = maslens.improve(picky, testing.tasks(12, 3), model=spec, locate_method="prior", out=tmp_path / "b", cache="off", baseline=False, resamples=200)
    replay = r.report["replay"]
    assert replay["rows"] == [] and replay["skipped"]
    assert all("resume failed: no such turn" in s or "not located" in s or "no changed agent" in s for s in replay["skipped"]), replay["skipped"]
    with pytest.raises(ValueError, match="cannot resume chain3 at step 2"):
        inner.resume("Compute (1 + 2) * 3.", inner.prompts, [{"role": "user", "name": "user", "content": "Compute (1 + 2) * 3."}, {"role": "assistant", "name": "Planner", "content": "x"}], "Checker")


def test_the_loop_against_the_real_model(serve_model: ServeModel, cache: str, tmp_path: Path) -> None:
    """The embedded model rewrites and proposes the baseline: the loop runs end to end (the prior
    localizes; the stacked localizer against the real model is tested in test_methods.py). Whether
    a change is kept says nothing about quality with a 135M model."""
    system = testing.PlantedFlawSystem("chain3", "Solver", "wrong-value", seed=0)
    r = maslens.improve(
        system, testing.tasks(4, 0), model=serve_model.spec, locate_method="prior", iterations=1,
        rewrite_max_tokens=40, out=tmp_path, cache_path=cache,
    )
    it = r.report["iterations"][0]
    assert it["failures"] > 0 and it["located"] > 0
    assert it["chosen"] and [w["agent"] for w in it["rewrites"]] == it["chosen"]
    assert set(r.changed) <= set(it["chosen"])
    assert r.report["usage"]["calls"] >= 1 and r.report["baseline"]["calls"] >= 1
    assert (tmp_path / "report.html").exists()


def test_the_cli_runs_the_loop_on_a_python_entry_point(maslens_bin: Path, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "team.py").write_text(
        "from maslens import testing\n"
        "def system():\n"
        "    return testing.PlantedFlawSystem('chain3', 'Planner', 'dropped-operand', seed=3)\n"
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in testing.tasks(12, 3)))
    out = tmp_path / "out"
    fixture = testing.FixtureModel()
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    with fixture as spec:
        args = [str(maslens_bin), "improve", "--python", sys.executable, "team:system", "--tasks", str(tasks), "--out", str(out)]
        # --db stores the loop's report where `maslens serve` shows it beside the system's proposals.
        db = tmp_path / "store.db"
        with_db = [*args[:2], "--db", str(db), *args[2:]]
        run = subprocess.run([*with_db, "--model", spec, "--locate-method", "prior", "--cache-path", str(tmp_path / "c.sqlite")], capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert "improvement report of team:system stored in" in run.stderr, run.stderr
    import sqlite3
    with sqlite3.connect(db) as con:
        stored = con.execute("SELECT name, body FROM improve_reports").fetchall()
    assert [name for name, _ in stored] == ["team:system"]
    assert json.loads(stored[0][1]) == json.loads((out / "report.json").read_text())
    assert "# maslens improve: team:system" in run.stdout
    assert json.loads((out / "report.json").read_text())["final_prompts"]["Planner"] != testing.PlantedFlawSystem("chain3", "Planner", "dropped-operand").prompts["Planner"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "Compute (1 + 2) * 3."}\n{"answer": "9"}\n')
    run = subprocess.run([*args[:6], str(bad), "--out", str(out)], capture_output=True, text=True, env=env, check=False)
    assert run.returncode != 0 and "bad.jsonl line 2: field `task`" in run.stderr, run.stderr
    run = subprocess.run([str(maslens_bin), "improve", "--python", "/nonexistent/python", "x:y"], capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "cannot run the Python interpreter" in run.stderr


def _agentchat(serve_model: ServeModel) -> maslens.System:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    info = {"vision": False, "function_calling": False, "json_output": False, "family": "unknown", "structured_output": False}
    client = OpenAIChatCompletionClient(model="local:smollm2-135m", base_url=serve_model.base_url, api_key="unused", model_info=info, max_tokens=24, temperature=0.0)  # type: ignore[arg-type]

    def make_team(prompts: Mapping[str, str]) -> object:
        agents = [AssistantAgent(n, model_client=client, system_message=prompts[n]) for n in ("Solver", "Checker")]
        return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(3))  # type: ignore[arg-type]

    return maslens.AgentChatSystem(make_team, {"Solver": "You are Solver. Answer with a number.", "Checker": "You are Checker. Repeat the number."})


def _openai_agents(serve_model: ServeModel) -> maslens.System:
    from openai import AsyncOpenAI

    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, set_tracing_disabled

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(model="local:smollm2-135m", openai_client=AsyncOpenAI(base_url=serve_model.base_url, api_key="unused"))

    def make_agent(prompts: Mapping[str, str]) -> object:
        writer = Agent(name="Writer", instructions=prompts["Writer"], model=model, model_settings=ModelSettings(max_tokens=24))
        return Agent(name="Triage", instructions=prompts["Triage"], model=model, handoffs=[writer], model_settings=ModelSettings(tool_choice="required", max_tokens=24))

    return maslens.OpenAIAgentsSystem(make_agent, {"Triage": "Hand every question to the Writer.", "Writer": "Answer with a number."}, max_turns=4)


def _langgraph(serve_model: ServeModel) -> maslens.System:
    from langchain_core.messages import AIMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = ChatOpenAI(model="local:smollm2-135m", base_url=serve_model.base_url, api_key="unused", max_tokens=24, temperature=0)  # type: ignore[call-arg, arg-type]

    def make_graph(prompts: Mapping[str, str]) -> object:
        def node(name: str) -> object:
            def call(state: MessagesState) -> dict[str, object]:
                return {"messages": [AIMessage(content=llm.invoke([("system", prompts[name]), *state["messages"]]).content)]}

            return call

        g = StateGraph(MessagesState)
        g.add_node("solver", node("solver"))  # type: ignore[call-overload]
        g.add_node("checker", node("checker"))  # type: ignore[call-overload]
        g.add_edge(START, "solver")
        g.add_edge("solver", "checker")
        g.add_edge("checker", END)
        return g.compile()

    return maslens.LangGraphSystem(make_graph, {"solver": "You are solver. Answer with a number.", "checker": "You are checker. Repeat the number."})


@pytest.mark.parametrize("framework", ["autogen-agentchat", "openai-agents", "langgraph"])
def test_the_loop_on_real_frameworks(framework: str, serve_model: ServeModel, tmp_path: Path) -> None:
    """A real AutoGen AgentChat team, OpenAI Agents SDK pair and LangGraph graph against serve-model: the loop
    runs, rewrites only the chosen agents, writes its files, replays its candidate from the
    decisive step (each adapter resumes), resumes without a system run or a backend call,
    and stops on its budget with a report."""
    pytest.importorskip({"autogen-agentchat": "autogen_agentchat", "openai-agents": "agents", "langgraph": "langgraph"}[framework])
    builders = {"autogen-agentchat": _agentchat, "openai-agents": _openai_agents, "langgraph": _langgraph}
    system = builders[framework](serve_model)
    tasks = [{"task": "What is 2 + 3? Answer with the number only.", "answer": "5"}, {"task": "What is 4 + 4?", "answer": "8"}]
    never = lambda output, task: 0.0  # noqa: E731  (every run fails: the loop always has work)
    cache = str(tmp_path / "cache.sqlite")
    args: dict[str, object] = {"locate_method": "prior", "iterations": 1, "rewrite_max_tokens": 32, "baseline": False, "out": tmp_path}
    r = maslens.improve(system, tasks, never, model=serve_model.spec, cache_path=cache, **args)  # type: ignore[arg-type]
    it = r.report["iterations"][0]
    assert it["failures"] == 1 and it["chosen"] and [w["agent"] for w in it["rewrites"]] == it["chosen"]
    assert r.changed == [], "a change that scores 0 like the old prompts is not kept"
    assert (tmp_path / "report.md").exists() and (tmp_path / "prompts.diff").exists()
    replay = r.report["replay"]  # the last candidate, replayed from the decisive step
    assert replay["rows"] and not replay["skipped"], replay
    assert {row["intervention"] for row in replay["rows"]} == {"noop", "fix"}
    runs = r.report["system_runs"]
    assert runs >= 3

    model = maslens.Model(serve_model.spec, cache_path=cache)
    again = maslens.improve(system, tasks, never, model=model, **args)  # type: ignore[arg-type]
    assert again.report["system_runs"] == 0, "every run came from the resume state"
    total = model.usage()["total"]
    assert total["calls"] == total.get("cache_hits", 0) > 0, "every model call came from the cache"

    # One call: the rewrite has it, the baseline's proposal is refused.
    tight = maslens.Model(serve_model.spec, cache="off", max_calls=1)
    stopped = maslens.improve(system, tasks, never, model=tight, **{**args, "baseline": True})  # type: ignore[arg-type]
    assert "limit 1" in stopped.report["stopped"] and stopped.report["system_runs"] == 0
