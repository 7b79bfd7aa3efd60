"""maslens.modes: failure modes across runs, the same report as `maslens modes`, from verdicts
returned by maslens.locate or carried by traces; summaries against the real model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import maslens
from conftest import ServeModel, run_cli


def _timeless(report: dict[str, Any]) -> dict[str, Any]:
    for s in report["systems"]:
        for m in s["modes"]:
            for k in ("trend", "first_ns", "last_ns"):
                m.pop(k, None)
    return report


def test_modes_of_located_traces_match_the_cli(data: Path, maslens_bin: Path, tmp_path: Path) -> None:
    hc = data / "whowhen" / "Hand-Crafted"
    traces = maslens.read(hc)
    verdicts = maslens.locate(traces, method="prior", progress=False)
    report = maslens.modes(traces, verdicts, gold=True)
    located = tmp_path / "located.jsonl"
    cli = run_cli(maslens_bin, "locate", str(hc), "--method", "prior", "-q", "--json", "-o", str(located))
    assert cli.returncode == 0, cli.stderr
    cli = run_cli(maslens_bin, "--json", "-q", "modes", str(located), "--gold")
    assert cli.returncode == 0, cli.stderr
    assert _timeless(report.to_dict()) == _timeless(json.loads(cli.stdout))
    # The traces written by `locate -o` carry their verdicts: no verdicts argument needed.
    again = maslens.modes(maslens.read(located), gold=True)
    assert _timeless(again.to_dict()) == _timeless(report.to_dict())

    assert report.purity is not None
    assert report.purity["runs_with_gold"] == len(traces)
    assert report.purity["in_sample_runs"] == len(traces)
    assert sum(m["runs"] for m in report.modes) == len(traces)
    frame = report.to_pandas()
    assert list(frame.columns[:4]) == ["system", "id", "agent", "failure_type"]
    assert len(frame) == len(report.modes)
    assert "| these modes |" in report.markdown


def test_modes_options_are_checked() -> None:
    with pytest.raises(maslens.OptionsError, match="similarity: 2 is not between 0 and 1"):
        maslens.modes([], similarity=2)
    with pytest.raises(maslens.OptionsError, match="outcome"):
        maslens.modes([], outcome="failed")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="simlarity"):
        maslens.modes([], simlarity=0.5)  # type: ignore[call-arg]


def test_modes_summaries_from_the_real_model(data: Path, serve_model: ServeModel, cache: str) -> None:
    traces = maslens.read(data / "whowhen" / "Hand-Crafted")
    verdicts = maslens.locate(traces, method="prior", progress=False)
    report = maslens.modes(traces, verdicts, summarize=True, summarize_top=1, model=serve_model.spec, cache_path=cache)
    first = report.systems[0]["modes"][0]
    assert first.get("summary"), report.to_dict()
    assert "summary" not in report.systems[0]["modes"][1]


def test_propose_fix_from_the_real_model_matches_the_cli(data: Path, maslens_bin: Path, serve_model: ServeModel, tmp_path: Path, docs_cache: str) -> None:
    ag = data / "whowhen" / "Algorithm-Generated"
    traces = maslens.read(ag)
    verdicts = maslens.locate(traces, method="prior", progress=False)
    report = maslens.modes(traces, verdicts)
    cache = docs_cache  # docs/python.md proposes the same fix (its calls, once a session)
    # Who&When records some agents' prompts, not all: the report marks the modes a fix cannot be
    # proposed for, and proposing one anyway raises with the same reason.
    blocked = [m for m in report.modes if "do not record" in m.get("no_proposal", "")]
    open_ = [m for m in report.modes if "no_proposal" not in m]
    assert blocked and open_, report.modes
    with pytest.raises(maslens.OptionsError, match="do not record"):
        maslens.propose_fix(traces, blocked[0]["id"], verdicts, model=serve_model.spec, cache_path=cache)
    mode = open_[0]
    fix = maslens.propose_fix(traces, mode["id"], verdicts, model=serve_model.spec, cache_path=cache)
    assert fix.agent == mode["agent"] and fix.before.strip()
    assert fix.proposal["mode"] == mode["id"] and set(fix.examples) <= set(mode["members"])
    assert (fix.after is None) != (fix.rejected is None), fix.proposal
    assert f"# A fix proposed for {fix.agent}" in fix.markdown

    # The CLI on the same traces, model and cache gives the same proposal (the calls are cache hits).
    located = tmp_path / "located.jsonl"
    cli = run_cli(maslens_bin, "locate", str(ag), "--method", "prior", "-q", "--json", "-o", str(located))
    assert cli.returncode == 0, cli.stderr
    cli = run_cli(
        maslens_bin, "--json", "-q", "modes", str(located), "--propose", mode["id"],
        "--model", serve_model.spec, "--cache", cache,
    )
    assert cli.returncode == (0 if fix.after is not None else 1), cli.stderr
    assert json.loads(cli.stdout)["proposal"]["rewrite"] == fix.proposal["rewrite"]

    with pytest.raises(maslens.OptionsError, match='no failure mode "m999"'):
        maslens.propose_fix(traces, "m999", verdicts, model=serve_model.spec, cache_path=cache)
