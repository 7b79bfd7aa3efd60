#!/usr/bin/env bash
# AgentLocate Variant III end to end on CPU, for real, with the tiny embedded SmolLM2-135M:
#   1. export refinement data      (maslens eval locate ... --export-refinement DIR/refine)
#   2. train a LoRA adapter        (TRL `trl sft`, the exported trl_sft.sh with CPU-sized flags)
#   3. serve base + adapter        (bench/judge_ft_serve.py, OpenAI-compatible, stands in for vLLM)
#      and evaluate it             (the exported evaluate.sh: --variant judge-ft --finetuned-on DIR)
# This proves the pipeline runs. A 135M model trained for a few steps on a handful of examples
# says nothing about localization quality.
#
# Usage: bench/judge_ft_lora.sh [OUT_DIR]          (default: a new temp dir; printed at the start)
# Env:   MASLENS_BIN  maslens binary (default target/debug/maslens; not built here)
#        MASLENS_HOME (default ~/.cache/maslens): the embedded model and the venv live there
#        DATA         Who&When directory (default ../shared/data/whowhen)
#        SUBSET (Algorithm-Generated/2), LIMIT (6), SPLIT (0.5), SEED (1): the cases. The export runs
#                     the Verified pipeline on the whole train side of the split of the --subset
#                     cases (--limit caps only the evaluated side), so keep the subset small:
#                     Algorithm-Generated/2 is 4 traces (2 train, 2 held out); all of
#                     Algorithm-Generated/ puts ~33 traces on the train side (~1 min each here)
#        MAX_STEPS    optimizer steps of the LoRA run (default 4)
#        PORT         port of the adapter server (default 8765)
# Python: a venv of its own, $MASLENS_HOME/venv-lora, from python/requirements/lora.txt (torch,
# transformers, peft, trl, ...; several GB with PyPI's CUDA wheels). Created when missing. Never
# part of CI. Network: PyPI only (for the venv); no Hugging Face hub: the base model is the
# embedded GGUF, dequantized by transformers into an HF directory.
# Exit status: non-zero when any step fails (the eval's own exit code 1 on a warning -- e.g. the
# tiny model's unparsable answers -- is reported but not treated as a failure of the pipeline).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

