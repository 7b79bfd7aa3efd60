"""maslens' debate runtime behind the improvement loop's system protocol (maslens.DebateSystem):
runs, resumes after recorded turns, reads datasets, and runs the loop with replay against the
real embedded model (which shows the loop runs, not that it helps)."""

from __future__ import annotations

from pathlib import Path

import pytest

import maslens
from conftest import ServeModel
from maslens import testing

CONFIG = """
name = "two-roles"
rounds = 1
[decoding]
temperature = 0.0
max_tokens = 16
[[roles]]
name = "proposer"
prompt = "You are the proposer. Pick the correct option."
[[roles]]
name = "skeptic"
prompt = "You are the skeptic. Check the options and pick the correct one."
[[aggregators]]
prompt = "Pick the answer most agents support."
"""


def test_a_debate_runs_and_resumes_after_its_recorded_turns(tmp_path: Path) -> None:
    fixture = testing.FixtureModel()
    with fixture as spec:
        system = maslens.DebateSystem(CONFIG, spec, cache="off")
        assert dict(system.prompts) == {"proposer": "You are the proposer. Pick the correct option.", "skeptic": "You are the skeptic. Check the options and pick the correct one."}
        assert isinstance(system, maslens.System) and maslens.systems.can_resume(system)
        task = system.task("Which is a primary colour?", ["Green", "Red", "Purple"], "B")
        run = system.run(task["task"], system.prompts)
        assert [s["agent"] for s in run.trace.steps] == ["proposer", "skeptic", "aggregator"]
        assert run.trace.outcome == "failure", "the fixture names no option: the gold letter B is missed"
        assert run.output == "" and fixture.calls == 3
        history = maslens.systems.history_of(run.trace, 1)
        history[0]["content"] = "I pick B) Red."
        resumed = system.resume(task["task"], system.prompts, history, "skeptic")
        assert resumed.trace.steps[0]["content"] == "I pick B) Red." and fixture.calls == 5, "the recorded turn is not asked for"
        with pytest.raises(ValueError, match="option lines"):
            system.run("What is 2 + 2?", system.prompts)
        with pytest.raises(ValueError, match="unknown agent"):
            system.run(task["task"], {**system.prompts, "judge": "x"})
        config = tmp_path / "debate.toml"
        config.write_text(CONFIG)
        assert maslens.DebateSystem(config, spec).config == CONFIG


def test_debate_tasks_come_from_a_dataset_and_bad_records_are_named(data: Path, tmp_path: Path) -> None:
    with testing.FixtureModel() as spec:
        system = maslens.DebateSystem(CONFIG, spec)
    tasks = system.tasks(f"mmlu:{data / 'mmlu/test/high_school_geography_test.csv'}")
    assert len(tasks) > 100 and tasks[0]["answer"] in "ABCD" and "\nA) " in tasks[0]["task"]
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"id": "1", "question": "2+2?", "options": ["3", "4"], "answer": "B"}\n{"question": 5}\n')
    with pytest.warns(UserWarning, match="q.jsonl: record 2"):
        assert len(system.tasks(f"jsonl:{bad}")) == 1


def test_the_loop_on_the_debate_runtime_with_the_real_model(serve_model: ServeModel, data: Path, tmp_path: Path) -> None:
    system = maslens.DebateSystem(CONFIG, serve_model.spec, cache_path=str(tmp_path / "debate-cache.sqlite"))
    tasks = system.tasks(f"mmlu:{data / 'mmlu/test/high_school_geography_test.csv'}")[:4]
    r = maslens.improve(
        system, tasks, model=serve_model.spec, locate_method="prior", iterations=1, rewrite_max_tokens=32,
        baseline=False, out=tmp_path / "out", cache_path=str(tmp_path / "cache.sqlite"),
    )
    assert r.report["iterations"], r.markdown
    it = r.report["iterations"][0]
    assert set(r.changed) <= set(it["chosen"]) <= set(system.prompts)
    replay = r.report.get("replay")
    if any(w.get("prompt") for w in it["rewrites"]):  # a candidate: replayed, since the debate resumes
        assert replay is not None and not replay.get("unsupported") and (replay["rows"] or replay["skipped"]), replay
        assert all(row["if_step"] >= 0 for row in replay["rows"])
    assert (tmp_path / "out" / "report.md").exists()
