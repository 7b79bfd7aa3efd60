#!/usr/bin/env bash
# Create (or reuse) the Python venv that runs the OpenTelemetry producers in tests/otel/.
#
#   scripts/pyenv.sh             # OpenTelemetry SDK + OTLP/HTTP exporters + OpenInference + AutoGen/LangGraph,
#                                # and the Python package's build and test tools + OpenAI Agents SDK
#                                # (python/requirements/otel.txt and package.txt)
#   scripts/pyenv.sh --phoenix   # additionally arize-phoenix (python/requirements/phoenix.txt)
#   scripts/pyenv.sh --openai2   # a separate venv with AG2 (classic API) and CrewAI
#                                # (python/requirements/openai2.txt): they need openai<3, the OpenAI
#                                # Agents SDK openai>=3
#   scripts/pyenv.sh --frameworks # a separate venv for re-recording tests/otel/recorded: OpenAI Agents SDK,
#                                # smolagents, pydantic-ai (python/requirements/frameworks.txt)
#   scripts/pyenv.sh --frameworks-openai2 # a separate venv with LlamaIndex and AG2 0.14 (they need
#                                # openai<3; python/requirements/frameworks-openai2.txt)
#   scripts/pyenv.sh --frameworks-adk # a separate venv with Google ADK (it caps the OpenTelemetry SDK
#                                # below 1.45; python/requirements/frameworks-adk.txt)
#
# Prints the venv path on stdout (everything else goes to stderr), so:
#   VENV=$(scripts/pyenv.sh) && "$VENV/bin/python" tests/otel/genai_run.py --endpoint ...
#
# Venv: $MASLENS_VENV, else $MASLENS_HOME/venv, else ~/.cache/maslens/venv (--openai2: $MASLENS_OPENAI2_VENV,
# else $MASLENS_HOME/venv-openai2; --frameworks: $MASLENS_FRAMEWORKS_VENV, else $MASLENS_HOME/venv-frameworks;
# --frameworks-openai2: $MASLENS_FRAMEWORKS_OPENAI2_VENV, else $MASLENS_HOME/venv-frameworks-openai2;
# --frameworks-adk: $MASLENS_FRAMEWORKS_ADK_VENV, else $MASLENS_HOME/venv-frameworks-adk). Interpreter: $PYTHON or python3
# (>= 3.11). Idempotent: a stamp file in the venv records the sha256 of each requirements file installed,
# and an unchanged file is not installed again. Packages come from PyPI (pip honours PIP_INDEX_URL,
# PIP_FIND_LINKS etc. from the environment).
set -euo pipefail

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2; }

phoenix=0
openai2=0
frameworks=0
fwopenai2=0
fwadk=0
for arg in "$@"; do
  case "$arg" in
    --phoenix|phoenix) phoenix=1 ;;
    --openai2|openai2) openai2=1 ;;
    --frameworks|frameworks) frameworks=1 ;;
    --frameworks-openai2|frameworks-openai2) fwopenai2=1 ;;
    --frameworks-adk|frameworks-adk) fwadk=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "pyenv.sh: unknown argument: $arg" >&2; usage; exit 2 ;;
  esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
reqdir="$root/python/requirements"
if [ "$fwadk" = 1 ]; then
  venv="${MASLENS_FRAMEWORKS_ADK_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv-frameworks-adk}"
elif [ "$fwopenai2" = 1 ]; then
  venv="${MASLENS_FRAMEWORKS_OPENAI2_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv-frameworks-openai2}"
elif [ "$frameworks" = 1 ]; then
  venv="${MASLENS_FRAMEWORKS_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv-frameworks}"
elif [ "$openai2" = 1 ]; then
  venv="${MASLENS_OPENAI2_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv-openai2}"
else
  venv="${MASLENS_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv}"
fi
python="${PYTHON:-python3}"
stamp="$venv/.maslens-requirements.sha256"

if [ "$fwadk" = 1 ]; then
  reqs=("$reqdir/frameworks-adk.txt")
elif [ "$fwopenai2" = 1 ]; then
  reqs=("$reqdir/frameworks-openai2.txt")
elif [ "$frameworks" = 1 ]; then
  reqs=("$reqdir/frameworks.txt")
elif [ "$openai2" = 1 ]; then
  reqs=("$reqdir/openai2.txt")
else
  # Once phoenix is in the venv it stays part of every resolve, so a changed otel.txt cannot break it.
  if [ -f "$stamp" ] && grep -q '  phoenix.txt$' "$stamp"; then phoenix=1; fi
  reqs=("$reqdir/otel.txt" "$reqdir/package.txt")
  [ "$phoenix" = 1 ] && reqs+=("$reqdir/phoenix.txt")
fi
for r in "${reqs[@]}"; do
  [ -f "$r" ] || { echo "pyenv.sh: missing $r" >&2; exit 2; }
done

if ! command -v "$python" >/dev/null 2>&1; then
  echo "pyenv.sh: $python not found (set PYTHON=/path/to/python3.11+)" >&2
  exit 2
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "pyenv.sh: $("$python" --version 2>&1) is too old; need Python >= 3.11" >&2
  exit 2
fi

# A venv whose interpreter no longer runs (the base Python was removed or upgraded) is rebuilt.
if [ -e "$venv" ] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  echo "pyenv.sh: $venv is broken; recreating it" >&2
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "pyenv.sh: creating venv $venv with $("$python" --version 2>&1)" >&2
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
fi

# Which requirement files are not installed yet (or changed since)? The stamp holds "sha256  name" lines.
todo=()
for r in "${reqs[@]}"; do
  line="$(sha256sum "$r" | cut -d' ' -f1)  $(basename "$r")"
  if [ ! -f "$stamp" ] || ! grep -qxF "$line" "$stamp"; then
    todo+=("$r")
  fi
done

if [ "${#todo[@]}" -gt 0 ]; then
  # One resolve over every requested file, so phoenix's dependencies and the otel pins agree.
  args=()
  for r in "${reqs[@]}"; do args+=(-r "$r"); done
  echo "pyenv.sh: installing ${todo[*]##*/} into $venv" >&2
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "${args[@]}" >&2
  "$venv/bin/python" -m pip check >&2 || echo "pyenv.sh: warning: pip check reports conflicts" >&2
  # Rewrite the stamp: keep entries for other files, replace the ones just installed.
  tmp="$stamp.tmp"
  : >"$tmp"
  if [ -f "$stamp" ]; then
    for r in "${reqs[@]}"; do
      grep -vE "  $(basename "$r")\$" "$stamp" >"$tmp.keep" || true
      mv "$tmp.keep" "$stamp"
    done
    cat "$stamp" >>"$tmp"
  fi
  for r in "${reqs[@]}"; do
    echo "$(sha256sum "$r" | cut -d' ' -f1)  $(basename "$r")" >>"$tmp"
  done
  mv "$tmp" "$stamp"
else
  echo "pyenv.sh: $venv is up to date" >&2
fi

echo "$venv"