MASLENS_BIN="${MASLENS_BIN:-target/debug/maslens}"
MASLENS_HOME="${MASLENS_HOME:-$HOME/.cache/maslens}"
DATA="${DATA:-../shared/data/whowhen}"
SUBSET="${SUBSET:-Algorithm-Generated/2}"
LIMIT="${LIMIT:-6}"
SPLIT="${SPLIT:-0.5}"
SEED="${SEED:-1}"
MAX_STEPS="${MAX_STEPS:-4}"
PORT="${PORT:-8765}"
GGUF="$MASLENS_HOME/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
VENV="$MASLENS_HOME/venv-lora"
OUT="${1:-$(mktemp -d -t judge-ft-lora.XXXXXX)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
DATA="$(cd "$DATA" && pwd)"
case "$MASLENS_BIN" in /*) ;; *) MASLENS_BIN="$ROOT/$MASLENS_BIN" ;; esac
[ -x "$MASLENS_BIN" ] || { echo "no maslens binary at $MASLENS_BIN (cargo build -p maslens, or set MASLENS_BIN)" >&2; exit 2; }
[ -f "$GGUF" ] || { echo "no embedded model at $GGUF" >&2; exit 2; }
echo "== output: $OUT"
TIMES="$OUT/times.txt"
: > "$TIMES"
t0=$(date +%s)
lap() { local now; now=$(date +%s); echo "$1: $((now - t0)) s" | tee -a "$TIMES"; t0=$now; }

# 0. The venv (once): pinned versions from python/requirements/lora.txt.
if [ ! -x "$VENV/bin/trl" ]; then
  echo "== creating $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip
  "$VENV/bin/pip" install -r python/requirements/lora.txt
  lap "venv"
fi
PY="$VENV/bin/python"

# 1. Export the refinement data: the Verified pipeline (Judge + Evaluators + vote) with the
#    embedded model on the train side of the split; the held-out side is evaluated with the Judge
#    alone (variant I, the baseline). Writes refine/{train.jsonl,trl/train.jsonl,manifest.json,
#    trl_sft.sh,serve_adapter.sh,evaluate.sh,...}. Cached calls make a rerun cheap.
REFINE="$OUT/refine"
if [ ! -f "$REFINE/manifest.json" ]; then
  echo "== 1. export refinement data"
  set +e
  "$MASLENS_BIN" eval locate "whowhen:$DATA" --subset "$SUBSET" --limit "$LIMIT" \
    --split "$SPLIT" --seed "$SEED" --model local:smollm2-135m --variant judge -q \
    --out "$OUT/judge-baseline" --export-refinement "$REFINE" > "$OUT/export.log" 2>&1
  rc=$?
  set -e
  tail -n 30 "$OUT/export.log"
  [ -f "$REFINE/manifest.json" ] || { echo "export failed (exit $rc)" >&2; exit 1; }
  lap "1. export"
fi
examples=$(wc -l < "$REFINE/trl/train.jsonl")
echo "== exported: $examples training examples ($REFINE/trl/train.jsonl)"
"$PY" - "$REFINE" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/manifest.json"))
print("manifest:", json.dumps({k: m[k] for k in m if k not in ("traces", "refinement_traces")})[:1500])
ex = [json.loads(l) for l in open(f"{d}/trl/train.jsonl")]
for i, e in enumerate(ex):
    roles = [x["role"] for x in e["prompt"]] + ["->"] + [x["role"] for x in e["completion"]]
    print(f"example {i}: {roles}, prompt {sum(len(x['content']) for x in e['prompt'])} chars, "
          f"completion {e['completion'][0]['content'][:160]!r}...")
PY

# 2. Base model as an HF directory (dequantized from the embedded GGUF), then the LoRA run.
BASE="$OUT/base-hf"
"$PY" bench/judge_ft_train.py convert "$GGUF" "$BASE" 2>&1 | grep -v 'it/s' || exit 1
lap "2a. GGUF -> HF base"

# The exported trl_sft.sh is `trl sft --model_name_or_path BASE --dataset_name DIR/trl ...
# --output_dir DIR/lora-round1` (the GPU recipe: r 64, alpha 128, dropout 0.05, all-linear,
# 3 epochs, batch 4 x accumulation 4, lr 2e-4, --max_length from the data). It takes no extra
# arguments, so we run it unchanged with a small `trl` wrapper first on its PATH that calls the
# venv's trl with CPU-sized overrides appended (argparse keeps the last value of a repeated flag):
#   --model_name_or_path $BASE          no hub: the GGUF-derived directory
#   --max_steps N                       a few optimizer steps, not 3 epochs
#   --per_device_train_batch_size 1 --gradient_accumulation_steps 1
#                                       batch 1 instead of effective 16: 2 CPU cores
#   --use_cpu true                      no accelerator
#   --logging_steps 1 --report_to none  loss per step, no trackers
#   --save_strategy steps --save_steps N  one checkpoint at the last step (its trainer_state.json
#                                       has the loss per step); the final adapter is saved anyway
# Everything else (LoRA r/alpha/dropout/targets, lr, --max_length, completion-only loss, and the
# output directory DIR/lora-round1 that serve_adapter.sh names) is the exported script's.
mkdir -p "$OUT/bin"
{
  echo '#!/bin/sh'
  echo "exec '$VENV/bin/trl' \"\$@\" --model_name_or_path '$BASE' --max_steps $MAX_STEPS \\"
  echo "  --per_device_train_batch_size 1 --gradient_accumulation_steps 1 --use_cpu true \\"
  echo "  --logging_steps 1 --report_to none --save_strategy steps --save_steps $MAX_STEPS"
} > "$OUT/bin/trl"
chmod +x "$OUT/bin/trl"
ADAPTER=$(sed -n 's/.*--output_dir \([^ ]*\).*/\1/p' "$REFINE/trl_sft.sh" | tr -d "'\"")
[ -n "$ADAPTER" ] || { echo "no --output_dir in $REFINE/trl_sft.sh" >&2; exit 1; }
echo "== 2. LoRA with TRL: the exported $REFINE/trl_sft.sh (adapter -> $ADAPTER), trl wrapper:"
cat "$REFINE/trl_sft.sh" "$OUT/bin/trl"
rm -rf "$ADAPTER"
PATH="$OUT/bin:$VENV/bin:$PATH" sh "$REFINE/trl_sft.sh" > "$OUT/train.log" 2>&1 \
  || { tail -n 40 "$OUT/train.log"; echo "training failed" >&2; exit 1; }
