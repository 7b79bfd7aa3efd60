"""The type stubs hold: mypy --strict over the package and a user-style script, and
`mypy.stubtest` of the native module's stubs against the built module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]

USAGE = '''
import maslens
from maslens import adapters

traces: maslens.TraceList = maslens.read("runs/")
verdicts: maslens.Verdicts = maslens.locate(traces, method="prior", progress=False)
first: maslens.Verdict = verdicts[0]
step: int | None = first.step
model = maslens.Model("openai:gpt-4o-mini", max_calls=10, cache="replay")
scan: maslens.ScanResult = maslens.scan(traces, model=model, counting="paper")
credit: maslens.CreditResult = maslens.credit(traces, model=model, lambda_=0.3)
adv: maslens.Advantages = maslens.advantages([{"group": "g", "id": "a", "success": True, "if_cost": 1.0}])
t: maslens.Trace = adapters.from_messages([{"role": "user", "content": "hi"}])

async def later() -> maslens.Verdicts:
    return await maslens.locate_async(traces, method="prior")
'''

BAD = '''
import maslens
maslens.locate("runs/", method="oracle")
maslens.Model("x", max_calls="ten")
'''


@pytest.fixture(scope="module")
def stubtest() -> Iterator[subprocess.Popen[str]]:
    """`mypy.stubtest` of the native module, started at once beside the strict runs below (it
    cannot share their cache: it needs every stub's full syntax tree)."""
    pytest.importorskip("mypy")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mypy.stubtest", "maslens._native", "--ignore-missing-stub"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory, stubtest: subprocess.Popen[str]) -> Path:
    """One incremental cache for the strict runs: the package and the standard library are
    checked once, the scripts against them in a second or so each."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_package_and_usage_type_check_strictly(tmp_path: Path, mypy_cache: Path) -> None:
    (tmp_path / "usage.py").write_text(USAGE)
    # The installed package (as users get it: the wheel's .py files, _native.pyi, py.typed) ...
    r = _mypy(mypy_cache, "-p", "maslens")
    assert r.returncode == 0, r.stdout + r.stderr
    # ... and a script using it.
    r = _mypy(mypy_cache, str(tmp_path / "usage.py"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_wrong_arguments_are_type_errors(tmp_path: Path, mypy_cache: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    r = _mypy(mypy_cache, str(tmp_path / "bad.py"))
    assert r.returncode == 1
    assert "'oracle'" in r.stdout and '"max_calls"' in r.stdout, r.stdout


def test_native_stubs_match_the_built_module(stubtest: subprocess.Popen[str]) -> None:
    out, _ = stubtest.communicate(timeout=900)
    assert stubtest.returncode == 0, out
