#!/usr/bin/env bash
# Benchmark (a): prefix KV-cache reuse, Judge + 3 Evaluators over one ~2,000-token Who&When trace,
# on the embedded SmolLM2 behind `maslens serve-model`, with and without reuse.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/fetch-model.sh smollm2-135m >/dev/null
cargo build -q -p maslens
exec python3 bench/prefix_reuse.py --binary target/debug/maslens "$@"
