#!/usr/bin/env bash
# Benchmark (b) of issue 3: HTTP backend overhead (requests/s at concurrency 64 against an
# in-process instant-answer server), against a raw reqwest loop measured in the same run.
# Usage: bench/llm_http.sh [REQUESTS_PER_PHASE]   (PROFILE=release for an optimised build; the figures in docs/llm.md are from the default dev profile, dependencies at opt-level 2)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
flag=(); [ "$profile" = release ] && flag=(--release)
exec cargo run -q "${flag[@]}" -p maslens-llm --no-default-features --example llm_http_bench -- "${1:-20000}"
