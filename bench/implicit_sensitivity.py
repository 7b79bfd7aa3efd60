#!/usr/bin/env python3
"""Write a SYNTHETIC `maslens scan --out` file shaped like the MASIF corpus (paper tables 1-3).

Nothing in it is model output: every event is drawn at random (seeded) so that the corpus-level
statistics match the paper's published tables exactly, and every event says so in its
description and flags. Its purpose is to give `maslens select` (best-of-N and the appendix-A
weight-sensitivity study) a corpus whose risks are not all zero, so that the sensitivity
Spearman is defined and comparable in spirit to the paper's figure (> 0.993).

Corpus (every count exact, assignment random):
- 1,828 traces: 258 successes and 1,570 failures (table 1 totals), shuffled and grouped into
  tasks of 16 candidates (114 tasks of 16 and one task of the 4 left over, which best-of-N with
  N = 8 or 16 skips);
- trace length L (parsed steps): round(lognormal(median 20, sigma 0.7)) clipped to [4, 150]
  (the paper publishes no length distribution; this one is an assumption), the same for
  successes and failures;
- prevalence: exactly 140 of the 258 successes (54.3%) and 1,181 of the 1,570 failures (75.2%)
  have at least one IF (section 2.2);
- IF counts: each affected trace gets one IF; the rest of the outcome's IF total from table 3
  (225 in successes, 2,819 in failures; 3,044 in all) is dealt out one IF at a time to affected
  traces with probability proportional to L (at most L IFs per trace);
- error types: table 2 shares x 3,044, rounded by largest remainder (the shares add up to
  99.9%), shuffled over all IFs (independent of outcome and absorption: the paper gives no
  joint table);
- absorption: table 3 counts of the trace's outcome column (success or failure), shuffled within
  the outcome; the paper's pooled "trivial/unknown" row is labelled trivial_issue;
- each IF sits at a distinct random step of its trace, by one of four generic agents; one group
  per IF (no repeated manifestations), so risk_grouped = risk.

Risk and cost are computed with the default weights (paper tables 7-8), exactly as
`maslens scan` does: cost = sum(w_type * w_abs) in event order, risk = cost / max(1, L).
The corpus report is computed as `maslens_implicit::report::corpus_report` does, except the
prevalence bootstrap intervals, which use Python's seeded generator (5,000 resamples drawn
from the exact binomial distribution of the resampled count) instead of ChaCha8: same method,
different random numbers.

Python standard library only. Usage:
    python3 bench/implicit_sensitivity.py --out scan.json [--seed 0]
"""

import argparse
import bisect
import json
import math
import random
import sys

N_SUCCESS, N_FAILURE = 258, 1570
WITH_IF = {"success": 140, "failure": 1181}
CANDIDATES_PER_TASK = 16

# Table 2 (share of all IFs), in maslens' ErrorType::ALL order.
TYPE_SHARES = [
    ("failed_tool_use", 24.5),
    ("wrong_action", 23.0),
    ("unnecessary_action", 16.4),
    ("hallucination", 15.3),
    ("incomplete_action", 9.1),
    ("reasoning_error", 8.6),
    ("misunderstanding", 2.8),
    ("malformed_output", 0.2),
]

# Table 3 (IF counts by trace outcome), in maslens' Absorption::ALL order.
ABSORPTION = [
    # label, success, failure
    ("self_corrected", 34, 585),
    ("self_workaround", 23, 412),
    ("peer_repair", 4, 38),
    ("orchestrator_intervention", 36, 262),
    ("unresolved_propagation", 51, 485),
    ("trivial_issue", 77, 1037),
]

# Tables 7-8: the default weights of maslens_implicit::Weights (BTreeMap order = enum order).
W_TYPE = {
    "failed_tool_use": 1.0,
    "wrong_action": 1.1,
    "unnecessary_action": 0.6,
    "hallucination": 1.3,
    "incomplete_action": 0.9,
    "reasoning_error": 1.2,
    "misunderstanding": 1.1,
    "malformed_output": 1.0,
}
W_ABS = {
    "self_corrected": 0.55,
    "self_workaround": 0.65,
    "peer_repair": 0.75,
    "orchestrator_intervention": 0.8,
    "unresolved_propagation": 1.4,
    "trivial_issue": 0.35,
}
W_UNKNOWN = 0.35

