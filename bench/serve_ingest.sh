#!/usr/bin/env bash
# OTLP/HTTP ingest benchmark: `maslens serve` (SQLite, WAL) against Arize Phoenix 20.26.1, the same
# protobuf bytes to both, one sequential keep-alive Python client. Prints spans/s (first send -> all spans
# queryable in the server's SQLite), request latency p50/p99, peak RSS, spans lost, GET /api/runs/{id}
# latency of a 130-step run, the maslens / Phoenix ratio, and the machine's load before and after.
#
# usage: bench/serve_ingest.sh [--spans N (default 100000, a multiple of 1000)] [--skip-phoenix]
#                              [--out FILE (default target/bench/serve_ingest.json)]
#                              [--phoenix-timeout S (default 420: Phoenix stores ~80-130 spans/s on 2
#                               cores, so 100,000 spans do not all arrive; its rate is then measured on
#                               what arrived within S seconds of the first send, and the output says so)]
# env:   MASLENS_BIN   the binary (default target/debug/maslens; this script builds nothing)
#        MASLENS_VENV  the venv of scripts/pyenv.sh --phoenix (default ${MASLENS_HOME:-~/.cache/maslens}/venv)
# Everything else (databases, logs) goes to a temporary directory, removed at exit; every process the
# benchmark started is stopped at exit, also on Ctrl-C.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

spans=100000
skip_phoenix=0
phx_timeout=420
out="$root/target/bench/serve_ingest.json"
while [ $# -gt 0 ]; do
  case "$1" in
    --spans) spans="$2"; shift 2 ;;
    --spans=*) spans="${1#*=}"; shift ;;
    --skip-phoenix) skip_phoenix=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --phoenix-timeout) phx_timeout="$2"; shift 2 ;;
    --phoenix-timeout=*) phx_timeout="${1#*=}"; shift ;;
    --out=*) out="${1#*=}"; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serve_ingest.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

venv="${MASLENS_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' 2>/dev/null; then
  echo "serve_ingest.sh: no venv with opentelemetry-proto at $venv; run scripts/pyenv.sh --phoenix" >&2
  exit 1
fi
if [ "$skip_phoenix" = 0 ] && [ ! -x "$venv/bin/phoenix" ]; then
  echo "serve_ingest.sh: $venv/bin/phoenix missing; run scripts/pyenv.sh --phoenix (or pass --skip-phoenix)" >&2
  exit 1
fi
bin="${MASLENS_BIN:-$root/target/debug/maslens}"
if [ ! -x "$bin" ]; then
  echo "serve_ingest.sh: no maslens binary at $bin (set MASLENS_BIN or build it)" >&2
  exit 1
fi
case "$bin" in
  */target/debug/*) build="dev profile: workspace crates unoptimized (opt-level 0), dependencies at opt-level 2" ;;
  */target/release/*) build="release profile" ;;
  *) build="unknown profile" ;;
esac

tmp="$(mktemp -d "${TMPDIR:-/tmp}/maslens-serve-ingest.XXXXXX")"
pidfile="$tmp/pids"
: > "$pidfile"
py_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # The Python driver first (it stops its servers itself), then any server it left behind.
  if [ -n "$py_pid" ] && kill -0 "$py_pid" 2>/dev/null; then
    kill -TERM "$py_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$py_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$py_pid" 2>/dev/null || true
  fi
  while read -r pid; do
    [ -n "$pid" ] || continue
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done < "$pidfile"
  if [ "$rc" != 0 ] && [ -d "$tmp" ]; then
    for f in "$tmp"/maslens.err "$tmp"/phoenix.err; do
      [ -s "$f" ] && { echo "--- last lines of $(basename "$f"):" >&2; tail -n 20 "$f" >&2; }
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "uptime before: $(uptime)"
args=(--maslens "$bin" --build "$build" --spans "$spans" --tmp "$tmp" --pidfile "$pidfile" --out "$out" --phoenix-timeout "$phx_timeout")
if [ "$skip_phoenix" = 1 ]; then args+=(--skip-phoenix); else args+=(--phoenix "$venv/bin/phoenix"); fi
# In the background so that the trap can run on Ctrl-C while Python works.
PYTHONUNBUFFERED=1 "$venv/bin/python" "$root/bench/serve_ingest.py" "${args[@]}" &
py_pid=$!
wait "$py_pid"
py_pid=""
echo "uptime after: $(uptime)"
