"""Every Python block of docs/python.md (and README.md, docs/improve.md, docs/inject.md) runs, in order, in one interpreter started from the
checkout's root (as a reader would paste them), with the default model pointed at a real
`maslens serve-model`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ServeModel


def run_blocks(root: Path, serve_model: ServeModel, tmp_path: Path, cache: str, page: str, least: int, python: str) -> None:
    text = (root / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= least, f"the examples of {page}"
    script = tmp_path / "docs_python.py"
    script.write_text("\n".join(blocks))
    env = {
        **os.environ,
        "MASLENS_MODEL": serve_model.spec,
        "MASLENS_CACHE": cache,
    }
    r = subprocess.run([python, str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.parametrize(("page", "least"), [("docs/python.md", 3), ("docs/improve.md", 1), ("docs/inject.md", 1)])
def test_python_blocks_run(root: Path, serve_model: ServeModel, tmp_path: Path, docs_cache: str, page: str, least: int) -> None:
    run_blocks(root, serve_model, tmp_path, docs_cache, page, least, sys.executable)


def test_readme_block_in_a_fresh_venv(root: Path, serve_model: ServeModel, tmp_path: Path, docs_cache: str) -> None:
    """The README's block in the venv scripts/python-test.sh makes from nothing but the README's
    install line (the wheel and the extras it names): no package the README does not install.
    Run by hand without that venv (MASLENS_README_PYTHON unset), it runs in this interpreter."""
    python = os.environ.get("MASLENS_README_PYTHON") or sys.executable
    run_blocks(root, serve_model, tmp_path, docs_cache, "README.md", 1, python)
