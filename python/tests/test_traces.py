"""Traces from files, dicts and messages; typed errors that name the record and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import maslens
from conftest import run_cli


def test_read_whowhen_matches_the_cli(data: Path, maslens_bin: Path) -> None:
    hc = data / "whowhen" / "Hand-Crafted"
    traces = maslens.read(hc)
    assert len(traces) == len(list(hc.glob("*.json")))
    assert traces.errors == []
    cli = run_cli(maslens_bin, "import", str(hc))
    assert cli.returncode == 0, cli.stderr
    cli_ids = [json.loads(line)["id"] for line in cli.stdout.splitlines() if line.strip()]
    assert [t.id for t in traces] == cli_ids
    # The same trace model: the native JSON the CLI writes equals the package's.
    first = json.loads(cli.stdout.splitlines()[0])
    assert traces[0].to_dict() == first
    t = traces[0]
    assert t.outcome == "failure" and t.source_format == "whowhen"
    assert len(t) == len(t.steps) > 0
    assert set(t.agents) <= {s["agent"] for s in t.steps}
    assert "decisive" in t.labels


def test_dict_and_json_round_trip(data: Path) -> None:
    t = maslens.read(data / "whowhen" / "Algorithm-Generated" / "1.json")[0]
    again = maslens.Trace.from_dict(t.to_dict())
    assert again == t
    assert maslens.Trace.from_json(t.to_json(indent=True)) == t
    # A raw Who&When record as a dict is detected and imported like the file.
    raw = json.loads((data / "whowhen" / "Algorithm-Generated" / "1.json").read_text())
    assert len(maslens.Trace.from_dict(raw, format="whowhen")) == len(t)


def test_from_messages_keeps_names_tools_and_ids() -> None:
    msgs = [
        {"role": "system", "content": "You are a tutor."},
        {"role": "user", "content": "What is 17% of 2,340?"},
        {"role": "assistant", "name": "Solver", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"e\": \"0.17*2340\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "397.8"},
        {"role": "assistant", "name": "Solver", "content": "397.8"},
    ]
    t = maslens.Trace.from_messages(msgs, task="17% of 2,340", outcome="success", metadata={"k": 1})
    assert t.id.startswith("run-")
    assert maslens.Trace.from_messages(msgs).id == maslens.Trace.from_messages(msgs).id, "deterministic id"
    assert t.outcome == "success" and t.metadata["k"] == 1
    assert "Solver" in t.agents
    calls = [s for s in t.steps if s.get("tool_calls")]
    assert calls and calls[0]["tool_calls"][0]["name"] == "calc"


def test_bad_records_raise_typed_errors_naming_record_and_field() -> None:
    with pytest.raises(maslens.TraceError) as e:
        maslens.Trace.from_dict({"id": "x", "steps": [{"index": 0, "agent": 3, "content": "hi"}]}, name="run7")
    err = e.value
    assert isinstance(err, maslens.MaslensError)
    assert err.file == "run7"
    assert err.path is not None and "steps[0]" in err.path
    assert "run7" in str(err)
    with pytest.raises(maslens.TraceError, match="cannot detect|format"):
        maslens.Trace.from_dict({"nothing": "here"})
    with pytest.raises(maslens.TraceError, match="not a JSON-like value"):
        maslens.Trace.from_dict({"id": object()})
    with pytest.raises(maslens.TraceError, match="messages must be a list"):
        maslens.Trace.from_messages({"role": "user"})  # type: ignore[arg-type]
    with pytest.raises(maslens.OptionsError, match="format"):
        maslens.Trace.from_json("{}", format="yaml")


def test_read_skips_bad_records_with_warnings_or_raises_when_strict(tmp_path: Path, data: Path) -> None:
    good = json.loads((data / "whowhen" / "Hand-Crafted" / "10.json").read_text())
    (tmp_path / "a.json").write_text(json.dumps(good))
    (tmp_path / "b.jsonl").write_text('{"id": "ok", "steps": []}\n{"id": 5, "steps": []}\n')
    with pytest.warns(UserWarning, match=r"b.jsonl: line 2"):
        traces = maslens.read(tmp_path)
    assert len(traces) == 2 and traces[1].id == "ok"
    assert len(traces.errors) == 1 and traces.errors[0]["record"] == "line 2"
    with pytest.raises(maslens.TraceError) as e:
        maslens.read(tmp_path, strict=True)
    assert e.value.record == "line 2" and e.value.file.endswith("b.jsonl")
    frame = traces.to_pandas()
    assert list(frame["steps"]) == [len(t) for t in traces]


def test_a_rust_panic_arrives_as_internal_error_never_panic_exception() -> None:
    from maslens import _native

    with pytest.raises(maslens.InternalError, match="deliberate panic") as e:
        _native._panic_for_test()
    assert isinstance(e.value, maslens.MaslensError)
    assert type(e.value).__name__ != "PanicException"
