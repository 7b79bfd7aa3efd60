#!/usr/bin/env bash
# Credit-guided BCD vs black-box vs unoptimized on the SIMULATED multi-agent system (a
# deterministic test environment, not a model; see docs/credit.md), full method and ablations.
# Usage: bench/credit_simulation.sh [maslens binary] [out dir]
set -euo pipefail
BIN=${1:-target/debug/maslens}
OUT=${2:-/tmp/credit-sim}
SEEDS=${SEEDS:-1,2,3,4,5}
mkdir -p "$OUT"
for blocks in both roles-only aggregators-only; do
  "$BIN" optimize --simulation --seeds "$SEEDS" --blocks "$blocks" --out "$OUT/$blocks" --json > "$OUT/$blocks.json"
  python3 - "$OUT/$blocks.json" "$blocks" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"blocks={sys.argv[2]}: {s['n_optimization']} optimization / {s['n_test']} test questions")
for m in s["summary"]:
    calls = "-" if m["calls"] is None else f"{m['calls']:.0f}"
    print(f"  {m['method']:<10} acc {100*m['mean']:5.1f} +- {100*m['std']:4.1f}  calls {calls:>6}  per seed {[round(100*a,1) for a in m['accuracies']]}")
PY
done
