#!/usr/bin/env bash
# Weight sensitivity (MASIF appendix A) and best-of-N selection on a SYNTHETIC corpus shaped like the
# paper's (tables 1-3: 1,828 traces, 54.3% / 75.2% prevalence, 3,044 IFs, type and absorption shares).
# The corpus is drawn by bench/implicit_sensitivity.py; it is not model output. It exists because the
# embedded model finds no supported IFs, so on its scans every risk is 0 and the Spearman is undefined.
#
# For each generator seed in SEEDS, runs
#   maslens --json select --scan $OUT/scan-SEED.json --n 4,8,16 --trials $TRIALS --spread S --seed 0
# for S in SPREADS with the default weights (paper tables 7-8), and at spread 0.1 with uniform weights
# (table 9's "uniform": the type weights, the absorption weights, or both set to 1), then prints the
# sensitivity figures and the IF / random / oracle selection accuracies.
#
# Env: MASLENS_BIN (a built binary; default: cargo build -p maslens --no-default-features),
#      OUT (default target/bench/implicit-sensitivity), SEEDS (default "0"), SPREADS (default "0.1 0.2"),
#      TRIALS (default 1000), UNIFORM=0 to skip the uniform-weight runs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/bench/implicit-sensitivity}
SEEDS=${SEEDS:-0}
SPREADS=${SPREADS:-0.1 0.2}
TRIALS=${TRIALS:-1000}
mkdir -p "$OUT"
if [ -n "${MASLENS_BIN:-}" ]; then
  BIN=$MASLENS_BIN
else
  cargo build -q -p maslens --no-default-features
  BIN=target/debug/maslens
fi

# Uniform weight sets (table 9 of the paper): TOML overrides read by `select --weights`.
printf '[type]\nfailed_tool_use = 1.0\nwrong_action = 1.0\nunnecessary_action = 1.0\nhallucination = 1.0\nincomplete_action = 1.0\nreasoning_error = 1.0\nmisunderstanding = 1.0\nmalformed_output = 1.0\n' > "$OUT/uniform-type.toml"
printf '[absorption]\nself_corrected = 1.0\nself_workaround = 1.0\npeer_repair = 1.0\norchestrator_intervention = 1.0\nunresolved_propagation = 1.0\ntrivial_issue = 1.0\nunknown = 1.0\n' > "$OUT/uniform-absorption.toml"
cat "$OUT/uniform-type.toml" "$OUT/uniform-absorption.toml" > "$OUT/uniform-both.toml"

runs=()
for seed in $SEEDS; do
  python3 bench/implicit_sensitivity.py --seed "$seed" --out "$OUT/scan-$seed.json"
  for spread in $SPREADS; do
    f="$OUT/select-$seed-default-$spread.json"
    "$BIN" --json select --scan "$OUT/scan-$seed.json" --n 4,8,16 --trials "$TRIALS" --spread "$spread" --seed 0 > "$f"
    runs+=("$seed default $spread $f")
  done
  if [ "${UNIFORM:-1}" != "0" ]; then
    for w in uniform-type uniform-absorption uniform-both; do
      f="$OUT/select-$seed-$w-0.1.json"
      "$BIN" --json select --scan "$OUT/scan-$seed.json" --weights "$OUT/$w.toml" --n 4,8,16 --trials "$TRIALS" --spread 0.1 --seed 0 > "$f"
      runs+=("$seed $w 0.1 $f")
    done
  fi
done

python3 - "${runs[@]}" <<'PY'
import json, sys
print("SYNTHETIC corpus (bench/implicit_sensitivity.py, paper tables 1-3 shapes; not model output)")
print("| corpus seed | weights | spread | trials defined | global Spearman mean | min | p05 | within-task mean "
      "| IF acc % N=4 / 8 / 16 | random % (expected) N=4 / 8 / 16 | oracle % N=4 / 8 / 16 |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---|---|---|")


def f4(x):
    return "n/a" if x is None else f"{x:.4f}"


def pc(x):
    return "n/a" if x is None else f"{x * 100:.1f}"


for run in sys.argv[1:]:
    seed, weights, spread, path = run.split()
    with open(path) as fh:
        d = json.load(fh)
    s, res = d["sensitivity"], d["selection"]["results"]
    acc = " / ".join(f'{pc(r["if_scorer"]["accuracy"])} ({r["if_scorer"]["correct"]}/{r["if_scorer"]["tasks"]})' for r in res)
    rnd = " / ".join(f'{pc(r["random"]["accuracy"])} ({pc(r["random_expected"])})' for r in res)
    ora = " / ".join(pc(r["oracle"]["accuracy"]) for r in res)
    print(f'| {seed} | {weights} | {float(spread):g} | {s["defined"]}/{s["trials"]} | {f4(s["global_mean"])} '
          f'| {f4(s["global_min"])} | {f4(s["global_p05"])} | {f4(s["within_task_mean"])} | {acc} | {rnd} | {ora} |')
PY
echo "select outputs: $OUT/select-*.json; corpora: $OUT/scan-*.json"
