#!/usr/bin/env python3
"""Peak memory of `maslens serve` per MiB of OTLP/HTTP body (issue 35: "memory proportional to the body,
at most 4x").

Starts `maslens serve --diagnose off` on a temporary SQLite store and sends --bodies protobuf bodies of
about --mib MiB at once (each its own run), of two shapes, each to a fresh server:

- baseline: content-heavy spans (a few attributes, each a long string: what model calls look like);
- dense: attribute-dense spans (many short attributes per span: what the red-team used).

For each it prints the server's peak RSS growth divided by the body's size, twice: while the bodies are
received and stored (VmRSS sampled every 5 ms until the last answer: the issue's "at most 4x"), and
including the assembly of the run afterwards (VmHWM 3 s later: that memory follows the run's size, not
the request's); then the dense / baseline ratio of the first. Needs a venv with opentelemetry-proto (scripts/pyenv.sh).

With --check, exits 1 when a ratio is over its bound: --max-ingest (the issue's 4x) for receiving and
storing, --max-assembly-dense and --max-assembly for the run's assembly (dense spans carry attributes
assembly does not read, which the store does not read back for it; the baseline's content is all read:
its trace, the trace's JSON and the SQLite driver's copies of that JSON are alive together).

usage: bench/serve_body_rss.py [--maslens target/debug/maslens] [--mib 8] [--bodies 3] [--check]
"""

import argparse
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.request

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span


def kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def body(mib: float, dense: bool, seed: int) -> bytes:
    """A request of about `mib` MiB: one run, spans under one root."""
    target = int(mib * (1 << 20))
    trace_id = seed.to_bytes(16, "big")
    spans, size, i = [], 0, 0
    while size < target:
        if dense:
            attrs = [kv(f"k{j}", f"v{j}") for j in range(40)]
        else:
            attrs = [kv("gen_ai.agent.name", "Planner"), kv("gen_ai.operation.name", "chat"),
                     kv("gen_ai.output.messages", "word " * 400)]
        s = Span(trace_id=trace_id, span_id=(i + 1).to_bytes(8, "big"), name="chat m",
                 parent_span_id=b"" if i == 0 else (1).to_bytes(8, "big"), kind=3,
                 start_time_unix_nano=1_700_000_000_000_000_000 + i, end_time_unix_nano=1_700_000_000_000_000_001 + i,
                 attributes=attrs)
        spans.append(s)
        size += s.ByteSize()
        i += 1
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=None, scope_spans=[ScopeSpans(spans=spans)])])
    return req.SerializeToString()


def status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def start(maslens: str, tmp: str) -> tuple[subprocess.Popen, str]:
    out = os.path.join(tmp, "serve.out")
    env = {**os.environ, "MASLENS_HOME": os.path.join(tmp, "home")}
    env.pop("MASLENS_DB", None)
    p = subprocess.Popen([maslens, "serve", "--port", "0", "--db", os.path.join(tmp, "m.db"),
                          "--diagnose", "off", "--settle", os.environ.get("SETTLE", "1")],
                         stdout=open(out, "w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        m = re.search(r"http://[0-9.]+:\d+", open(out).read())
        if m:
            return p, m.group(0)
        if p.poll() is not None:
            raise RuntimeError(open(out).read())
        time.sleep(0.05)
    raise RuntimeError("no URL within 60 s")


def measure(maslens: str, bodies: list[bytes]) -> tuple[float, float]:
    """Peak RSS growth while the bodies are received and stored, and including the assembly of
    the runs after them, each in MiB per MiB of all the bodies."""
    with tempfile.TemporaryDirectory() as tmp:
        p, base = start(maslens, tmp)
        try:
            time.sleep(1.0)
            before = status_kb(p.pid, "VmRSS")
            peak = [before]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], status_kb(p.pid, "VmRSS"))
                    time.sleep(0.005)

            sampler = threading.Thread(target=sample)
            sampler.start()
            def send(b: bytes) -> None:
                req = urllib.request.Request(base + "/v1/traces", data=b, method="POST",
                                             headers={"Content-Type": "application/x-protobuf"})
                with urllib.request.urlopen(req, timeout=300) as r:
                    assert r.status == 200, r.status

            # All at once, as the red-team sent them (three concurrent 11 MiB bodies: 22x).
            senders = [threading.Thread(target=send, args=(b,)) for b in bodies]
            for t in senders:
                t.start()
            for t in senders:
                t.join()
            done.set()
            sampler.join()
            time.sleep(3.0)  # the run's assembly after the last body
            with_assembly = status_kb(p.pid, "VmHWM")
        finally:
            p.terminate()
            p.wait(timeout=30)
    mib = sum(len(b) for b in bodies) / (1 << 20)
    return (peak[0] - before) / 1024 / mib, (with_assembly - before) / 1024 / mib


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--maslens", default="target/debug/maslens")
    ap.add_argument("--mib", type=float, default=8.0)
    ap.add_argument("--bodies", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="exit 1 when a ratio is over its bound")
    ap.add_argument("--max-ingest", type=float, default=4.0)
    ap.add_argument("--max-assembly-dense", type=float, default=6.0)
    ap.add_argument("--max-assembly", type=float, default=12.0)
    a = ap.parse_args()
    results = {}
    for shape in ("baseline", "dense"):
        bodies = [body(a.mib, shape == "dense", seed + 1) for seed in range(a.bodies)]
        results[shape] = measure(a.maslens, bodies)
        ingest, assembled = results[shape]
        print(f"{shape:<9} {len(bodies)} bodies of {len(bodies[0]) / (1 << 20):.1f} MiB: peak RSS growth "
              f"{ingest:.1f}x the body while receiving and storing, {assembled:.1f}x with the run's assembly",
              flush=True)
    print(f"dense / baseline while receiving and storing: {results['dense'][0] / results['baseline'][0]:.2f}")
    if a.check:
        bounds = {"baseline": a.max_assembly, "dense": a.max_assembly_dense}
        over = [f"{shape} {what} {ratio:.1f}x > {bound:.1f}x"
                for shape, (ingest, assembled) in results.items()
                for what, ratio, bound in (("ingest", ingest, a.max_ingest),
                                           ("assembly", assembled, bounds[shape]))
                if ratio > bound]
        print("check: " + ("; ".join(over) if over else "PASS"), flush=True)
        if over:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
