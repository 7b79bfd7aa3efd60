#!/usr/bin/env bash
# Scan all of ../shared/data/whowhen for implicit failures with the embedded model, then run the
# weight-sensitivity study on the resulting risks. Prints the figures the issue's closing note asks for
# (IFs found, prevalence by outcome, tokens and seconds per trace, sensitivity Spearman).
#
# Env: MASLENS_BIN (a built binary; default: cargo build -p maslens), MODEL (default local:smollm2-135m), THREADS (default 2), LIMIT (default: all traces),
#      ABSORPTION=0 to skip absorption classification, OUT (default target/bench/implicit).
# The LLM cache lives in $OUT/cache.sqlite: a rerun answers from it (its seconds then measure the cache).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/bench/implicit}
MODEL=${MODEL:-local:smollm2-135m}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
if [ -n "${MASLENS_BIN:-}" ]; then
  BIN=$MASLENS_BIN
else
  cargo build -q -p maslens
  BIN=target/debug/maslens
fi
extra=()
[ -n "${LIMIT:-}" ] && extra+=(--limit "$LIMIT")
[ "${ABSORPTION:-1}" = "0" ] && extra+=(--no-absorption)
start=$(date +%s)
set +e
"$BIN" scan ../shared/data/whowhen --model "$MODEL" --threads "$THREADS" --cache "$OUT/cache.sqlite" \
  --detect-max-tokens 768 --max-events 5 --out "$OUT/scan.json" --markdown "$OUT/scan.md" "${extra[@]}" 2> "$OUT/scan.log"
rc=$?
set -e
end=$(date +%s)
echo "scan exit code $rc (1 = some traces could not be read or scanned; see $OUT/scan.log); wall $((end - start)) s"
[ -s "$OUT/scan.json" ] || { tail -20 "$OUT/scan.log"; exit 2; }
"$BIN" --json select --scan "$OUT/scan.json" --n 4 --trials 1000 --spread 0.1 --seed 0 > "$OUT/select.json"
jq -r '
  def pct: if . == null then "n/a" else (((. * 1000) | round) / 10 | tostring) + "%" end;
  def num: if . == null then "n/a" else (((. * 100) | round) / 100 | tostring) end;
  .report as $r |
  "model: \(.model)",
  "traces scanned: \($r.traces) (errors: \(.errors | length))",
  "IFs counted: \([.traces[].events | length] | add // 0); flagged (unsupported evidence, not counted): \($r.flagged); detector abstentions: \($r.abstentions)",
  ($r.strata[] | "prevalence \(.outcome): \(.with_if)/\(.traces) = \(.prevalence | pct)  intensity \(.intensity | num) IFs/trace"),
  "absorbed / propagated among informative labels: \($r.absorbed_share | pct) / \($r.propagated_share | pct) of \($r.informative)",
  "tokens per trace: \($r.tokens_per_trace | num)  seconds per trace: \($r.seconds_per_trace | num)  calls: \($r.calls)"
' "$OUT/scan.json"
jq -r '.sensitivity | "weight sensitivity (\(.trials) trials, +-\(.spread * 100)%): global Spearman mean \(.global_mean), min \(.global_min), p05 \(.global_p05) (\(.defined) defined trials over \(.candidates) traces)"' "$OUT/select.json"
echo "full report: $OUT/scan.md, $OUT/scan.json, $OUT/select.json"
