#!/usr/bin/env python3
"""Server CPU for one run sent in many batches (issue 35 F18): assembly re-reads a run's every span,
so assembling a growing run on every batch costs time quadratic in its size. `maslens serve
--assembly-pace F` waits F times a run's last assembly time before assembling it again.

One script, two servers, the same bodies: the baseline is `--assembly-pace 0` (assemble on every
pass, the behaviour before pacing), then the default pace (4). For each: `serve --port 0 --db
TMP/N.db --diagnose off --settle 1`, BATCHES OTLP/JSON requests of SPANS chat spans each, all of one
trace (one run), GAP seconds apart, from one keep-alive client; then wait until the run's stored
trace holds every span (`runs.n_spans`, read from the SQLite file). Prints, per server: the server's
CPU seconds (utime + stime from /proc) from the first request until then, and the seconds from the
last request until the trace was up to date (the lag pacing adds); then the CPU ratio baseline/paced.

usage: bench/serve_growing_run.py [--batches 40] [--spans 250] [--gap 0.25] [--bin target/debug/maslens]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

TRACE = "6c1a0e2b9d8f4a3b8e7d6c5b4a392817"


def body(batch: int, spans: int) -> bytes:
    out = []
    for i in range(spans):
        n = batch * spans + i
        msg = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": f"turn {n}: the figure is {n * 7 % 1000}"}]}])
        attrs = [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.agent.name", "value": {"stringValue": ["Planner", "Coder", "Critic"][n % 3]}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": msg}},
        ]
        start = 1_767_225_600_000_000_000 + n * 1_000_000
        out.append({"traceId": TRACE, "spanId": f"{n + 1:016x}", "name": "chat gpt-4o-mini",
                    "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 900_000), "attributes": attrs})
    req = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "growing"}}]},
                              "scopeSpans": [{"spans": out}]}]}
    return json.dumps(req).encode()


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spans_stored(db: str) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute("SELECT MAX(n_spans) FROM runs WHERE ingest_seq = assembled_seq").fetchone()
        finally:
            con.close()
        return int(row[0] or 0)
    except sqlite3.Error:
        return 0


def one(binary: str, pace: str, bodies: list[bytes], total: int, gap: float, tmp: str) -> tuple[float, float]:
    db = os.path.join(tmp, f"pace-{pace}.db")
    server = subprocess.Popen(
        [binary, "serve", "--port", "0", "--db", db, "--diagnose", "off", "--settle", "1", "--assembly-pace", pace],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+)", line)
        if not m:
            raise SystemExit(f"serve did not say where it listens: {line!r}")
        conn = http.client.HTTPConnection(m.group(1), int(m.group(2)), timeout=120)
        cpu0 = cpu_seconds(server.pid)
        for b in bodies:
            conn.request("POST", "/v1/traces", body=b, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit(f"POST /v1/traces: {r.status}")
            time.sleep(gap)
        last = time.monotonic() - gap
        while spans_stored(db) < total:
            if time.monotonic() - last > 600:
                raise SystemExit("the run was not assembled within 600 s")
            time.sleep(0.05)
        lag = time.monotonic() - last
        return cpu_seconds(server.pid) - cpu0, lag
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--spans", type=int, default=250)
    ap.add_argument("--gap", type=float, default=0.25)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "target", "debug", "maslens"))
    a = ap.parse_args()
    bodies = [body(i, a.spans) for i in range(a.batches)]
    total = a.batches * a.spans
    print(f"one run of {total} chat spans in {a.batches} OTLP/JSON requests, {a.gap} s apart; {a.bin}; "
          f"load {open('/proc/loadavg').read().split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        base_cpu, base_lag = one(a.bin, "0", bodies, total, a.gap, tmp)
        print(f"baseline (--assembly-pace 0): server CPU {base_cpu:.1f} s, trace up to date {base_lag:.2f} s after the last request")
        cpu, lag = one(a.bin, "4", bodies, total, a.gap, tmp)
        print(f"paced (--assembly-pace 4):    server CPU {cpu:.1f} s, trace up to date {lag:.2f} s after the last request")
    print(f"CPU ratio baseline/paced: {base_cpu / max(cpu, 1e-3):.1f}x")


if __name__ == "__main__":
    sys.exit(main())
