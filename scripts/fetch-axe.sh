#!/usr/bin/env bash
# Fetch axe-core (the accessibility checker the browser UI tests inject through WebDriver) from the npm
# registry into $MASLENS_HOME/vendor/axe-core-<version>/ (MASLENS_HOME defaults to ~/.cache/maslens, as in
# scripts/fetch-model.sh). Test-only: axe-core is MPL-2.0 and is never compiled into or served by maslens.
# Idempotent: a present axe.min.js whose sha256 matches is not fetched again. Prints the axe.min.js path.
# Usage: scripts/fetch-axe.sh
set -euo pipefail
version="4.11.4"
url="https://registry.npmjs.org/axe-core/-/axe-core-$version.tgz"
# sha256 of the tarball (npm's own integrity is sha512-KunSNx+TVpkAw/6U...; sha1 5b535e38...).
tgz_sha="97175f79b2bd57adf1d4a55837f574093883bd9eb8096ea66abfafe2f2bdbdb9"
# sha256 of package/axe.min.js inside it (checked on every run, so a damaged copy is replaced).
js_sha="fb83a4378d978ecb7d2dae48a3a3778a84c971ac692f3afd45d714fba89c0f0d"
home="${MASLENS_HOME:-${HOME:-.}/.cache/maslens}"
dir="$home/vendor/axe-core-$version"
target="$dir/axe.min.js"
if [ -f "$target" ] && [ -f "$dir/LICENSE" ]; then
  if echo "$js_sha  $target" | sha256sum -c --status; then
    echo "$target"
    exit 0
  fi
  echo "fetch-axe: $target fails its sha256 check; fetching again" >&2
fi
command -v curl >/dev/null || { echo "fetch-axe: curl is needed" >&2; exit 2; }
mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
curl -sSfL --retry 3 -o "$tmp/axe.tgz" "$url"
echo "$tgz_sha  $tmp/axe.tgz" | sha256sum -c --status || { echo "fetch-axe: sha256 mismatch for $url" >&2; exit 1; }
tar -xzf "$tmp/axe.tgz" -C "$tmp" package/axe.min.js package/LICENSE package/LICENSE-3RD-PARTY.txt
echo "$js_sha  $tmp/package/axe.min.js" | sha256sum -c --status || { echo "fetch-axe: axe.min.js sha256 mismatch" >&2; exit 1; }
mv "$tmp/package/LICENSE" "$dir/LICENSE"
mv "$tmp/package/LICENSE-3RD-PARTY.txt" "$dir/LICENSE-3RD-PARTY.txt"
mv "$tmp/package/axe.min.js" "$target"
echo "$target"
