#!/usr/bin/env python3
"""Compare two `maslens eval locate` report.json files (e.g. one made before a change and one
rebuilt with --cache-mode replay after it): per-case verdicts and every metric must match.
Keys that only exist in one format version (format_version, provenance, stopped_early,
joint_accuracy) are
ignored; so is wall time (usage.seconds and per-case seconds), which replay does not reproduce.
Usage: compare_reports.py OLD/report.json NEW/report.json   (exit 1 when they differ)"""
import json
import sys

IGNORED = {"format_version", "provenance", "stopped_early", "joint_accuracy"}
PER_CASE_USAGE = {"prompt_tokens", "cached_tokens", "completion_tokens", "calls"}


def strip(v, path=""):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if path == "" and k in IGNORED:
                continue
            if k == "seconds" or (k == "cost_usd" and x is None):
                continue
            if path == "" and k == "config" and isinstance(x, dict):
                x = {k2: y for k2, y in x.items() if k2 != "stopped_early"}
            if path.endswith("per_case") and k == "usage":
                # Format 2 writes the one usage type (maslens_llm::Totals): the keys it adds
                # (repairs, abstentions, cache_hits, ...) are compared only when both have them.
                x = {k2: y for k2, y in x.items() if k2 in PER_CASE_USAGE}
            out[k] = strip(x, path + "/" + k)
        return out
    if isinstance(v, list):
        return [strip(x, path) for x in v]
    if isinstance(v, float):
        return round(v, 9)
    return v


def diff(a, b, path, out):
    if type(a) is not type(b):
        out.append(f"{path}: {a!r} != {b!r}")
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'new' if k in b else 'old'}")
            else:
                diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items != {len(b)} items")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def main():
    old, new = (strip(json.load(open(p))) for p in sys.argv[1:3])
    out = []
    diff(old, new, "", out)
    # The verdicts beside the reports: same location, rationale and confidence per trace.
    def verdicts(report_path):
        path = report_path.rsplit("/", 1)[0] + "/verdicts.jsonl"
        try:
            rows = [json.loads(l) for l in open(path) if l.strip()]
        except FileNotFoundError:
            return None
        keys = ("trace", "agent", "step", "rationale", "confidence", "error_mode", "abstain_reason")
        return [{k: r.get(k) for k in keys} for r in rows]
    va, vb = verdicts(sys.argv[1]), verdicts(sys.argv[2])
    if va is not None and vb is not None:
        diff(va, vb, "verdicts.jsonl", out)
    for line in out[:40]:
        print(line)
    n = len(old.get("per_case", []))
    print(f"{sys.argv[2]}: {'identical' if not out else f'{len(out)} differences'} ({n} cases)")
    sys.exit(1 if out else 0)


if __name__ == "__main__":
    main()