AGENTS = ["agent_1", "agent_2", "agent_3", "agent_4"]
LEN_MEDIAN, LEN_SIGMA, LEN_MIN, LEN_MAX = 20.0, 0.7, 4, 150
RESAMPLES = 5000
DESCRIPTION = "synthetic IF (paper table 2/3 distribution); not model output"
FLAG = "synthetic event: drawn by bench/implicit_sensitivity.py, no trace text behind it"


def largest_remainder(shares, total):
    raw = [s / sum(shares) * total for s in shares]
    counts = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def binomial_cdf(n, p):
    """CDF of Binomial(n, p) as a list (exact, through log-gamma)."""
    if p <= 0.0:
        return [1.0] * (n + 1)
    if p >= 1.0:
        return [0.0] * n + [1.0]
    cdf, acc = [], 0.0
    for k in range(n + 1):
        lp = (
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * math.log(p)
            + (n - k) * math.log(1.0 - p)
        )
        acc += math.exp(lp)
        cdf.append(acc)
    return cdf


def quantile_sorted(xs, q):
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def proportion_ci(flags, rng):
    """Percentile bootstrap of a proportion, as maslens_eval::stats::bootstrap_proportion_ci."""
    n = len(flags)
    if n == 0:
        return None
    k = sum(flags)
    cdf = binomial_cdf(n, k / n)
    stats = sorted(min(bisect.bisect_left(cdf, rng.random()), n) / n for _ in range(RESAMPLES))
    return {
        "estimate": k / n,
        "lo": quantile_sorted(stats, 0.025),
        "hi": quantile_sorted(stats, 0.975),
        "level": 0.95,
        "resamples": RESAMPLES,
    }


def share(k, n):
    return k / n if n > 0 else None


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def build(seed):
    rng = random.Random(seed)
    outcomes = ["success"] * N_SUCCESS + ["failure"] * N_FAILURE
    rng.shuffle(outcomes)
    lengths = [
        min(LEN_MAX, max(LEN_MIN, round(rng.lognormvariate(math.log(LEN_MEDIAN), LEN_SIGMA))))
        for _ in outcomes
    ]
    counts = [0] * len(outcomes)
    for outcome in ("success", "failure"):
        members = [i for i, o in enumerate(outcomes) if o == outcome]
        affected = rng.sample(members, WITH_IF[outcome])
        col = 1 if outcome == "success" else 2
        total = sum(row[col] for row in ABSORPTION)
        for i in affected:
            counts[i] = 1
        weights = [lengths[i] for i in affected]
        extra = total - len(affected)
        while extra > 0:
            i = rng.choices(affected, weights=weights)[0]
            if counts[i] < lengths[i]:
                counts[i] += 1
                extra -= 1
    n_ifs = sum(counts)
    type_counts = largest_remainder([s for _, s in TYPE_SHARES], n_ifs)
    types = [t for (t, _), c in zip(TYPE_SHARES, type_counts) for _ in range(c)]
    rng.shuffle(types)
    absorption = {}
    for outcome, col in (("success", 1), ("failure", 2)):
        labels = [row[0] for row in ABSORPTION for _ in range(row[col])]
        rng.shuffle(labels)
        absorption[outcome] = labels
    traces = []
    next_type = 0
    for i, outcome in enumerate(outcomes):
        task_no, cand_no = divmod(i, CANDIDATES_PER_TASK)
        steps = sorted(rng.sample(range(lengths[i]), counts[i]))
        events = []
        for step in steps:
            label = absorption[outcome].pop()
            events.append(
                {
                    "step": step,
                    "agent": rng.choice(AGENTS),
                    "error_type": types[next_type],
                    "description": DESCRIPTION,
                    "evidence": "",
                    "severity": "medium",
                    "confidence": "high",
                    "evidence_check": {"status": "verbatim", "coverage": 1.0, "agent_matches": True},
                    "flags": [FLAG],
                    "windows": [0],
                    "absorption": {
                        "label": label,
                        "rationale": "synthetic label drawn from table 3 (the trace outcome's column)",
                    },
                    "group": len(events),
                }
            )
            next_type += 1
        cost = 0.0
        for e in events:
            cost += W_TYPE[e["error_type"]] * W_ABS.get(e["absorption"]["label"], W_UNKNOWN)
        risk = cost / max(1, lengths[i])
        traces.append(
            {
                "id": f"synthetic-masif/t{task_no:03d}/c{cand_no:02d}",
                "task": f"synthetic task {task_no:03d} (MASIF-shaped corpus, not a real task)",
                "outcome": outcome,
                "steps": lengths[i],
                "events": events,
                "flagged": [],
                "groups": [
                    {"id": g, "source_step": e["step"], "manifestations": [], "members": [g]}
                    for g, e in enumerate(events)
                ],
                "cost": cost,
                "risk": risk,
                "risk_grouped": risk,
                "windows": 1,
                "abstentions": [],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0},
                "calls": 0,
                "seconds": 0.0,
            }
        )
    assert next_type == n_ifs and all(not v for v in absorption.values())
    return traces


