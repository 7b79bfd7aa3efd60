#!/usr/bin/env bash
# llama.cpp's own llama-bench against maslens's embedded backend, in one run: the same GGUF, the
# same threads and batch size, the same vendored llama.cpp source with the same CMake settings.
#
#   bench/llama_bench.sh [--model smollm2-135m] [--threads 2] [--prompt 512] [--gen 128] [--reps 3]
#
# Prints pp (prompt tokens/s) and tg (generated tokens/s) of both and the ratios, for a plain
# completion and for one constrained by the locate answer schema (maslens only: llama-bench
# samples nothing, so its tg is the ceiling for both). Targets (issue 20): >= 0.9x on pp and tg
# plain, >= 0.7x with the schema. Writes the raw JSON to $OUT (default target/bench/llama_bench).
#
# How llama-bench is built:
# - the library source is the llama.cpp directory of the llama-cpp-sys-2 crate this workspace
#   builds (found with `cargo metadata`), symlinked into target/bench/llama-bench/src;
# - the crate's package does not ship the tools' sources, so tools/llama-bench (llama-bench.cpp,
#   main.cpp, CMakeLists.txt; MIT, the llama.cpp authors) comes from the llama.cpp that the
#   llama-cpp-python sdist on PyPI vendors (pinned version and SHA-256 below), a neighbouring
#   llama.cpp revision whose llama.h differs only in two state-file version numbers;
# - CMake gets every GGML_*/LLAMA_* option, the build type and the C/C++ flags from the
#   CMakeCache.txt of the crate's own build (so GGML_NATIVE and the rest match), tools on.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
model=smollm2-135m
threads=$(nproc)
prompt=512
gen=128
reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --gen) gen=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "llama_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${OUT:-$root/target/bench/llama_bench}
work=$root/target/bench/llama-bench
mkdir -p "$out" "$work"

LCP_VERSION=0.3.36
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

echo "== maslens (dev profile, as scripts/maslens runs it)" >&2
cargo build --quiet -p maslens
bin=$root/target/debug/maslens
gguf=$("$bin" --quiet model pull "$model")

