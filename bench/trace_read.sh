#!/usr/bin/env bash
# Reading benchmark: a synthetic native JSONL corpus (>= 1 GB by default) read by
# `maslens stats` (the streaming reader, full parse + validation + statistics; once with the
# default parser threads, once with MASLENS_READ_THREADS=2), next to a Python
# baseline (`json.loads` per line) in the same run. Reports MB/s and peak RSS (/usr/bin/time -v).
#
# usage: bench/trace_read.sh [SIZE_MB (default 1100)] [RUNS (default 3)]
# The corpus is generated once under target/bench/ (never committed) by
# crates/trace/examples/gen_corpus.rs (deterministic, seed 7).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
size_mb="${1:-1100}"
runs="${2:-3}"
dir="$root/target/bench"
mkdir -p "$dir"

cargo build --quiet --release -p maslens --no-default-features
cargo build --quiet --release -p maslens-trace --example gen_corpus
corpus="$dir/corpus-${size_mb}MB.jsonl"
if [ ! -s "$corpus" ]; then
  "$root/target/release/examples/gen_corpus" "$corpus" "$size_mb" 7
fi
bytes=$(stat -c %s "$corpus")
cat "$corpus" > /dev/null   # warm the page cache so every reader starts alike

# measure NAME CMD...: runs CMD $runs times; prints "NAME seconds peak_rss_kb" per run.
measure() {
  local name="$1"; shift
  for i in $(seq "$runs"); do
    /usr/bin/time -v -o "$dir/time.txt" "$@" > "$dir/out-$name.txt"
    local secs rss
    secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$dir/time.txt")
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.txt")
    echo "$name $secs $rss"
  done
}

{
  measure maslens-stats "$root/target/release/maslens" --quiet --json stats "$corpus"
  MASLENS_READ_THREADS=2 measure maslens-stats-2threads "$root/target/release/maslens" --quiet --json stats "$corpus"
  measure python-json.loads python3 "$root/bench/trace_read_baseline.py" "$corpus"
} > "$dir/runs.txt"

echo "corpus: $corpus ($bytes bytes), $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "maslens stats says: $(python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); print(v["traces"], "traces,", v["steps"]["total"], "steps,", v["skipped"], "skipped")' "$dir/out-maslens-stats.txt")"
echo "python says:        $(cat "$dir/out-python-json.loads.txt")"
python3 - "$dir/runs.txt" "$bytes" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, secs, rss = line.split()
    runs[name].append((float(secs), int(rss)))
size = int(sys.argv[2]) / 1e6
base = statistics.median(s for s, _ in runs["python-json.loads"])
print(f"{'reader':<24}{'median s':>10}{'MB/s':>9}{'x python':>10}{'peak RSS MB':>13}  (runs: seconds)")
for name, r in runs.items():
    med = statistics.median(s for s, _ in r)
    rss = max(k for _, k in r) / 1024
    print(f"{name:<24}{med:>10.2f}{size/med:>9.0f}{base/med:>10.2f}{rss:>13.1f}  ({', '.join(f'{s:.2f}' for s, _ in r)})")
PY
