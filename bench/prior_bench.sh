#!/usr/bin/env bash
# Scoring throughput of `maslens prior` on a synthetic corpus (default 10k traces x 50-500 steps),
# next to the first-non-terminal baseline and feature extraction alone, measured in the same run.
# Usage: bench/prior_bench.sh [TRACES] [MIN_STEPS] [MAX_STEPS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p maslens-prior --example prior_bench -- "$@"
