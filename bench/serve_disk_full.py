#!/usr/bin/env python3
"""`maslens serve` on a disk that fills up, then has room again (issue 35: "after 'database or disk is
full', every later write fails with 'attempted to call begin_with at non-zero transaction depth', also
after space is freed", until a restart).

Setup: a tmpfs of --size-mib MiB mounted on a temporary directory (needs root; or --dir DIR, a small
file system you made), a filler file taking --filler-percent of it, and `maslens serve --db DIR/store.db
--port 0 --diagnose off --settle 0.5` (the prior diagnoses every completed run on arrival).
Load: runs (a root span and 4 chat spans of named agents with --pad bytes of text each, one OTLP/JSON
request a run) are sent until the server refuses N requests in a row (the disk is full); a refused
request is kept to send again, as an exporter would. Then the filler is deleted (room again), every
refused request is sent again and --after more runs are sent; the server must take them all without a
restart.

Checks (exit 1 when one fails): the server answered /health while the disk was full; no request was
answered 200 and then lost (every span of every acknowledged request is in the store, read with sqlite3
after the server stops); after the space came back every run is complete and diagnosed; the refusals
were retryable (503 or 429, so exporters send again), not 4xx that drop the data. Prints the counts,
the status codes seen while full, and the seconds from freeing space to the first accepted request.

usage: sudo bench/serve_disk_full.py [--bin target/debug/maslens] [--size-mib 8] [--pad 2000] [--full-wait 30]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
AGENTS = ["Planner", "Coder", "Critic", "Writer"]
T0 = 1_767_225_600_000_000_000


def run_body(n: int, pad: int) -> tuple[bytes, list[tuple[str, str]]]:
    """One run as one OTLP/JSON request, and its (trace id, span id) keys."""
    trace = f"{n:032x}"
    base = T0 + n * 10_000_000
    spans = [{"traceId": trace, "spanId": f"{n:08x}00000001", "name": "invoke_workflow diskfull",
              "startTimeUnixNano": str(base), "endTimeUnixNano": str(base + 9_000_000),
              "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_workflow"}}]}]
    for i in range(4):
        start = base + (i + 1) * 1_000_000
        text = f"run {n} turn {i}: " + ("lorem ipsum " * (pad // 12 + 1))[:pad]
        msg = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
        spans.append({"traceId": trace, "spanId": f"{n:08x}{i + 2:08x}", "parentSpanId": f"{n:08x}00000001",
                      "name": "chat gpt-4o-mini", "startTimeUnixNano": str(start),
                      "endTimeUnixNano": str(start + 500_000),
                      "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                     {"key": "gen_ai.agent.name", "value": {"stringValue": AGENTS[i]}},
                                     {"key": "gen_ai.output.messages", "value": {"stringValue": msg}}]})
    body = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "diskfull"}}]},
                               "scopeSpans": [{"spans": spans}]}]}
    return json.dumps(body).encode(), [(trace, s["spanId"]) for s in spans]


def status(req: urllib.request.Request | str, timeout: float) -> int:
    """The HTTP status of a request; -1 when no answer came."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return -1


def post(url: str, body: bytes) -> int:
    return status(urllib.request.Request(url + "/v1/traces", data=body, headers={"content-type": "application/json"}), 30)


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def health(url: str) -> int:
    return status(url + "/health", 10)


def mount(size_mib: int) -> str:
    d = tempfile.mkdtemp(prefix="maslens-diskfull-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", d], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"cannot mount a {size_mib} MiB tmpfs on {d} ({r.stderr.strip()}): run as root, or pass --dir")
    return d


