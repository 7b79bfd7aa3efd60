#!/usr/bin/env bash
# The learned prior with an LLM in the loop (issue 7): the confidence-weighted vote with and without
# the prior as an extra voter, and the Judge's tokens on traces longer than the window with and
# without prior-guided narrowing, all on the same Who&When cases.
#
# Usage: bench/locate_prior_llm.sh [OUT_DIR]
# Env:   BIN (a maslens build with the embedded backend; default target/debug/maslens, built if missing),
#        MODEL (default local:smollm2-135m), DATA (default ../shared/data/whowhen/Algorithm-Generated),
#        LIMIT (cases, first by id; default 20), CTX (window in tokens; default 2048, small on purpose:
#        every Algorithm-Generated trace is then "long", and each call stays cheap on a CPU),
#        WEIGHTS (prior-vote weights to replay; default "1 2 5 10"), THREADS (default 1).
# The prior is honest: out-of-fold step distributions of `maslens prior train --oof-probs` on all of
# ../shared/data/whowhen (10 folds, seed 7), never the built-in model, which has seen every trace.
# Every LLM call is cached ($MASLENS_CACHE), so a rerun resumes, and the vote-weight rows are replays
# of the cached calls (the prior only adds ballots; it changes no prompt unless narrowing is on).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/out/locate_prior_llm}"
BIN="${BIN:-target/debug/maslens}"
MODEL="${MODEL:-local:smollm2-135m}"
DATA="${DATA:-../shared/data/whowhen/Algorithm-Generated}"
LIMIT="${LIMIT:-20}"
CTX="${CTX:-2048}"
WEIGHTS="${WEIGHTS:-1 2 5 10}"
THREADS="${THREADS:-1}"
if [ ! -x "$BIN" ]; then
  cargo build -p maslens
fi
mkdir -p "$OUT"
"$BIN" prior train ../shared/data/whowhen/Algorithm-Generated ../shared/data/whowhen/Hand-Crafted \
  --out "$OUT/prior-model.json" --oof-probs "$OUT/oof.jsonl" > "$OUT/prior-train.txt"
common=(eval locate "whowhen:$DATA" --model "$MODEL" --limit "$LIMIT" --context-size "$CTX"
  --threads "$THREADS" -q --protocol all-at-once)
narrow=(--prior-narrowing --prior "$OUT/oof.jsonl" --prior-weight 0)
run() { # name, extra args...
  local name=$1
  shift
  echo "== $name" >&2
  # Exit code 1 = some cases failed (counted as wrong and listed in the report): keep going.
  "$BIN" --json "${common[@]}" --out "$OUT/$name" "$@" > "$OUT/$name.json" || [ $? -eq 1 ]
}
run judge-plain --variant judge-only
run judge-narrow --variant judge-only "${narrow[@]}"
run full-plain --variant full
run full-narrow --variant full "${narrow[@]}"
for w in $WEIGHTS; do
  run "full-plain-vote$w" --variant full --cache-mode replay --prior "$OUT/oof.jsonl" --prior-weight "$w"
  run "full-narrow-vote$w" --variant full --cache-mode replay --prior-narrowing --prior "$OUT/oof.jsonl" \
    --prior-weight "$w"
done
python3 - "$OUT" $WEIGHTS <<'PY'
import json, sys, os
out, weights = sys.argv[1], sys.argv[2:]
def row(name, label):
    p = os.path.join(out, name + ".json")
    r = json.load(open(p))
    u = r["usage"]["per_case"]
    a, s = r["agent_accuracy"], r["step_accuracy"]
    kinds = {}
    for l in open(os.path.join(out, name, "verdicts.jsonl")):
        k = json.loads(l)["long_trace"]["strategy"]["kind"]
        kinds[k] = kinds.get(k, 0) + 1
    f = lambda m: f"{m['k']}/{m['n']} [{100*m['ci95'][0]:.0f}, {100*m['ci95'][1]:.0f}]"
    print(f"| {label} | {f(a)} | {f(s)} | {u['prompt_tokens']:.0f} | {u['completion_tokens']:.0f} | "
          f"{u['calls']:.2f} | {u['seconds']:.1f} | {r.get('abstentions', 0)} | "
          f"{', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))} |")
    return r
print("| run | agent | step | prompt tok/case | completion tok/case | calls/case | s/case | abstentions | long-trace strategy |")
print("|---|---|---|---|---|---|---|---|---|")
row("judge-plain", "Judge alone (all-at-once)")
row("judge-narrow", "Judge alone, prior-guided narrowing")
r = row("full-plain", "Judge + 3 Evaluators + vote")
row("full-narrow", "same, prior-guided narrowing")
for w in weights:
    r = row(f"full-plain-vote{w}", f"vote + prior voter (weight {w})")
    row(f"full-narrow-vote{w}", f"narrowing + prior voter (weight {w})")
print()
for name, b in r["baselines"].items():  # with the prior (out-of-fold) among them when weights ran
    a, s = b["agent_accuracy"], b["step_accuracy"]
    print(f"baseline {name}: agent {a['k']}/{a['n']}, step {s['k']}/{s['n']}")
PY
