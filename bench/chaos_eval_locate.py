#!/usr/bin/env python3
"""Chaos figure of issue 16: `maslens eval locate` over N synthetic traces against the scripted
OpenAI-compatible server (bench/fixture_llm.py), killed with SIGKILL at K seeded moments and
resumed, compared with an uninterrupted run of the same binary.

Protocol:
1. Reference: a fresh cache, one uninterrupted run; the server counts R requests.
2. Chaos: a fresh cache and a fresh server. K kill points are drawn (seeded) among the request
   counts 1..R-1; for each, the run is started (the same command, same cache), and once the
   server has received that many requests in all (plus a seeded delay of up to one answer's
   time) the process gets SIGKILL. Before each start the cache's stored requests are read: a
   request that reaches the server for a call already stored is a **repeated call**, as is a
   request sent twice within one run. A request for a call that was in flight at the previous
   kill (sent, never stored) is counted apart (a resend: the answer never reached the cache).
   After each kill the cache must pass `PRAGMA integrity_check`.
3. A last run without a kill completes the report. Its report.json and verdicts.jsonl are
   compared with the reference's with timing fields removed (every key named `seconds`), and
   every case must carry the reference's verdict (a **lost verdict** otherwise).

Usage: chaos_eval_locate.py --bin PATH [--traces 100] [--kills 20] [--seed 16] [--delay-ms 40]
       [--concurrency 8] [--work DIR]   (exit 1 when any figure misses)
"""
import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_llm import Fixture, identity_of_cached  # noqa: E402

AGENTS = ["Planner", "Coder", "Searcher", "Verifier"]
WORDS = ("search compute verify total price flight answer table index parse result value check "
         "plan draft summary convert units weather station record query filter").split()


def make_dataset(n, seed, path):
    """N native traces with a decisive label each (4-9 steps, four agents and a human)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            k = rng.randint(4, 9)
            steps = [{"index": 0, "agent": "human", "content": f"Task {i}: find the {rng.choice(WORDS)} of item {i}."}]
            for s in range(1, k):
                a = rng.choice(AGENTS)
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20)))
                steps.append({"index": s, "agent": a, "content": f"{text} ({i}.{s})"})
            dec = rng.randint(1, k - 1)
            t = {"format_version": 1, "id": f"chaos-{i:03d}", "task": f"Task {i}", "outcome": "failure",
                 "agents": [{"name": "human", "kind": "human"}] + [{"name": a, "kind": "worker"} for a in AGENTS],
                 "steps": steps,
                 "labels": {"decisive": {"agent": steps[dec]["agent"], "step": dec}}}
            f.write(json.dumps(t) + "\n")


def stored(cache):
    """Identities of the requests stored in the cache, and its integrity check's answer."""
    if not os.path.exists(cache):
        return set(), "ok"
    c = sqlite3.connect(cache)
    try:
        ids = {identity_of_cached(r[0]) for r in c.execute("SELECT request FROM calls")}
        ok = c.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        c.close()
    return ids, ok


def command(args, base_url, cache, out):
    return [args.bin, "eval", "locate", args.dataset, "--model", f"openai:fixture@{base_url}",
            "--cache", cache, "--out", out, "-q", "--concurrency", str(args.concurrency),
            "--seed", "7"]


TIMING = {"seconds"}


def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k not in TIMING}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v