def start(binary: str, db: str, log: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([binary, "serve", "--db", db, "--port", "0", "--diagnose", "off", "--settle", "0.5"],
                            stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"(http://[\d.]+:\d+)", line)
    if not m:
        raise SystemExit(f"serve did not start: {line!r} (log: {log})")
    return proc, m.group(1)


def fill(url: str, pad: int, n0: int, give_up: int) -> tuple[int, list[bytes], set[tuple[str, str]], Counter[int], bool]:
    """Sends runs until `give_up` refusals in a row: (next n, refused bodies, acked keys, codes while
    full, /health answered while full)."""
    acked: set[tuple[str, str]] = set()
    refused: list[bytes] = []
    codes: Counter[int] = Counter()
    in_a_row, n, healthy = 0, n0, True
    while in_a_row < give_up and n < n0 + 100_000:
        body, keys = run_body(n, pad)
        n += 1
        code = post(url, body)
        if code == 200:
            acked.update(keys)
            in_a_row = 0
        else:
            codes[code] += 1
            refused.append(body)
            in_a_row += 1
            healthy = healthy and health(url) == 200
    return n, refused, acked, codes, healthy


def resend(url: str, bodies: list[bytes], minutes: float) -> tuple[int, float | None]:
    """Sends each body until it is taken, as an exporter retries: (how many taken, seconds to the first)."""
    start, first, taken = time.time(), None, 0
    for body in bodies:
        while time.time() - start < minutes * 60:
            if post(url, body) == 200:
                taken += 1
                first = first if first is not None else time.time() - start
                break
            time.sleep(0.2)
    return taken, first


def settle(url: str, runs: int, minutes: float) -> list[dict[str, object]]:
    """Waits until `runs` runs are complete and diagnosed; the runs as the API lists them."""
    deadline = time.time() + minutes * 60
    listed: list[dict[str, object]] = []
    while True:
        page = get_json(f"{url}/api/runs?limit=1000")
        listed = page["runs"] if isinstance(page, dict) else page  # type: ignore[index,assignment]
        done = [r for r in listed if r.get("state") == "complete" and r.get("located_agent")]
        if len(done) >= runs or time.time() >= deadline:
            return listed
        time.sleep(0.5)


def count_done(listed: list[dict[str, object]]) -> int:
    return sum(1 for r in listed if r.get("state") == "complete" and r.get("located_agent"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "debug", "maslens"))
    ap.add_argument("--dir", help="a small file system to use (default: a tmpfs mounted here, as root)")
    ap.add_argument("--size-mib", type=int, default=8)
    ap.add_argument("--filler-percent", type=int, default=70)
    ap.add_argument("--pad", type=int, default=2000, help="bytes of text per chat span")
    ap.add_argument("--give-up", type=int, default=5, help="refusals in a row that mean the disk is full")
    ap.add_argument("--after", type=int, default=5, help="new runs sent once there is room again")
    ap.add_argument("--full-wait", type=float, default=30.0, help="seconds to watch the accepted runs while full")
    ap.add_argument("--minutes", type=float, default=3.0, help="for the resend and for the runs to settle")
    ap.add_argument("--log", default="/tmp/maslens-serve-disk-full.log")
    a = ap.parse_args()
    mounted = a.dir is None
    d = mount(a.size_mib) if mounted else a.dir
    proc = None
    try:
        total = os.statvfs(d).f_blocks * os.statvfs(d).f_frsize
        filler = os.path.join(d, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (total * a.filler_percent // 100))
        db = os.path.join(d, "store.db")
        proc, url = start(a.bin, db, a.log)
        n, refused, acked, codes, healthy = fill(url, a.pad, 1, a.give_up)
        print(f"disk full after {n - 1 - len(refused)} runs accepted, {len(refused)} refused; codes while full: "
              f"{dict(codes)}; /health answered while full: {healthy}")
        accepted_runs = len({t for t, _ in acked})
        before = count_done(settle(url, accepted_runs, a.full_wait / 60))
        print(f"while full: {before} of the {accepted_runs} accepted runs complete and diagnosed")
        os.remove(filler)
        freed = time.time()
        taken, first = resend(url, refused[:1], a.minutes)
        back = None
        while taken and time.time() - freed < a.minutes * 60:
            if count_done(settle(url, 0, 0)) > before:
                back = time.time() - freed
                break
            time.sleep(0.1)
        more_taken, _ = resend(url, refused[1:], a.minutes)
        taken += more_taken
        print(f"space freed: the first refused run taken again after {'-' if first is None else f'{first:.2f}'} s, "
              f"assembled and diagnosed after {'-' if back is None else f'{back:.2f}'} s; "
              f"{taken}/{len(refused)} refused runs taken on resend")
        more = [run_body(n + i, a.pad) for i in range(a.after)]
        after_codes = Counter(post(url, b) for b, _ in more)
        print(f"{a.after} new runs after: {dict(after_codes)}")
        for b, keys in more:
            acked.update(keys)
        for b in refused[:taken]:
            acked.update((s["traceId"], s["spanId"]) for rs in json.loads(b)["resourceSpans"]
                         for ss in rs["scopeSpans"] for s in ss["spans"])
        runs_expected = len({t for t, _ in acked})
        listed = settle(url, runs_expected, a.minutes)
        st = os.statvfs(d)
        print(f"free space at the end: {st.f_bavail * st.f_frsize // 1024} KiB of {total // 1024} KiB")
        done = count_done(listed)
        failed = [r for r in listed if r.get("error")]
        proc.terminate()
        proc.wait(timeout=30)
        proc = None
        con = sqlite3.connect(db)
        stored = set(con.execute("SELECT otel_trace_id, span_id FROM spans").fetchall())
        con.close()
        lost = acked - stored
        print(f"runs: {runs_expected} expected, {done} complete and diagnosed, {len(failed)} with an error; "
              f"acknowledged spans: {len(acked)}, lost: {len(lost)}")
        problems = []
        if not refused:
            problems.append("the disk never filled: lower --size-mib or raise --pad")
        if not healthy:
            problems.append("/health did not answer while the disk was full")
        if set(codes) - {503, 429}:
            problems.append(f"refusals that are not retryable: {dict(codes)}")
        if taken < len(refused) or set(after_codes) != {200}:
            problems.append("requests refused after the space came back")
        if back is None or back > 5:
            problems.append(f"ingest and assembly not back within 5 s of freeing space ({back})")
        if lost:
            problems.append(f"{len(lost)} acknowledged spans lost, e.g. {sorted(lost)[:3]}")
        if done < runs_expected:
            problems.append(f"{runs_expected - done} runs not complete and diagnosed: {[r.get('error') for r in failed][:3]}")
        for p in problems:
            print(f"FAIL: {p}", file=sys.stderr)
        return 1 if problems else 0
    finally:
        if proc is not None:
            proc.kill()
        if mounted:
            subprocess.run(["umount", d], check=False)
            os.rmdir(d)


if __name__ == "__main__":
    sys.exit(main())
