#!/usr/bin/env bash
# Assembly time of a deep parent chain (issue 35 item 3): an OTLP/JSON export whose spans form one
# parent chain N deep (a nameless CHAIN span, then a chat span without an agent name, alternating: every
# chat is a step whose agent is looked up the whole chain), read and assembled by `maslens import --otlp`.
# Prints the seconds for 1,000 and 10,000 deep and their ratio (about 10 when assembly is linear, about
# 100 when it is quadratic); with MASLENS_BASELINE_BIN, the same files through that binary too (e.g. a
# build of the commit before, the baseline). Target: 10,000 deep in under 2 s.
#
# usage: bench/assemble_deep.sh [DEPTH ...]   (default: 1000 10000)
# env:   MASLENS_BIN           the binary (default target/debug/maslens; this script builds nothing)
#        MASLENS_BASELINE_BIN  optional second binary timed on the same files
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${MASLENS_BIN:-$root/target/debug/maslens}"
base="${MASLENS_BASELINE_BIN:-}"
[ -x "$bin" ] || { echo "assemble_deep.sh: no binary at $bin (cargo build -p maslens, or set MASLENS_BIN)" >&2; exit 2; }
depths=("$@")
[ ${#depths[@]} -gt 0 ] || depths=(1000 10000)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

chain() { # depth -> OTLP/JSON file (one ExportTraceServiceRequest line)
  python3 - "$1" "$tmp/deep-$1.jsonl" <<'PY'
import json, sys
depth, path = int(sys.argv[1]), sys.argv[2]
spans = []
for i in range(depth):
    if i % 2:
        msg = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": str(i)}]}])
        attrs = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                 {"key": "gen_ai.output.messages", "value": {"stringValue": msg}}]
    else:
        attrs = [{"key": "openinference.span.kind", "value": {"stringValue": "CHAIN"}}]
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": f"{i + 1:016x}", "name": f"s{i}",
            "startTimeUnixNano": str(1000 + i), "endTimeUnixNano": str(1000 + 2 * depth - i), "attributes": attrs}
    if i:
        span["parentSpanId"] = f"{i:016x}"
    spans.append(span)
req = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "deep"}}]},
                          "scopeSpans": [{"spans": spans}]}]}
open(path, "w").write(json.dumps(req) + "\n")
PY
}

timed() { # bin file -> seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$1" import --otlp "$2" -o "$tmp/out.jsonl" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "failed"; return; }
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.3f}')"
}

echo "machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A secs
for d in "${depths[@]}"; do
  chain "$d"
  secs[$d]=$(timed "$bin" "$tmp/deep-$d.jsonl")
  line="depth $d: ${secs[$d]} s ($bin)"
  if [ -n "$base" ]; then
    line="$line; baseline $(timed "$base" "$tmp/deep-$d.jsonl") s ($base)"
  fi
  echo "$line"
done
if [ ${#depths[@]} -ge 2 ]; then
  first="${depths[0]}"; last="${depths[-1]}"
  python3 -c "a, b = float('${secs[$first]}'), float('${secs[$last]}'); print(f'ratio $last/$first: {b / max(a, 1e-3):.1f} (depth ratio {$last // $first})')"
fi
