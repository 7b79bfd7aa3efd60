#!/usr/bin/env bash
# Fuzzing campaign of issue 16: every target of fuzz/ (the five trace importers, the OTLP
# importer, the JSON extractor, the structured-output parser, serve-model's request parser and
# its function calling) run by libFuzzer for --runs executions each (default 10,000,000), one
# target after the other on one core, under `nice -n 19`.
#
# Built with cargo-fuzz on the stable toolchain: cargo-fuzz passes no unstable flag with
# `--sanitizer none`, and RUSTC_BOOTSTRAP=1 covers the ones it may add (the sanitizer-coverage
# flags it uses are stable `-C` options). No sanitizer: the code under test is safe Rust, and a
# panic (or a broken invariant of fuzz/src/lib.rs) is what the targets look for; overflow checks
# and debug assertions are on (-a).
#
#   bench/fuzz.sh [--runs N] [--workers W] [--build-only|--no-build] [TARGET...]   (default: every target)
#   (--no-build: run the binaries already in fuzz/target, e.g. to finish an interrupted campaign;
#    --workers W: W processes per target sharing its corpus, N/W executions each, seeds 1..W,
#    the executions summed: as libFuzzer's -jobs, for a machine with W free cores)
#
# Per target: the corpus grows in fuzz/corpus/TARGET (git-ignored), seeded from fuzz/seeds/TARGET;
# a crash lands in fuzz/artifacts/TARGET/ and stops that target; logs in bench/out/fuzz/TARGET.log.
# Prints one line per target (executions, seconds, exec/s, crashes) and exits 1 on any crash.
# Needs: cargo install cargo-fuzz (crates.io), a C++ compiler (libFuzzer is built from source).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=10000000
WORKERS=1
BUILD_ONLY=0
NO_BUILD=0
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --no-build) NO_BUILD=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
ALL=(whowhen aegis chat native serve_request serve_tools otlp auto json_extract typed_answer)
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL[@]}")

command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2; exit 2; }
[ "$NO_BUILD" = 1 ] || (cd fuzz && RUSTC_BOOTSTRAP=1 nice -n 19 cargo fuzz build -O -a -s none)
[ "$BUILD_ONLY" = 1 ] && exit 0
BIN=fuzz/target/x86_64-unknown-linux-gnu/release
OUT=bench/out/fuzz
mkdir -p "$OUT"
# The `auto` target writes its input to two files per execution: keep them in memory.
SCRATCH=$(mktemp -d /dev/shm/maslens-fuzz.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

status=0
printf '%-14s %12s %8s %9s %8s %s\n' target executions seconds "exec/s" crashes max_len
for t in "${TARGETS[@]}"; do
  # Model answers (json_extract, typed_answer) are at most a few thousand characters: a longer
  # input only slows every execution (the extractor tries up to 64 starts over the whole text).
  case "$t" in json_extract|typed_answer) max_len=4096 ;; *) max_len=8192 ;; esac
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  before=$(ls "fuzz/artifacts/$t" | wc -l)
  start=$(date +%s)
  rc=0
  per=$(( (RUNS + WORKERS - 1) / WORKERS ))
  logs=()
  pids=()
  for w in $(seq 1 "$WORKERS"); do
    log="$OUT/$t.log"
    [ "$w" -gt 1 ] && log="$OUT/$t.w$w.log"
    logs+=("$log")
    # nice alone does not lower the fuzzer's share against other sessions' processes under Linux
    # autogroup scheduling: run it in its own session and give that session's autogroup nice 19.
    TMPDIR="$SCRATCH" setsid --wait sh -c 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' \
      fuzz "$BIN/$t" -runs="$per" -seed="$w" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
      "fuzz/corpus/$t" "fuzz/seeds/$t" > "$log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  secs=$(( $(date +%s) - start ))
  execs=0
  for log in "${logs[@]}"; do
    n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    execs=$(( execs + n ))
  done
  crashes=$(( $(ls "fuzz/artifacts/$t" | wc -l) - before ))
  [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes="rc=$rc"
  printf '%-14s %12s %8s %9s %8s %s\n' "$t" "$execs" "$secs" "$(( execs / (secs > 0 ? secs : 1) ))" "$crashes" "$max_len"
  if [ "$rc" -ne 0 ]; then status=1; grep -m5 -E 'panicked|ERROR|SUMMARY' "${logs[@]}" >&2 || true; fi
done
exit $status
