#!/usr/bin/env bash
# Web UI page latency at scale: 100,000 synthetic runs (30 steps each, ~3M rows of step text) in a SQLite
# store (or PostgreSQL with --db postgres://...), plus a 130-step trace; every page shape timed over real
# HTTP with sequential keep-alive requests (p50/p95/p99), and baselines measured in the same run: OFFSET
# paging vs the keyset page, a LIKE scan vs the full-text page, the HTML trace page vs the JSON API.
#
# usage: bench/ui_pages.sh [--db URL_OR_PATH (default /tmp/maslens-ui-bench.db, kept and reused)]
#                          [--runs N (100000)] [--requests N (1000)] [--out FILE (target/bench/ui_pages.json)]
# Builds the example in release mode (the numbers are what `cargo build --release` users get).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
args=("$@")
has_out=0
for a in "${args[@]}"; do [ "$a" = "--out" ] && has_out=1; done
[ $has_out -eq 1 ] || args+=(--out "$root/target/bench/ui_pages.json")
cargo build --release -q -p maslens-server --example ui_bench
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$root/target/release/examples/ui_bench" "${args[@]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
