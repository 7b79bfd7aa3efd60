"""Fixtures of the Python package's tests: the checkout, the shared data, the built `maslens`
binary, and `maslens serve-model` (the embedded SmolLM2 behind the OpenAI protocol) as the real
model every LLM-backed test uses. The package itself must be installed in the interpreter
running pytest (scripts/python-test.sh builds and installs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MASLENS_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data"


def _binary() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return Path(os.environ.get("MASLENS_BIN", target / "debug" / "maslens"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def data() -> Path:
    if not DATA.is_dir():
        pytest.fail(f"shared data not found at {DATA} (set MASLENS_SHARED)")
    return DATA


@pytest.fixture(scope="session")
def maslens_bin() -> Path:
    b = _binary()
    if not b.exists():
        pytest.fail(f"{b} not built (cargo build -p maslens, or set MASLENS_BIN)")
    return b


class ServeModel:
    """A running `maslens serve-model`; `spec` is the model spec that reaches it."""

    def __init__(self, proc: subprocess.Popen[str], base_url: str) -> None:
        self.proc = proc
        self.base_url = base_url
        self.spec = f"openai:smollm2-135m@{base_url}"


@pytest.fixture(scope="session")
def serve_model(maslens_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeModel]:
    """One serve-model for the session (the embedded model loads once; 2 KV slots)."""
    log = tmp_path_factory.mktemp("serve-model") / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(maslens_bin), "serve-model", "--model", "local:smollm2-135m", "--port", "0", "--threads", "2"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = next((w for w in line.split() if w.startswith("http://")), None)
        if url is None:
            proc.kill()
            pytest.fail(f"serve-model did not start: {line!r}; stderr: {log.read_text()}")
        try:
            yield ServeModel(proc, url)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="session")
def docs_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One LLM cache for the documented examples (test_docs.py, which runs first) and the tests that
    check the same calls in depth (locate for every method, scan and credit, propose_fix): the
    embedded model answers each of those calls once per session, and each test still runs its
    whole path (a test run alone makes the calls itself)."""
    return str(tmp_path_factory.mktemp("docs-cache") / "cache.sqlite")


@pytest.fixture()
def cache(tmp_path: Path) -> str:
    """A fresh LLM cache file per test (answers are real model calls, not replays)."""
    return str(tmp_path / "cache.sqlite")


def run_cli(maslens_bin: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(maslens_bin), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def python() -> str:
    return sys.executable
