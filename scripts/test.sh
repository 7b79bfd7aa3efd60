#!/usr/bin/env bash
# The whole test suite, from a fresh machine: system packages, embedded model, lint, tests.
# Each phase's wall time goes to stderr (`test.sh: <phase> took N s`).
set -euo pipefail
cd "$(dirname "$0")/.."
phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s" >&2
}
# A one-shot build: incremental compilation state only costs disk (3.5 GB on a cold run).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
df -h . >&2 || true
on_exit() {
  [ "${started_pg:-0}" = 1 ] && ./scripts/pg.sh stop || true
  du -sh "${CARGO_TARGET_DIR:-target}" >&2 || true
}
trap on_exit EXIT
phase setup ./scripts/setup.sh
# PostgreSQL (Debian package) for the store's tests on both back ends and the two-server test.
if [ -z "${MASLENS_TEST_PG_URL:-}" ]; then
  MASLENS_TEST_PG_URL=$(./scripts/pg.sh start)
  export MASLENS_TEST_PG_URL
  started_pg=1
fi
# Python venv (PyPI): OpenTelemetry SDK, OpenInference instrumentors, AutoGen, LangGraph, Arize Phoenix;
# the serve tests drive real clients and frameworks from it.
# Idempotent (a no-op when the pinned requirements are installed); honours MASLENS_VENV.
start=$SECONDS
MASLENS_VENV=$(./scripts/pyenv.sh --phoenix)
export MASLENS_VENV
echo "test.sh: python took $((SECONDS - start)) s" >&2
phase fmt cargo fmt --all -- --check
phase clippy cargo clippy --workspace --all-targets -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  phase build cargo nextest run --workspace --no-run
  phase tests cargo nextest run --workspace --no-fail-fast
else
  phase tests cargo test --workspace --no-fail-fast
fi
# The Python package: the wheel (maturin, dev profile), installed in the venvs, then pytest
# (python/tests; the real model via `target/debug/maslens serve-model`, built above).
phase python-package ./scripts/python-test.sh
