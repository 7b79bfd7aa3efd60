"""The methods from Python give what the CLI gives on the same input; LLM-backed ones run
against a real model (`maslens serve-model` with the embedded SmolLM2)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import maslens
from conftest import ServeModel, run_cli


def test_locate_prior_matches_the_cli(data: Path, maslens_bin: Path) -> None:
    ag = data / "whowhen" / "Algorithm-Generated"
    verdicts = maslens.locate(ag, method="prior", progress=False)
    cli = run_cli(maslens_bin, "locate", str(ag), "--method", "prior", "--json", "--quiet")
    assert cli.returncode == 0, cli.stderr
    expected = [json.loads(line) for line in cli.stdout.splitlines() if line.strip()]
    assert len(verdicts) == len(expected) > 50
    for v, e in zip(verdicts, expected, strict=True):
        assert v.trace == e["trace"]
        assert (v.agent, v.step) == (e["agent"], e["step"])
        assert v.to_dict() == e
    frame = verdicts.to_pandas()
    assert list(frame.columns[:4]) == ["trace", "method", "agent", "step"]
    assert frame["step"].notna().all()
    assert verdicts.by_trace(expected[0]["trace"]).step == expected[0]["step"]


def test_options_are_checked_and_name_the_option(data: Path, serve_model: ServeModel) -> None:
    t = data / "whowhen" / "Algorithm-Generated" / "1.json"
    with pytest.raises(maslens.OptionsError, match="protocol"):
        maslens.locate(t, method="prior", protocol="sideways")  # type: ignore[arg-type]
    with pytest.raises(maslens.OptionsError, match="lambda"):
        maslens.credit(t, model=serve_model.spec, lambda_=2.0)
    with pytest.raises(maslens.OptionsError, match="cache"):
        maslens.Model(serve_model.spec, cache="sometimes")
    with pytest.raises(maslens.OptionsError, match="go to Model"):
        # Models open with a preflight (an unreachable one is refused before any option is looked
        # at), so these checks use a real one.
        maslens.locate(t, model=maslens.Model(serve_model.spec), max_calls=3)
    with pytest.raises(TypeError):
        maslens.locate(t, method="prior", protocl="all-at-once")  # type: ignore[call-arg]


def test_progress_callback_sees_every_trace(data: Path) -> None:
    seen: list[tuple[int, int, str]] = []
    maslens.locate(data / "whowhen" / "Hand-Crafted", method="prior", progress=lambda d, n, label: seen.append((d, n, label)))
    assert seen and seen[-1][0] == seen[-1][1]


def test_a_progress_callback_that_raises_stops_the_run(data: Path) -> None:
    def stop(done: int, total: int, label: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        maslens.locate(data / "whowhen" / "Hand-Crafted", method="prior", progress=stop)


def test_advantages_match_the_cli(root: Path, maslens_bin: Path) -> None:
    path = root / "examples" / "inputs" / "grpo-groups.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    adv = maslens.advantages(records)
    cli = run_cli(maslens_bin, "advantages", str(path))
    assert cli.returncode == 0, cli.stderr
    expected = [json.loads(line) for line in cli.stdout.splitlines() if line.strip()]
    assert adv.to_dicts() == expected
    assert list(adv.to_pandas().columns) == ["group", "id", "advantage"]


def test_advantages_leave_out_bad_records_with_a_warning_naming_them() -> None:
    records: list[dict[str, Any]] = [
        {"group": "g", "id": "a", "success": True, "if_cost": 1.0},
        {"group": "g", "id": "b", "success": False, "if_cost": 0.0},
        {"group": "g", "id": "c", "success": "yes", "if_cost": 0.0},
        {"group": "g", "id": "d", "success": True, "if_cost": float("nan")},
    ]
    with pytest.warns(UserWarning) as w:
        adv = maslens.advantages(records)
    assert [a.id for a in adv] == ["a", "b"]
    text = " ".join(str(x.message) for x in w)
    assert "line 3" in text and "success" in text
    assert "line 4" in text and "if_cost" in text
    assert adv[0].advantage > 0 > adv[1].advantage


def test_prior_eval_train_and_rank_match_the_cli(data: Path, maslens_bin: Path, tmp_path: Path) -> None:
    """`maslens.prior_eval/prior_train/prior_rank` are the CLI's `prior eval/train/rank`: the same
    report, the same model file, the same candidates; an evaluation on the training traces warns."""
    hc = data / "whowhen" / "Hand-Crafted"
    with pytest.warns(UserWarning, match="built-in prior was trained on 31 of these 31"):
        report = maslens.prior_eval(hc, bootstrap=100)
    cli = run_cli(maslens_bin, "prior", "eval", str(hc), "--bootstrap", "100", "--json")
    assert cli.returncode == 0, cli.stderr
    assert report == json.loads(cli.stdout)
    assert report["format_version"] == 5 and report["in_sample"]
    assert report["protocols"][0]["methods"][0]["in_sample"] == report["in_sample"]

    ag = sorted((data / "whowhen" / "Algorithm-Generated").glob("*.json"))[:12]
    model = tmp_path / "py.json"
    trained = maslens.prior_train(ag, model, folds=0, alpha=150.0)
    cli_model = tmp_path / "cli.json"
    args = ["prior", "train", *map(str, ag), "--folds", "0", "--alpha", "150", "--json", "--out", str(cli_model)]
    cli = run_cli(maslens_bin, *args)
    assert cli.returncode == 0, cli.stderr
    assert trained == json.loads(cli.stdout)
    py_m, cli_m = json.loads(model.read_text()), json.loads(cli_model.read_text())
    py_m["training"].pop("note"), cli_m["training"].pop("note")  # each names its own inputs
    assert py_m == cli_m and len(py_m["training"]["trace_sha256"]) == 12

    with pytest.warns(UserWarning, match="this prior model was trained on 12 of these 12"):
        maslens.prior_eval(ag, model=model, bootstrap=50)
    ranked = maslens.prior_rank(ag[:2], model=model, top=3)
    cli = run_cli(maslens_bin, "prior", "rank", *map(str, ag[:2]), "--model", str(model), "--top", "3", "--json")
    assert ranked == [json.loads(line) for line in cli.stdout.splitlines() if line.strip()]
    with pytest.raises(maslens.OptionsError, match="pair_rule"):
        maslens.prior_train(ag, model, pair_rule="sideways")  # type: ignore[arg-type]


def test_inject_matches_the_cli_and_runs_on_a_real_model(root: Path, serve_model: ServeModel, maslens_bin: Path, tmp_path: Path) -> None:
    """`maslens.inject` is `maslens inject`: on the simulated system, the same summary and the
    same labelled traces; against a real model (the embedded one behind `serve-model`), the
    summary it returns is the file it wrote, with the clean and the injected runs counted."""
    py_out, cli_out = tmp_path / "py", tmp_path / "cli"
    summary = maslens.inject(py_out, simulation=True, questions=4, per_run=2, seed=1, progress=False)
    cli = run_cli(maslens_bin, "inject", "--simulation", "--questions", "4", "--per-run", "2", "--seed", "1", "-o", str(cli_out))
    assert cli.returncode == 0, cli.stderr
    assert summary == json.loads((py_out / "summary.json").read_text()) == json.loads((cli_out / "summary.json").read_text())
    assert (py_out / "traces.jsonl").read_text() == (cli_out / "traces.jsonl").read_text()
    labelled = maslens.read(py_out / "traces.jsonl")
    assert summary["summary"]["labelled"] == len(labelled) > 0
    assert all(t.labels["decisive"] for t in labelled)
    with pytest.raises(maslens.OptionsError, match="kinds: unknown fault kind"):
        maslens.inject(tmp_path / "x", simulation=True, kinds=["bad-tool"])  # type: ignore[list-item]
    with pytest.raises(maslens.OptionsError, match="no dataset"):
        maslens.inject(tmp_path / "x", root / "examples/debate-smoke.toml", model=serve_model.spec)

    real = tmp_path / "real"
    seen: list[tuple[int, int]] = []
    summary = maslens.inject(
        real,
        root / "examples/debate-smoke.toml",
        dataset=f"jsonl:{root / 'examples/inputs/easy-mcq.jsonl'}",
        model=serve_model.spec,
        questions=1,
        per_run=1,
        progress=lambda done, total, _label: seen.append((done, total)),
    )
    assert summary == json.loads((real / "summary.json").read_text())
    assert summary["summary"]["questions"] == 1 and seen[-1] == (1, 1)
    (question,) = summary["questions"]
    assert len(question["tried"]) == (1 if question["clean_correct"] else 0)


def test_eval_locate_prior_matches_the_cli(data: Path, maslens_bin: Path, tmp_path: Path) -> None:
    spec = f"aegis:{data / 'aegis' / 'sample.jsonl'}"
    report = maslens.eval_locate(spec, method="prior", out=tmp_path / "ev", progress=False)
    cli = run_cli(maslens_bin, "eval", "locate", spec, "--method", "prior", "--json", "--quiet")
    assert cli.returncode in (0, 1), cli.stderr
    expected = json.loads(cli.stdout)
    assert report.cases == expected["cases"] == 5
    for key in ("metrics", "baselines"):
        if key in expected:
            assert report.report[key] == expected[key]
    assert (tmp_path / "ev" / "report.json").exists()
    assert len(report.to_pandas()) == report.cases
    assert "maslens eval locate" in report.markdown


def test_locate_llm_against_a_real_model(root: Path, serve_model: ServeModel, cache: str) -> None:
    model = maslens.Model(serve_model.spec, cache_path=cache)
    verdicts = maslens.locate(root / "examples" / "whowhen-style.json", method="llm", model=model, progress=False)
    (v,) = verdicts
    assert v.error is None, v.error
    assert v.method.startswith("locate/")
    raw = v.to_dict()
    assert raw["model"] == model.id and len(raw["payload"]["evaluators"]) == 3
    if v.ok:
        assert v.agent == v.step_agent, "the verdict's agent acts at its step"
    usage = model.usage()
    assert usage["total"]["calls"] >= 2
    # The same request again comes from the cache: no new model call.
    calls = usage["total"]["calls"] - usage["total"].get("cache_hits", 0)
    maslens.locate(root / "examples" / "whowhen-style.json", method="llm", model=model, progress=False)
    again = model.usage()["total"]
    assert again["calls"] - again.get("cache_hits", 0) == calls


@pytest.fixture()
def locate_cache(docs_cache: str) -> str:
    """One LLM cache for the four methods below and docs/python.md's example (the same trace and
    model): the default and `stacked` run the same calls, and `llm` the pipeline's, so the first to
    run makes them and the others read them; each still compares Python with the CLI replaying
    that same cache."""
    return docs_cache


@pytest.mark.parametrize("method", [None, "stacked", "llm", "prior"])
def test_locate_equals_the_cli_for_every_method(root: Path, serve_model: ServeModel, maslens_bin: Path, locate_cache: str, method: str | None) -> None:
    """`maslens.locate(trace)` is `maslens locate TRACE` (stacked by default) for every method:
    with the same model and cache, the same verdict (the CLI replays the calls Python made, so a
    call Python did not make is an error); `crates/cli/tests/one_answer_e2e.rs` checks the server
    and `eval locate` the same way."""
    cache = locate_cache
    path = root / "examples" / "whowhen-style.json"
    kw: dict[str, Any] = {} if method is None else {"method": method}
    (v,) = maslens.locate(path, model=serve_model.spec, cache_path=cache, progress=False, **kw)
    assert v.error is None, v
    assert v.method == "stacked" if method in (None, "stacked") else v.method.startswith(method if method == "prior" else "locate/")
    if v.method == "stacked":
        assert v.raw["payload"]["pipeline"] is not None or v.raw["payload"]["pipeline_error"], "the pipeline ran"
    flags = [] if method is None else ["--method", method]
    cli = run_cli(maslens_bin, "locate", str(path), "--model", serve_model.spec, "--cache", cache, "--cache-mode", "replay", "--json", "--quiet", *flags)
    assert cli.returncode in (0, 1), cli.stderr
    expected = json.loads(cli.stdout.splitlines()[0])
    for key in ("agent", "step", "probability", "rationale", "alternatives", "heads", "method", "model", "revision"):
        assert v.raw.get(key) == expected.get(key), key
    assert v.agent == v.step_agent
    # The text is the CLI's, line for line.
    human = run_cli(maslens_bin, "locate", str(path), "--model", serve_model.spec, "--cache", cache, "--cache-mode", "replay", "--quiet", *flags)
    assert str(v) == human.stdout.rstrip("\n"), (str(v), human.stdout)


def test_llm_calls_release_the_gil(root: Path, serve_model: ServeModel, cache: str) -> None:
    """While `locate` waits for the model, another Python thread keeps running."""
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    th = threading.Thread(target=count)
    th.start()
    start = time.monotonic()
    try:
        maslens.locate(root / "examples" / "whowhen-style.json", model=serve_model.spec, cache="off", progress=False, evaluators=["base"])
    finally:
        done.set()
        th.join()
    elapsed = time.monotonic() - start
    assert elapsed > 0.5, "the call should take model time"
    # A thread blocked by a held GIL would get ~0 ticks; allow scheduling noise.
    assert ticks > elapsed * 100, (ticks, elapsed)


def test_async_variants_run_side_by_side(data: Path) -> None:
    async def both() -> list[maslens.Verdicts]:
        return list(
            await asyncio.gather(
                maslens.locate_async(data / "whowhen" / "Hand-Crafted", method="prior", progress=False),
                maslens.locate_async(data / "whowhen" / "Algorithm-Generated", method="prior", progress=False),
            )
        )

    hc, ag = asyncio.run(both())
    assert len(hc) > 0 and len(ag) > 0
    assert hc.to_dicts() == maslens.locate(data / "whowhen" / "Hand-Crafted", method="prior", progress=False).to_dicts()


def test_scan_and_credit_against_a_real_model(root: Path, serve_model: ServeModel, docs_cache: str) -> None:
    # docs/python.md's scan and credit of this trace (default options), checked in depth: its cache.
    model = maslens.Model(serve_model.spec, cache_path=docs_cache)
    trace = maslens.read(root / "examples" / "whowhen-style.json")[0]
    # Scan and credit report progress through the same callback as locate: once per trace,
    # whether it was scanned or failed.
    seen: list[tuple[int, int, str]] = []
    scan = maslens.scan(trace, model=model, progress=lambda d, n, label: seen.append((d, n, label)))
    assert seen == [(1, 1, trace.id)], seen
    assert scan.raw["model"] == model.id
    assert len(scan.traces) + len(scan.errors) == 1
    if scan.traces:
        s = scan.traces[0]
        assert s.id == trace.id and s.risk >= 0
        assert len(scan.to_pandas()) == 1
        for e in scan.events():
            assert e.step in {st["index"] for st in trace.steps}
    seen.clear()
    credit = maslens.credit(trace, model=model, progress=lambda d, n, label: seen.append((d, n, label)))
    assert seen == [(1, 1, trace.id)], seen
    assert credit.model == model.id
    assert len(credit.traces) + len(credit.errors) == 1
    if credit.traces:
        table = credit.to_pandas()
        assert list(table.index) == credit.table["roles"]
    assert model.usage()["total"]["calls"] > 0


def test_budget_stops_cleanly_and_says_so(root: Path, serve_model: ServeModel, cache: str) -> None:
    with pytest.warns(UserWarning, match="stopped early"):
        v = maslens.locate(root / "examples" / "whowhen-style.json", model=serve_model.spec, cache_path=cache, max_calls=1, progress=False)
    assert v.stopped is not None and "budget" in v.stopped.lower()


def test_eval_compare_on_a_real_model_matches_the_cli(data: Path, maslens_bin: Path, serve_model: ServeModel, tmp_path: Path) -> None:
    spec = f"aegis:{data / 'aegis' / 'sample.jsonl'}"
    cache = str(tmp_path / "cache.sqlite")
    methods = ("prior", "all-at-once")
    report = maslens.eval_compare(
        spec, methods=methods, model=serve_model.spec, cache_path=cache, limit=1,
        out=tmp_path / "cmp", progress=False,
    )
    assert [m["name"] for m in report.report["methods"]] == list(methods)
    assert report.report["methods"][1]["usage"]["calls"] >= 1, "the Judge ran"
    # Aegis labels the faulty agents, not a step: only agent accuracy is paired.
    assert [t["metric"] for t in report.report["paired"]] == ["agent"]
    assert report.report["methods"][0]["step_accuracy"] is None
    assert (tmp_path / "cmp" / "compare.json").exists() and (tmp_path / "cmp" / "all-at-once" / "report.json").exists()
    assert list(report.to_pandas()["method"]) == list(methods)
    assert "## Paired tests" in report.markdown

    # The CLI with the same model and cache gives the same table (every call a cache hit).
    cli = run_cli(
        maslens_bin, "--json", "-q", "eval", "compare", spec, "--methods", ",".join(methods),
        "--limit", "1", "--model", serve_model.spec, "--cache", cache,
    )
    assert cli.returncode in (0, 1), cli.stderr
    expected = json.loads(cli.stdout)
    assert expected["paired"] == report.report["paired"]
    for ours, theirs in zip(report.report["methods"], expected["methods"]):
        assert ours["agent_accuracy"] == theirs["agent_accuracy"]
        assert ours["step_accuracy"] == theirs["step_accuracy"]

    # Both ground-truth settings in one table: the Judge's row twice, the prior's once.
    both = maslens.eval_compare(
        spec, methods=methods, model=serve_model.spec, cache_path=cache, limit=1,
        both_ground_truth=True, progress=False,
    )
    assert [m["name"] for m in both.report["methods"]] == ["prior", "all-at-once", "all-at-once+gt"]
    assert both.report["both_ground_truth"] is True
    assert [m["with_ground_truth"] for m in both.report["methods"]] == [False, False, True]
    with pytest.raises(maslens.OptionsError, match="leave out with_ground_truth"):
        maslens.eval_compare(spec, methods=methods, both_ground_truth=True, with_ground_truth=True, progress=False)

    with pytest.raises(maslens.OptionsError, match='unknown method "agenttracer"'):
        maslens.eval_compare(spec, methods=("agenttracer",), progress=False)  # type: ignore[arg-type]


def test_compare_method_names_are_the_native_ones() -> None:
    """The typed names (`CompareMethod`, the default `ALL_METHODS`) are the Rust ones, in order."""
    from typing import get_args

    from maslens import _native
    from maslens._compare import ALL_METHODS, CompareMethod

    assert list(ALL_METHODS) == _native.compare_methods()
    assert set(get_args(CompareMethod)) == set(ALL_METHODS) | {"llm"}


def test_credit_result_carries_a_table_per_system() -> None:
    """The credit file's `systems` (one table per multi-agent system, crates/cli/tests/credit_cli.rs
    makes one) reach `CreditResult.systems`; a one-system file has none."""
    from maslens._results import CreditResult

    table = {"roles": ["a"], "rounds": ["round 1"], "cell": [[0.5]], "role_credit": [0.5], "round_credit": [0.5]}
    systems = [{"traces": ["t1"], "agents": ["a"], "table": table}, {"traces": ["t2"], "agents": ["b"], "table": table}]
    run = {"model": "m", "table": table, "traces": [], "errors": [], "systems": systems}
    assert CreditResult._from(run).systems == systems
    assert CreditResult._from({**run, "systems": []}).systems == []
    assert CreditResult._from({k: v for k, v in run.items() if k != "systems"}).systems == []
