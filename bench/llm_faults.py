#!/usr/bin/env python3
"""LLM-fault figure of issue 16: `maslens eval locate` over N synthetic traces through a seeded
fault-injecting proxy in front of an OpenAI-compatible server (the scripted one of
bench/fixture_llm.py by default, or `--upstream URL`, e.g. `maslens serve-model`).

The proxy answers a share `--rate` (default 0.3) of the requests it receives with a fault, drawn
evenly from these kinds, and forwards the rest:
- `429`: Too Many Requests with `Retry-After: 1`;
- `500`, `502`, `503`: server errors with an OpenAI-shaped body;
- `timeout`: no answer until the client's `--request-timeout` has passed, then the connection closes;
- `truncated`: the upstream's answer with its full Content-Length, cut in the middle, connection closed;
- `malformed`: 200 with a body that is not JSON;
- `schema_text`: 200, a well-formed completion whose content is prose without JSON;
- `schema_type`: 200, content JSON of the wrong types (`{"agent": 5, "step": "three"}`);
- `schema_range`: 200, content that fits the schema but names a step the trace does not have (999).
Whether request number k of one identity (its messages) is faulted, and how, is a function of
(seed, identity, k): the same seed injects the same faults whatever the order requests arrive in.

Then every case of the report must end with a verdict (agent and step) or an explicit abstention
with its reason; the figures count both, group the abstention and error reasons, and list the
faults injected by kind.

Usage: llm_faults.py --bin PATH [--traces 100] [--rate 0.3] [--seed 16] [--upstream URL]
       [--request-timeout 2] [--work DIR]   (exit 1 when a case has neither)
"""
import argparse
import collections
import hashlib
import http.client
import http.server
import json
import os
import random
import re
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos_eval_locate import make_dataset  # noqa: E402
from fixture_llm import Fixture, completion, identity  # noqa: E402

KINDS = ["429", "500", "502", "503", "timeout", "truncated", "malformed",
         "schema_text", "schema_type", "schema_range"]


