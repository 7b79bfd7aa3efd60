#!/usr/bin/env bash
# Rebuild `eval locate` reports from an LLM cache made by an earlier build (--cache-mode replay: a
# miss is an error, nothing is sent to a model) and compare them with the reports that build
# wrote (bench/compare_reports.py: per-case verdicts and every metric; new format fields ignored).
#
# Usage: OLD=DIR [MASLENS_BIN=...] bench/replay_reports.sh
#   DIR holds cache.sqlite and one folder per run, ev-<name>/report.json, made by the earlier build
#   with the commands below (same flags, plus --cache DIR/cache.sqlite --out DIR/ev-<name>).
set -u
cd "$(dirname "$0")/.."
: "${OLD:?set OLD to the directory with the earlier reports and cache.sqlite}"
M="${MASLENS_BIN:-target/debug/maslens}"
D="${DATA:-../shared/data}"
NEW="${NEW:-$(mktemp -d)}"
mkdir -p "$NEW"
R="--cache $OLD/cache.sqlite --cache-mode replay --threads 1 -q"
declare -A RUNS=(
  [prior-Algorithm-Generated]="whowhen:$D/whowhen/Algorithm-Generated --method prior --prior builtin"
  [prior-Hand-Crafted]="whowhen:$D/whowhen/Hand-Crafted --method prior --prior builtin"
  [prior-aegis]="aegis:$D/aegis/sample.jsonl --method prior --prior builtin"
  [llm-ag]="whowhen:$D/whowhen/Algorithm-Generated --limit 6"
  [llm-aegis]="aegis:$D/aegis/sample.jsonl"
  [llm-bs]="whowhen:$D/whowhen/Algorithm-Generated --limit 3 --protocol binary-search --variant judge-only"
  [llm-sbs]="whowhen:$D/whowhen/Algorithm-Generated --limit 3 --protocol step-by-step --variant judge-only"
  [llm-hc]="whowhen:$D/whowhen/Hand-Crafted --limit 2 --context-size 2048 --prior builtin --prior-narrowing"
)
fail=0
for name in $(printf '%s\n' "${!RUNS[@]}" | sort); do
  [ -f "$OLD/ev-$name/report.json" ] || { echo "skip $name (no earlier report)"; continue; }
  # shellcheck disable=SC2086
  "$M" eval locate ${RUNS[$name]} $R --out "$NEW/ev-$name" > /dev/null 2> "$NEW/ev-$name.err"
  python3 bench/compare_reports.py "$OLD/ev-$name/report.json" "$NEW/ev-$name/report.json" || fail=1
done
echo "new reports in $NEW"
exit $fail