lap "2b. LoRA training ($MAX_STEPS steps)"
"$PY" bench/judge_ft_train.py losses "$ADAPTER" | tee "$OUT/losses.txt"
echo "adapter dir: $(du -sh "$ADAPTER" | cut -f1)"

# 3. Serve base + adapter (OpenAI-compatible, CPU) and evaluate the fine-tuned Judge on the
#    held-out cases with the exported evaluate.sh (same dataset, split, seed, subset, protocol,
#    prompt settings, context size; --variant judge-ft --finetuned-on DIR --out DIR/eval-round1).
#    --cache-mode off: every answer comes from the server, not from an earlier run's cache.
"$PY" bench/judge_ft_serve.py --base "$BASE" --adapter "$ADAPTER" --name judge-ft --port "$PORT" \
  > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if "$PY" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=2)" 2>/dev/null; then break; fi
  kill -0 $SERVER 2>/dev/null || { cat "$OUT/serve.log"; echo "server died" >&2; exit 1; }
  sleep 1
done
lap "3a. server up"
echo "== 3. evaluate: $REFINE/evaluate.sh"
cat "$REFINE/evaluate.sh"
set +e
MASLENS="$MASLENS_BIN" sh "$REFINE/evaluate.sh" "openai:judge-ft@http://127.0.0.1:$PORT/v1" \
  --cache-mode off -q > "$OUT/eval.log" 2>&1
erc=$?
set -e
lap "3b. evaluation"
cat "$OUT/eval.log"
REPORT=$(ls -d "$REFINE"/eval-round*/report.json 2>/dev/null | head -n 1 || true)
[ -n "$REPORT" ] || { echo "no report.json under $REFINE/eval-round* (evaluate.sh exit $erc)" >&2; exit 1; }
echo "== evaluate.sh exit $erc; report $REPORT"
# The headline figures of the judge-ft report (and of the variant I baseline of step 1, when
# this run made it), then the step times.
"$PY" - "$REPORT" "$OUT/judge-baseline/report.json" <<'PY'
import json, os, sys
def acc(x):
    return "n/a" if not x else f"{x['k']}/{x['n']} ({100 * x['value']:.1f}%)"
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    c = r["config"]
    print(f"{path}\n  {c.get('variant')}: {r['model']}, {c.get('output')}")
    print(f"  cases {r['cases']}, agent {acc(r['agent_accuracy'])}, step {acc(r['step_accuracy'])}, "
          f"pair {acc(r.get('pair_accuracy'))}, abstentions {r['abstentions']}, "
          f"parse failures {r['parse_failures']}, errors {len(r['errors'])}, "
          f"calls {r['usage']['calls']}, {r['usage']['seconds']:.0f} s")
    if c.get("finetune"):
        print("  finetune:", json.dumps(c["finetune"])[:600])
PY
echo "== times"; cat "$TIMES"
exit 0