def report(traces, seed):
    rng = random.Random(seed ^ 0x5EED)
    strata = []
    for name in ("success", "failure", "unknown", "all"):
        members = [t for t in traces if name == "all" or t["outcome"] == name]
        if not members and name == "unknown":
            continue
        has = [bool(t["events"]) for t in members]
        ifs = sum(len(t["events"]) for t in members)
        strata.append(
            {
                "outcome": name,
                "traces": len(members),
                "with_if": sum(has),
                "prevalence": share(sum(has), len(members)),
                "prevalence_ci": proportion_ci(has, rng),
                "ifs": ifs,
                "intensity": share(ifs, len(members)),
                "mean_risk": mean([t["risk"] for t in members]),
            }
        )
    events = [(t, e) for t in traces for e in t["events"]]
    total = len(events)
    error_types = []
    for label, _ in TYPE_SHARES:
        c = sum(1 for _, e in events if e["error_type"] == label)
        error_types.append({"label": label, "count": c, "share": share(c, total)})
    rows = []
    for label in [row[0] for row in ABSORPTION] + [None]:
        matching = [(t, e) for t, e in events if e["absorption"]["label"] == label]
        by = lambda o: sum(1 for t, _ in matching if t["outcome"] == o)  # noqa: E731
        rows.append(
            {
                "label": label or "unknown",
                "success": by("success"),
                "failure": by("failure"),
                "unknown_outcome": by("unknown"),
                "total": len(matching),
                "share": share(len(matching), total),
            }
        )
    informative = [e["absorption"]["label"] for _, e in events if e["absorption"]["label"] not in (None, "trivial_issue")]
    absorbed = sum(1 for a in informative if a != "unresolved_propagation")
    n = len(traces)
    return {
        "traces": n,
        "strata": strata,
        "error_types": error_types,
        "absorption": rows,
        "informative": len(informative),
        "absorbed_share": share(absorbed, len(informative)),
        "propagated_share": share(len(informative) - absorbed, len(informative)),
        "flagged": 0,
        "abstentions": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "calls": 0,
        "seconds": 0.0,
        "tokens_per_trace": 0.0 if n else None,
        "seconds_per_trace": 0.0 if n else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="scan JSON to write")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    args = ap.parse_args()
    traces = build(args.seed)
    scan = {
        "model": f"synthetic:masif-tables-1-3 (seed {args.seed}; generated by bench/implicit_sensitivity.py, not a model)",
        "judges": [],
        "prompt_versions": [],
        "weights": {"error_type": W_TYPE, "absorption": W_ABS, "unknown_absorption": W_UNKNOWN},
        "report": report(traces, args.seed),
        "traces": traces,
        "errors": [],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(scan, f, indent=2)
        f.write("\n")
    r = scan["report"]
    print(
        f"wrote {args.out}: {r['traces']} synthetic traces, "
        + ", ".join(f"{s['outcome']} {s['with_if']}/{s['traces']} with IF, {s['ifs']} IFs" for s in r["strata"]),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
