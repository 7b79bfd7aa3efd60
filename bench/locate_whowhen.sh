#!/usr/bin/env bash
# Failure localization on all of Who&When (../shared/data/whowhen, both subsets) with the
# embedded model: every Judge protocol alone (variant I) and the full Judge + 3 Evaluators + vote
# pipeline, each with exact and compat-substring scoring, next to the trivial baselines.
#
# Usage: bench/locate_whowhen.sh [OUT_DIR] [extra `maslens eval locate` flags, e.g. --limit 5]
# Env:   MODEL (default local:smollm2-135m), DATA (default ../shared/data/whowhen),
#        BIN (default target/release/maslens, built if missing), THREADS (default: all cores),
#        RUNS (default "all-at-once:judge-only step-by-step:judge-only binary-search:judge-only
#              all-at-once:full step-by-step:full").
# Long: on 2 cores SmolLM2-135M needs minutes per Hand-Crafted trace (up to 129 steps) for
# step-by-step. Every call is cached ($MASLENS_CACHE), so an interrupted run resumes, and the
# compat-substring reports are re-scored from the cache (--cache-mode replay) at no cost.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/out/locate_whowhen}"
shift || true
MODEL="${MODEL:-local:smollm2-135m}"
DATA="${DATA:-../shared/data/whowhen}"
BIN="${BIN:-target/release/maslens}"
THREADS="${THREADS:-$(nproc)}"
RUNS="${RUNS:-all-at-once:judge-only step-by-step:judge-only binary-search:judge-only all-at-once:full step-by-step:full}"
if [ ! -x "$BIN" ]; then
  cargo build --release -p maslens
fi
mkdir -p "$OUT"
summary="$OUT/summary.md"
{
  echo "# maslens eval locate on Who&When ($MODEL)"
  echo
  echo "| run | scorer | cases | agent-level | step-level | tokens/case (prompt, cached, completion) | calls/case | s/case |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$summary"
row() { # $1 run name, $2 scorer, $3 report.json
  python3 - "$1" "$2" "$3" >> "$summary" <<'PY' || true
import json, sys
name, scorer, path = sys.argv[1:4]
r = json.load(open(path))
def a(x):
    return "n/a" if not x else f"{x['k']}/{x['n']} ({100*x['value']:.1f}%, {100*x['ci95'][0]:.1f}-{100*x['ci95'][1]:.1f})"
p = r["usage"]["per_case"]
print(f"| {name} | {scorer} | {r['cases']} | {a(r['agent_accuracy'])} | {a(r['step_accuracy'])} | "
      f"{p['prompt_tokens']:.0f}, {p['cached_tokens']:.0f} ({100*r['usage']['prefix_reuse']:.0f}% reused), {p['completion_tokens']:.0f} | "
      f"{p['calls']:.1f} | {p['seconds']:.1f} |")
PY
}
first=""
for run in $RUNS; do
  protocol="${run%%:*}"
  variant="${run##*:}"
  name="$protocol-$variant"
  echo "== $name" >&2
  "$BIN" eval locate "whowhen:$DATA" --protocol "$protocol" --variant "$variant" \
    --model "$MODEL" --threads "$THREADS" --out "$OUT/$name" "$@" > "$OUT/$name.stdout.md"
  "$BIN" eval locate "whowhen:$DATA" --protocol "$protocol" --variant "$variant" \
    --model "$MODEL" --threads "$THREADS" --cache-mode replay --compat-substring \
    --out "$OUT/$name-compat" "$@" > "$OUT/$name-compat.stdout.md"
  row "$name" exact "$OUT/$name/report.json"
  row "$name" compat-substring "$OUT/$name-compat/report.json"
  if [ -z "$first" ]; then
    first="$name"
    python3 - "$OUT/$name/report.json" >> "$summary" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
for b, s in r["baselines"].items():
    a, t = s["agent_accuracy"], s["step_accuracy"]
    print(f"| baseline {b} | exact | {a['n']} | {a['k']}/{a['n']} ({100*a['value']:.1f}%, {100*a['ci95'][0]:.1f}-{100*a['ci95'][1]:.1f}) | "
          f"{t['k']}/{t['n']} ({100*t['value']:.1f}%, {100*t['ci95'][0]:.1f}-{100*t['ci95'][1]:.1f}) | 0 | 0 | 0 |")
PY
  fi
done
echo >> "$summary"
echo "Per-run reports (JSON, Markdown, HTML) and verdicts are in $OUT/<run>/." >> "$summary"
cat "$summary"