def diff(a, b, path, out):
    if type(a) is not type(b):
        out.append(f"{path}: {a!r} != {b!r}")
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in one")
            else:
                diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items != {len(b)} items")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def load(out):
    report = json.load(open(os.path.join(out, "report.json")))
    verdicts = [json.loads(l) for l in open(os.path.join(out, "verdicts.jsonl")) if l.strip()]
    return report, verdicts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--traces", type=int, default=100)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--delay-ms", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--work", default="bench/out/chaos")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    for f in os.listdir(args.work):
        p = os.path.join(args.work, f)
        if os.path.isfile(p):
            os.remove(p)
    args.dataset = os.path.join(args.work, "traces.jsonl")
    make_dataset(args.traces, args.seed, args.dataset)
    env = dict(os.environ, MASLENS_HOME=os.path.join(args.work, "home"), NO_COLOR="1")
    env.pop("MASLENS_MODEL", None)

    # 1. Reference.
    ref = Fixture(delay_ms=args.delay_ms).start()
    ref_out = os.path.join(args.work, "reference")
    t0 = time.time()
    r = subprocess.run(command(args, ref.base_url, os.path.join(args.work, "ref.sqlite"), ref_out),
                       env=env, capture_output=True, text=True)
    ref_wall = time.time() - t0
    if r.returncode not in (0, 1):
        sys.exit(f"reference run failed ({r.returncode}): {r.stderr[-2000:]}")
    R = ref.stats.received
    ref.stop()
    print(f"reference: {args.traces} traces, {R} requests ({len(ref.stats.per_identity)} distinct), "
          f"{ref_wall:.1f} s, exit {r.returncode}")

    # 2. Chaos.
    rng = random.Random(args.seed)
    points = sorted(rng.sample(range(1, R), args.kills))
    srv = Fixture(delay_ms=args.delay_ms).start()
    cache = os.path.join(args.work, "chaos.sqlite")
    out = os.path.join(args.work, "chaos")
    cmd = command(args, srv.base_url, cache, out)
    repeated, resent, kills, missed, bad_integrity = 0, 0, 0, 0, []
    ever = set()  # identities requested in earlier runs
    runs = []

    def run_once(point):
        nonlocal repeated, resent, kills, missed
        before, ok = stored(cache)
        if ok != "ok":
            bad_integrity.append(ok)
        start = len(srv.stats.log)
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        killed = False
        if point is not None:
            while p.poll() is None and srv.stats.received < point:
                time.sleep(0.002)
            time.sleep(rng.uniform(0, args.delay_ms / 1000.0))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                killed = True
        _, err = p.communicate()
        this = [i for _, i in srv.stats.log[start:]]
        rep = sum(1 for i in this if i in before)
        twice = len(this) - len(set(this))
        res = sum(1 for i in set(this) if i in ever and i not in before)
        repeated += rep + twice
        resent += res
        ever.update(this)
        if point is not None:
            kills += killed
            missed += not killed
        runs.append({"kill_at": point, "killed": killed, "exit": p.returncode, "requests": len(this),
                     "stored_before": len(before), "repeated": rep + twice, "resent_in_flight": res})
        return p.returncode, err

    for pt in points:
        run_once(pt)
    code, err = run_once(None)
    after, ok = stored(cache)
    if ok != "ok":
        bad_integrity.append(ok)
    srv.stop()

    # 3. Compare.
    ref_report, ref_verdicts = load(ref_out)
    report, verdicts = load(out)
    diffs = []
    diff(strip(ref_report), strip(report), "report.json", diffs)
    diff(strip(ref_verdicts), strip(verdicts), "verdicts.jsonl", diffs)
    ref_pred = {c["id"]: c["pred"] for c in ref_report["per_case"]}
    got_pred = {c["id"]: c["pred"] for c in report["per_case"]}
    lost = sum(1 for k, v in ref_pred.items() if got_pred.get(k) != v)

    for x in runs:
        print(json.dumps(x))
    summary = {
        "traces": args.traces, "seed": args.seed, "kills": kills, "kill_points_missed": missed,
        "reference_requests": R, "chaos_requests": srv.stats.received,
        "repeated_calls": repeated, "resent_in_flight": resent,
        "distinct_stored": len(after), "reference_distinct": len(ref.stats.per_identity),
        "lost_verdicts": lost, "cases": len(got_pred), "final_exit": code,
        "report_differences": len(diffs), "integrity": bad_integrity or "ok",
    }
    for d in diffs[:30]:
        print("DIFF", d)
    print(json.dumps(summary))
    ok = (kills == args.kills and repeated == 0 and lost == 0 and not diffs and not bad_integrity
          and len(got_pred) == args.traces and len(after) == len(ref.stats.per_identity))
    print("chaos: " + ("PASS" if ok else "FAIL") +
          f": {kills} kills, {repeated} repeated calls, {resent} in-flight resends, {lost} lost verdicts, "
          f"report {'identical' if not diffs else 'DIFFERENT'} (timing fields aside)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