class Proxy:
    def __init__(self, upstream, rate, seed, hang_s):
        self.up = urllib.parse.urlparse(upstream)
        self.rate, self.seed, self.hang_s = rate, seed, hang_s
        self.lock = threading.Lock()
        self.attempts = collections.Counter()
        self.faults = collections.Counter()
        self.forwarded = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle(self):
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                kind = proxy.decide(identity(body.get("messages", [])))
                try:
                    proxy.serve(self, kind, raw, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def send(self, code, data, ctype="application/json", headers=(), length=None, close=False):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                for k, v in headers:
                    self.send_header(k, v)
                if close:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                if close:
                    self.close_connection = True

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}{self.up.path}"

    def decide(self, ident):
        with self.lock:
            k = self.attempts[ident]
            self.attempts[ident] += 1
        h = hashlib.sha256(f"{self.seed}:{ident}:{k}".encode()).digest()
        r = random.Random(h)
        if r.random() >= self.rate:
            return None
        return r.choice(KINDS)

    def upstream(self, path, raw):
        c = http.client.HTTPConnection(self.up.hostname, self.up.port, timeout=600)
        c.request("POST", path, raw, {"Content-Type": "application/json"})
        resp = c.getresponse()
        data = resp.read()
        c.close()
        return resp.status, data

    def serve(self, h, kind, raw, body):
        with self.lock:
            self.faults[kind or "none"] += 1
        err = lambda code, t: json.dumps({"error": {"message": f"injected {code}", "type": t}}).encode()
        if kind == "429":
            h.send(429, err(429, "rate_limit_error"), headers=[("Retry-After", "1")])
        elif kind in ("500", "502", "503"):
            h.send(int(kind), err(kind, "server_error"))
        elif kind == "timeout":
            time.sleep(self.hang_s)
            h.close_connection = True
        elif kind == "truncated":
            status, data = self.upstream(h.path, raw)
            h.send(status, data[: len(data) // 2], length=len(data), close=True)
        elif kind == "malformed":
            h.send(200, b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "ha', close=False)
        elif kind == "schema_text":
            h.send(200, json.dumps(completion(body, "I am not sure which step failed; it is hard to say.")).encode())
        elif kind == "schema_type":
            h.send(200, json.dumps(completion(body, '{"reason": 1, "agent": 5, "step": "three", "confidence": "high"}')).encode())
        elif kind == "schema_range":
            h.send(200, json.dumps(completion(body, json.dumps(
                {"reason": "Step 999 says the wrong thing", "agent": "Planner", "step": 999, "confidence": 0.9,
                 "decisive": True, "part": "first", "in_window": True, "summary": "s"}))).encode())
        else:
            status, data = self.upstream(h.path, raw)
            with self.lock:
                self.forwarded += 1
            h.send(status, data)

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--traces", type=int, default=100)
    ap.add_argument("--rate", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--upstream", help="base URL of an OpenAI-compatible server (default: the scripted one)")
    ap.add_argument("--request-timeout", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--work", default="bench/out/llm_faults")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "traces.jsonl")
    make_dataset(args.traces, args.seed, data)
    cache = os.path.join(args.work, "cache.sqlite")
    for p in (cache, cache + "-wal", cache + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    fixture = None
    upstream = args.upstream
    if not upstream:
        fixture = Fixture(delay_ms=10).start()
        upstream = fixture.base_url
    proxy = Proxy(upstream, args.rate, args.seed, args.request_timeout + 1).start()
    out = os.path.join(args.work, "out")
    env = dict(os.environ, MASLENS_HOME=os.path.join(args.work, "home"), NO_COLOR="1")
    env.pop("MASLENS_MODEL", None)
    cmd = [args.bin, "eval", "locate", data, "--model", f"openai:fixture@{proxy.base_url}",
           "--cache", cache, "--out", out, "-q", "--concurrency", str(args.concurrency),
           "--request-timeout", str(args.request_timeout), "--seed", "7"]
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    report = json.load(open(os.path.join(out, "report.json")))
    verdicts = [json.loads(l) for l in open(os.path.join(out, "verdicts.jsonl")) if l.strip()]
    by_id = {v.get("trace"): v for v in verdicts}
    verdict, abstained, neither = 0, collections.Counter(), []
    for case in report["per_case"]:
        v = by_id.get(case["id"], {})
        pred = case.get("pred") or {}
        if pred.get("step") is not None and pred.get("agent") and not pred.get("abstained"):
            verdict += 1
        elif v.get("abstain_reason"):
            reason = v["abstain_reason"]
            abstained[re.sub(r" \(steps [^)]*\)", "", reason.split(":")[0])[:80]] += 1
        else:
            neither.append(case["id"])
    errors = report.get("errors") or []
    errored = {e[0]: e[1] for e in errors}
    gave_up = collections.Counter()
    for cid in list(neither):
        if errored.get(cid):
            # A call that failed after every retry: the case is scored as an abstention and the
            # report's `errors` names it with the reason (verdicts.jsonl holds no verdict for it).
            neither.remove(cid)
            gave_up[errored[cid].split(" from ")[0].split(": ", 1)[-1][:80]] += 1
    injected = sum(n for k, n in proxy.faults.items() if k != "none")
    total = sum(proxy.faults.values())
    print(f"command: {' '.join(cmd)}")
    print(f"exit {r.returncode}, {wall:.1f} s; stderr tail: {r.stderr.strip()[-600:]}")
    print(f"proxy: {total} requests, {injected} faults injected ({injected / max(total, 1):.1%}), "
          f"{proxy.forwarded} forwarded")
    for k in KINDS:
        print(f"  {k:13s} {proxy.faults.get(k, 0)}")
    print(f"cases: {len(report['per_case'])}; verdicts {verdict}; abstentions with a reason "
          f"{sum(abstained.values())}; given up after retries, reason in report.errors "
          f"{sum(gave_up.values())}; neither {len(neither)}")
    for reason, n in abstained.most_common():
        print(f"  abstained ({n}): {reason}")
    for reason, n in gave_up.most_common():
        print(f"  gave up ({n}): {reason}")
    # Inside the verdicts: how each stage's answers ended (a judge or evaluator that abstained
    # while the vote still gave a verdict).
    stages = collections.Counter()
    for v in verdicts:
        for f in [v.get("judge")] + list(v.get("evaluators") or []):
            if f and f.get("finding", {}).get("abstain_reason"):
                stages[re.sub(r" \(steps [^)]*\)", "", f["finding"]["abstain_reason"].split(":")[0])[:60]] += 1
    for reason, n in stages.most_common():
        print(f"  one voter abstained ({n}): {reason}")
    if neither:
        print("cases with neither a verdict nor an abstention reason: " + ", ".join(neither[:20]))
    ok = not neither and len(report["per_case"]) == args.traces
    print("llm faults: " + ("PASS" if ok else "FAIL"))
    if fixture:
        fixture.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
