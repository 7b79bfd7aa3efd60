#!/usr/bin/env bash
# Issue 15: the frozen protocol's figures on the Who&When cases this project holds.
#  1. `maslens prior train`: nested cross-validation of the prior's whole training procedure,
#     grouped by task question (10 outer x 5 inner folds, 18 candidate configurations), and
#     leave-one-subset-out transfer with the selection inside; writes the model it selects.
#  2. `maslens eval stack`: the LLM pipeline (as `maslens locate` runs it by default: Judge + 3
#     Evaluators, prior-guided narrowing by out-of-fold step distributions) over every case, then
#     {prior alone, pipeline alone, stacked} on the same nested grouped folds; writes the weights
#     fit on every case.
# Every LLM call is cached ($MASLENS_CACHE or the default cache), so a rerun resumes and a
# finished run replays for free (`--verdicts OUT/verdicts.jsonl` skips the pipeline entirely).
#
# Usage: bench/stack_whowhen.sh [OUT_DIR]
# Env:   BIN (default target/debug/maslens, built if missing), MODEL (default local:smollm2-135m),
#        CTX (window in tokens; default 2048, see docs/locate.md "Measured"), THREADS (default 2),
#        SEED (fold seed; default 7), NICE (default 19).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/out/stack_whowhen}"
BIN="${BIN:-target/debug/maslens}"
MODEL="${MODEL:-local:smollm2-135m}"
CTX="${CTX:-2048}"
THREADS="${THREADS:-2}"
SEED="${SEED:-7}"
NICE="${NICE:-19}"
DATA=../shared/data/whowhen
if [ ! -x "$BIN" ]; then
  cargo build -p maslens
fi
mkdir -p "$OUT"
nice -n "$NICE" "$BIN" prior train "$DATA/Algorithm-Generated" "$DATA/Hand-Crafted" --seed "$SEED" \
  --out "$OUT/prior-model.json" --report "$OUT/prior-report.json" --oof-probs "$OUT/prior-oof.jsonl" \
  > "$OUT/prior-train.txt"
nice -n "$NICE" "$BIN" eval stack "whowhen:$DATA" --model "$MODEL" --context-size "$CTX" \
  --threads "$THREADS" --seed "$SEED" --save-verdicts "$OUT/verdicts.jsonl" \
  -o "$OUT/stack-weights.json" --report "$OUT/stack-report.json" > "$OUT/stack.txt"
cat "$OUT/prior-train.txt" "$OUT/stack.txt"
