"""The embedded model in the wheel (the default build, docs/python.md): the package runs it itself,
with no server (the other tests use `maslens serve-model`, shared across tests)."""

from __future__ import annotations

from pathlib import Path

import maslens


def test_the_local_wheel_runs_the_embedded_model(root: Path) -> None:
    assert maslens.has_local_model(), "the installed wheel was built without the embedded model (--no-default-features)"
    traces = maslens.read(root / "examples" / "whowhen-style.json")
    verdicts = maslens.locate(
        traces,
        model="local:smollm2-135m",
        method="llm",
        variant="judge",
        cache="off",
        progress=False,
    )
    assert len(verdicts) == 1
    v = verdicts[0]
    assert v.error is None, v.error
    raw = v.to_dict()
    assert raw["model"] == "local:smollm2-135m", raw
    assert raw["payload"]["usage"]["calls"] >= 1, raw["payload"]["usage"]
    n_steps = len(traces[0].to_dict()["steps"])
    assert (v.step is not None and 0 <= v.step < n_steps) or v.abstain_reason, raw
