#!/usr/bin/env bash
# `locate(method="prior")` over 1,000 traces from Python, against the CLI on the same traces, both
# measured in this run (issue 19's target: Python within 1.2x of the CLI).
#
#   bench/python_locate.sh [N_TRACES] [REPS]
#
# The traces: the Who&When cases in ../shared/data, repeated with new ids to N_TRACES (default 1000)
# in one native JSONL file. CLI: `maslens locate FILE --method prior --json --quiet > /dev/null`.
# Python: `maslens.locate(maslens.read(FILE), method="prior", progress=False)` in a fresh interpreter,
# timed from before the read to after the verdicts are Python objects (interpreter start-up and
# `import maslens` excluded; the CLI's process start-up is included, a few ms). Best of REPS (default 5).
# Needs the package installed in the venv (scripts/python-test.sh) and target/release or target/debug
# maslens (MASLENS_BIN overrides); for figures use release builds of both (maturin build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
reps=${2:-5}
venv=${MASLENS_VENV:-${MASLENS_HOME:-$HOME/.cache/maslens}/venv}
bin=${MASLENS_BIN:-target/release/maslens}
[ -x "$bin" ] || bin=target/debug/maslens
shared=${MASLENS_SHARED:-../shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" - "$shared/data/whowhen" "$n" "$work/traces.jsonl" <<'PY'
import sys, maslens
src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = maslens.read(src)
with open(out, "w") as f:
    for i in range(n):
        d = base[i % len(base)].to_dict()
        d["id"] = f"{d['id']}#{i}"
        f.write(maslens.Trace.from_dict(d).to_json() + "\n")
PY
"$venv/bin/python" - "$work/traces.jsonl" "$reps" "$bin" "$n" <<'PY'
import subprocess, sys, time
import maslens
path, reps, binary, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def best(f):
    out = None
    for _ in range(reps):
        s = time.perf_counter()
        f()
        e = time.perf_counter() - s
        out = e if out is None else min(out, e)
    return out

def cli():
    subprocess.run([binary, "locate", path, "--method", "prior", "--json", "--quiet"], stdout=subprocess.DEVNULL, check=True)

def py():
    v = maslens.locate(maslens.read(path), method="prior", progress=False)
    assert len(v) > 0 and all(x.error is None for x in v)

c, p = best(cli), best(py)
print(f"traces: {n} (Who&When cases repeated), reps: {reps} (best of), binary: {binary}")
print(f"cli    {c:.4f} s")
print(f"python {p:.4f} s")
print(f"ratio python/cli: {p / c:.3f}")
PY
