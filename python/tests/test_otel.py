"""`maslens.otel.instrument` sends a running system's spans to a real `maslens serve`, which
assembles the run and localizes it with the prior."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import maslens.otel


@pytest.fixture()
def serve(maslens_bin: Path, tmp_path: Path) -> Iterator[str]:
    proc = subprocess.Popen(
        [str(maslens_bin), "serve", "--port", "0", "--db", str(tmp_path / "store.db"), "--diagnose", "off", "--settle", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    url = next((w for w in line.split() if w.startswith("http://")), None)
    if url is None:
        proc.kill()
        pytest.fail(f"maslens serve did not start: {line!r}")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_instrument_exports_spans_that_serve_turns_into_a_diagnosed_run(serve: str) -> None:
    pytest.importorskip("opentelemetry.sdk")
    inst = maslens.otel.instrument(endpoint=serve, service_name="otel-test", frameworks="none", batch=False, set_global=False)
    assert inst.url == serve + "/v1/traces"
    tracer = inst.provider.get_tracer("maslens-test")
    # A GenAI-conventions run: a workflow, two agents, each with a model call.
    with tracer.start_as_current_span("invoke_workflow") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_workflow")
        for agent, said in (("Planner", "Look up the landing date."), ("Writer", "Apollo 11 landed on 20 July 1969.")):
            with tracer.start_as_current_span(f"invoke_agent {agent}") as a:
                a.set_attribute("gen_ai.operation.name", "invoke_agent")
                a.set_attribute("gen_ai.agent.name", agent)
                with tracer.start_as_current_span("chat smollm2") as c:
                    c.set_attribute("gen_ai.operation.name", "chat")
                    c.set_attribute("gen_ai.request.model", "smollm2")
                    c.set_attribute(
                        "gen_ai.output.messages",
                        json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": said}]}]),
                    )
        trace_id = format(root.get_span_context().trace_id, "032x")
    assert inst.flush()
    deadline = time.monotonic() + 30
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        runs = _get(serve + "/api/runs")["runs"]
        if runs and runs[0].get("located_agent"):
            break
        time.sleep(0.5)
    inst.shutdown()
    assert runs, "no run arrived"
    run = _get(f"{serve}/api/runs/{runs[0]['id']}")
    trace = run["trace"]
    assert {s["agent"] for s in trace["steps"]} == {"Planner", "Writer"}
    assert {s["span"]["trace_id"] for s in trace["steps"]} == {trace_id}
    assert runs[0]["located_agent"] in {"Planner", "Writer"}, runs[0]


def test_instrument_names_unknown_frameworks_and_turns_on_installed_ones(serve: str) -> None:
    pytest.importorskip("opentelemetry.sdk")
    with pytest.raises(ValueError, match="unknown instrumentor"):
        maslens.otel.instrument(endpoint=serve, frameworks=["autogen-classic"], set_global=False)
    inst = maslens.otel.instrument(endpoint=serve, frameworks="auto", set_global=False)
    try:
        # The test venv has the AutoGen AgentChat, LangChain and OpenAI instrumentors.
        assert {"autogen-agentchat", "langchain", "openai"} <= set(inst.instrumentors)
    finally:
        inst.shutdown()
    assert maslens.otel.traces_url("http://h:1/") == "http://h:1/v1/traces"
    assert maslens.otel.traces_url("http://h:1/v1/traces") == "http://h:1/v1/traces"