echo "== llama-bench from the vendored llama.cpp" >&2
crate_dir=$(cargo metadata --format-version 1 | python3 -c '
import json, os, sys
pk = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "llama-cpp-sys-2"]
print(os.path.dirname(pk[0]["manifest_path"]))')
lib_src=$crate_dir/llama.cpp
cache=$(ls -t target/debug/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt 2>/dev/null | head -1)
[ -n "$cache" ] || { echo "llama_bench.sh: no CMakeCache.txt of the crate's build under target/debug/build" >&2; exit 2; }
stamp=$(printf '%s\n' "$lib_src" "$LCP_SHA256" "$(sha256sum "$cache" | cut -c1-64)" | sha256sum | cut -c1-16)
lb=$work/build-$stamp/bin/llama-bench
if [ ! -x "$lb" ]; then
  sdist=$work/llama_cpp_python-$LCP_VERSION.tar.gz
  if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -c1-64)" != "$LCP_SHA256" ]; then
    index=https://pypi.org/pypi/llama-cpp-python/json
    url=$(curl -fsSL --max-time 60 "$index" | python3 -c '
import json, sys, urllib.parse
files = json.load(sys.stdin)["releases"][sys.argv[2]]
print(urllib.parse.urljoin(sys.argv[1], [u["url"] for u in files if u["packagetype"] == "sdist"][0]))' "$index" "$LCP_VERSION")
    curl -fsSL --max-time 600 -o "$sdist.part" "$url"
    got=$(sha256sum "$sdist.part" | cut -c1-64)
    [ "$got" = "$LCP_SHA256" ] || { echo "llama_bench.sh: sdist SHA-256 $got, expected $LCP_SHA256" >&2; exit 2; }
    mv "$sdist.part" "$sdist"
  fi
  src=$work/src-$stamp
  rm -rf "$src"
  mkdir -p "$src"
  cp -rs "$lib_src/." "$src/"
  rm -rf "$src/tools"
  mkdir -p "$src/tools"
  tar -xzf "$sdist" -C "$src/tools" --strip-components=4 \
    "llama_cpp_python-$LCP_VERSION/vendor/llama.cpp/tools/llama-bench"
  printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' > "$src/tools/CMakeLists.txt"
  defs=$(grep -E '^(GGML_[A-Z0-9_]+|LLAMA_[A-Z0-9_]+|BUILD_SHARED_LIBS|CMAKE_BUILD_TYPE|CMAKE_C_FLAGS|CMAKE_CXX_FLAGS):(BOOL|STRING)=' "$cache" \
    | grep -vE '^(LLAMA_BUILD_TOOLS|LLAMA_BUILD_COMMON|LLAMA_BUILD_APP|LLAMA_BUILD_SERVER|LLAMA_BUILD_TESTS|LLAMA_BUILD_EXAMPLES)[:]' \
    | sed 's/^/-D/')
  echo "llama-bench CMake settings from $cache:" >&2
  echo "$defs" | grep -E 'NATIVE|AVX|FMA|F16C|OPENMP|BUILD_TYPE|SHARED|_FLAGS:' >&2 || true
  mapfile -t defargs <<<"$defs"
  cmake -S "$src" -B "$work/build-$stamp" "${defargs[@]}" \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/cmake-$stamp.log"
  cmake --build "$work/build-$stamp" --target llama-bench -j "$(nproc)" >>"$work/cmake-$stamp.log"
fi

echo "== measuring: $model, $threads threads, pp$prompt, tg$gen, $reps runs each" >&2
# llama-bench: pp from an empty cache; tg at the depth of the prompt (as maslens generates after
# reading it). Batch and micro-batch 512 as the embedded backend uses.
"$lb" -m "$gguf" -t "$threads" -b 512 -ub 512 -p "$prompt" -n 0 -r "$reps" -o json >"$out/llama_bench_pp.json"
"$lb" -m "$gguf" -t "$threads" -b 512 -ub 512 -p 0 -n "$gen" -d "$prompt" -r "$reps" -o json >"$out/llama_bench_tg.json"
"$bin" --quiet model bench "$model" --threads "$threads" --prompt-tokens "$prompt" --gen-tokens "$gen" \
  --reps "$reps" --json >"$out/maslens.json"

python3 - "$out" <<'EOF'
import json, sys, os
out = sys.argv[1]
pp = json.load(open(os.path.join(out, "llama_bench_pp.json")))[0]
tg = json.load(open(os.path.join(out, "llama_bench_tg.json")))[0]
ours = json.load(open(os.path.join(out, "maslens.json")))
print(f"model {ours['model']}, {ours['threads']} threads; llama-bench build {pp.get('build_commit', '?')}")
print(f"llama-bench: pp{pp['n_prompt']} {pp['avg_ts']:.1f} ± {pp['stddev_ts']:.1f} tok/s, "
      f"tg{tg['n_gen']} @ depth {tg.get('n_depth', 0)} {tg['avg_ts']:.1f} ± {tg['stddev_ts']:.1f} tok/s")
targets = {"raw": 0.9, "schema:locate": 0.7}
ok = True
for row in ours["rows"]:
    rp = row["prompt"]["tokens_per_s"] / pp["avg_ts"]
    rg = row["generation"]["tokens_per_s"] / tg["avg_ts"]
    t = targets.get(row["case"], 0.0)
    # The target applies to generation (sampling + grammar per token); prompt reading takes no
    # grammar, so it is held to the plain target in both cases.
    verdict = "ok" if rp >= 0.9 and rg >= t else "BELOW TARGET"
    ok &= verdict == "ok"
    print(f"maslens {row['case']:<14} pp{row['prompt']['tokens']:.0f} {row['prompt']['tokens_per_s']:8.1f} tok/s "
          f"= {rp:.2f}x   tg {row['generation']['tokens_per_s']:7.1f} tok/s = {rg:.2f}x "
          f"({row['generation']['tokens']:.0f} tokens; targets pp >= 0.90x, tg >= {t:.2f}x): {verdict}")
sys.exit(0 if ok else 1)
EOF
