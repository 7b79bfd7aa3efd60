"""The improvement loop on scripted systems with one planted flaw (issue 39; docs/improve.md).

For every shape (chain3, chain4, star), every agent as the planted one, every flaw kind
(wrong-value, dropped-operand, early-stop) and each seed, `maslens.improve` runs with the prior as
the localizer (no model) and `maslens.testing.FixtureModel` as the rewriter (a labelled fixture: any
changed prompt of the planted agent fixes it, so the figures measure targeting, not rewriting):

- blame@1: the first iteration's weakest agent is the planted one;
- fixed: the held-out score of the final prompts is 1.0;
- only-planted: the kept changes touch the planted agent and no other;
- calls: the loop's model calls (the baseline gets the same budget);
- replay: held-out failures re-run from their located decisive step with the old prompts (no-op) and
  the kept change (fix); RR is the share repaired, pooled over the configurations' replayed runs.

The black-box baseline (one rewrite of every prompt from failed outputs) is scored the same way at
the loop's call budget. Intervals: Wilson 95% over the configurations. A configuration is one
system, so the interval is over systems, not over tasks.

usage: python bench/improve_planted.py [--seeds N] [--tasks N] [--json FILE]
(needs the maslens package with its native module, e.g. the venv of scripts/pyenv.sh)
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from typing import Any

import maslens
from maslens import testing


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def one(spec: str, shape: str, flawed: str, flaw: str, seed: int, n_tasks: int) -> dict[str, Any]:
    system = testing.PlantedFlawSystem(shape, flawed, flaw, seed=seed)  # type: ignore[arg-type]
    r = maslens.improve(system, testing.tasks(n_tasks, seed), model=spec, locate_method="prior", iterations=6, seed=seed, cache="off")
    first = r.report["iterations"][0]["chosen"] if r.report["iterations"] else []
    b = r.report.get("baseline") or {}
    b_changed = sorted(a for a, p in (b.get("final_prompts") or {}).items() if p != system.prompts[a])
    return {
        "shape": shape, "flawed": flawed, "flaw": flaw, "seed": seed,
        "blame1": first[:1] == [flawed],
        "chance": 1 / len(system.prompts),
        "fixed": r.report.get("final_score") == 1.0,
        "only_planted": r.changed == [flawed],
        "calls": r.report["usage"]["calls"],
        "baseline_fixed": b.get("final_score") == 1.0,
        "baseline_only_planted": b_changed == [flawed],
        "baseline_calls": b.get("calls", 0),
        "replay": [(row["intervention"], row["success"]) for row in (r.report.get("replay") or {}).get("rows", [])
                   if row["config"] == "held-out" and not row["original_success"]],
    }


def table(rows: list[dict[str, Any]], key: str) -> None:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r[key])].append(r)
    groups["all"] = rows
    cols = ["blame1", "fixed", "only_planted", "baseline_fixed", "baseline_only_planted"]
    print(f"\n| {key} | n | " + " | ".join(cols) + " | calls (mean) | baseline calls (mean) | blame1 by chance | held-out RR no-op -> fix |")
    print("|---|---:|" + "---|" * len(cols) + "---:|---:|---:|---|")
    for name, rs in groups.items():
        n = len(rs)
        cells = []
        for c in cols:
            k = sum(1 for r in rs if r[c])
            lo, hi = wilson(k, n)
            cells.append(f"{k / n:.2f} [{lo:.2f}, {hi:.2f}]")
        calls = sum(float(r["calls"]) for r in rs) / n
        bcalls = sum(float(r["baseline_calls"]) for r in rs) / n
        chance = sum(float(r["chance"]) for r in rs) / n
        print(f"| {name} | {n} | " + " | ".join(cells) + f" | {calls:.1f} | {bcalls:.1f} | {chance:.2f} | {replay(rs)} |")


def replay(rs: list[dict[str, Any]]) -> str:
    """Held-out RR no-op -> fix over every replayed failure, with Wilson intervals."""
    out = []
    for kind in ("noop", "fix"):
        done = [ok for r in rs for k, ok in r["replay"] if k == kind]
        lo, hi = wilson(sum(done), len(done))
        out.append(f"{sum(done) / max(1, len(done)):.2f} [{lo:.2f}, {hi:.2f}]")
    return f"{out[0]} -> {out[1]} (n {len(done)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--json")
    args = ap.parse_args()
    started = time.time()
    rows = []
    with testing.FixtureModel() as spec:
        for shape, steps in testing.SHAPES.items():
            for flawed in dict.fromkeys(a for a, _ in steps):
                for flaw in testing.FLAWS:
                    for seed in range(args.seeds):
                        rows.append(one(spec, shape, flawed, flaw, seed, args.tasks))
    print(f"{len(rows)} configurations in {time.time() - started:.1f} s (prior localizer, fixture rewriter)")
    for key in ("shape", "flaw", "flawed"):
        table(rows, key)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
