#!/usr/bin/env python3
"""OTLP/HTTP ingest benchmark: `maslens serve` against Arize Phoenix, the same protobuf bytes to both.

Run through bench/serve_ingest.sh (it finds the venv and the binary and cleans up every process). Steps:

1. Generate (seed 7) REQUESTS = spans / 1000 `ExportTraceServiceRequest`s of exactly 1,000 spans each:
   multi-agent runs in the GenAI conventions shaped like tests/otel/genai_run.py (`invoke_workflow` root,
   `invoke_agent <name>` turns, `chat <model>` spans with `gen_ai.input.messages` / `gen_ai.output.messages`
   of 300-800 bytes each, `execute_tool <tool>` spans), 8-15 spans a run (mean ~13), one trace id and one
   conversation id per run; plus one run of exactly 130 chat steps in its own request for the query test.
   Every request is serialized once; the same bytes go to every receiver.
2. Client ceiling: the same requests to a discard server (another process that reads and answers 200).
3. maslens: `serve --port 0 --db TMP/m.db --diagnose off --settle 1`; the requests one after another from
   one keep-alive client (http.client); per-request latency; spans/s = spans / (first send -> `SELECT
   COUNT(*) FROM spans` equals the spans sent); VmHWM. Then the 130-step run: wait until complete with a
   diagnosis (the prior), then 200 timed GET /api/runs/{id}.
4. Phoenix: `phoenix serve`, the same requests the same way (a 503 "at capacity" is retried after 0.1 s,
   counted), spans/s = spans / (first send -> its SQLite `spans` table holds them all).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing
import os
import random
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.parse
import uuid
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

SPANS_PER_REQUEST = 1000
QUERY_CHATS = 130
MODEL = "gpt-4o-mini"
BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z: fixed, so the bytes are deterministic
GAP_NS = 5_000_000
CHAT_NS = 1_200_000_000
TOOL_NS = 400_000_000

AGENTS = {
    "Planner": "Breaks the task down, delegates, and gives the final answer.",
    "WebSurfer": "Searches the web and reports facts with sources.",
    "Coder": "Writes and runs Python to compute results.",
    "Critic": "Checks the other agents' claims and asks for corrections.",
    "Retriever": "Looks documents up in the internal knowledge base.",
    "Writer": "Drafts the final report from the collected facts.",
}
WORKERS = [a for a in AGENTS if a != "Planner"]
TOOLS = {
    "WebSurfer": ("web_search", "Search the web and return the top results."),
    "Coder": ("run_python", "Run Python code and return stdout."),
    "Retriever": ("kb_lookup", "Look a query up in the knowledge base."),
    "Critic": ("fact_check", "Check a claim against trusted sources."),
    "Writer": ("save_draft", "Save a draft of the report."),
}
WORDS = (
    "the mission landing date source orbit crew module lunar surface report result value compute days between "
    "first second check verify claim search query page archive table record launch splashdown NASA Apollo "
    "program timeline summary answer step plan delegate agent tool output input error retry confirm number "
    "python datetime difference interval calendar official document reference according to found that was "
    "on in at by with from for of and or not but then next finally because therefore however also again"
).split()


def _fmt_ms(s: float) -> str:
    return f"{s * 1000:.1f}"


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, math.ceil(p / 100 * len(v)) - 1))
    return v[k]


# ---------------------------------------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------------------------------------
class Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        # A pool of sentences; message texts are made of a few of them plus a unique tail.
        self.sentences = []
        for _ in range(2048):
            n = self.rng.randint(6, 22)
            s = " ".join(self.rng.choice(WORDS) for _ in range(n))
            self.sentences.append(s[0].upper() + s[1:] + ".")
        self.span_ids: set[bytes] = set()
        self.seq = 0

    def text(self, lo: int, hi: int) -> str:
        target = self.rng.randint(lo, hi)
        parts: list[str] = []
        size = 0
        while size < target:
            s = self.rng.choice(self.sentences)
            parts.append(s)
            size += len(s) + 1
        return " ".join(parts)[:target]

    def span_id(self) -> bytes:
        while True:
            b = self.rng.getrandbits(64).to_bytes(8, "big")
            if b != bytes(8) and b not in self.span_ids:
                self.span_ids.add(b)
                return b

    def trace_id(self) -> bytes:
        return self.rng.getrandbits(128).to_bytes(16, "big")

    def conv_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _set_attrs(span: Span, attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        kv = span.attributes.add()
        kv.key = k
        if isinstance(v, bool):
            kv.value.bool_value = v
        elif isinstance(v, int):
            kv.value.int_value = v
        elif isinstance(v, float):
            kv.value.double_value = v
        elif isinstance(v, list):
            for x in v:
                kv.value.array_value.values.add().string_value = x
        else:
            kv.value.string_value = v


def _msg(role: str, content: str, name: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": content}]}
    if name:
        m["name"] = name
    return m


def _json_in_range(make, lo: int, hi: int) -> str:
    """make(budget) -> object; shrink the free text until the JSON fits [lo, hi] bytes."""
    budget = hi
    for _ in range(8):
        s = json.dumps(make(budget))
        if len(s) <= hi:
            return s
        budget -= len(s) - hi + 8
    return s


class RunBuilder:
    """Appends the spans of one run to a ScopeSpans, with a clock that only moves forward."""

    def __init__(self, g: Gen, scope_spans: Any, conv: str, run_no: int) -> None:
        self.g = g
        self.ss = scope_spans
        self.conv = conv
        self.trace_id = g.trace_id()
        self.now = BASE_NS + run_no * 3_600_000_000_000
        self.count = 0
        self.chats = 0
        self.resp = 0
        self.task = "Task " + str(run_no) + ": " + g.text(80, 160)
        self.last_output = self.task

    def _span(self, name: str, parent: bytes | None, kind: int, attrs: dict[str, Any]) -> Span:
        s = self.ss.spans.add()
        s.trace_id = self.trace_id
        s.span_id = self.g.span_id()
        if parent:
            s.parent_span_id = parent
        s.name = name
        s.kind = kind
        self.now += GAP_NS
        s.start_time_unix_nano = self.now
        _set_attrs(s, attrs)
        self.count += 1
        return s

    def _end(self, s: Span, dur: int = 0) -> None:
        self.now += dur + GAP_NS
        s.end_time_unix_nano = self.now

    def root(self) -> Span:
        return self._span("invoke_workflow research_task", None, Span.SPAN_KIND_INTERNAL, {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": "research_task",
            "gen_ai.conversation.id": self.conv,
            "gen_ai.input.messages": json.dumps([_msg("user", self.task)]),
        })

    def finish_root(self, root: Span, final: str) -> None:
        _set_attrs(root, {"gen_ai.output.messages": json.dumps([{**_msg("assistant", final), "finish_reason": "stop"}])})
        root.status.code = Status.STATUS_CODE_OK
        self._end(root)

    def turn(self, root: Span, agent: str, children: list[str], final: bool = False) -> None:
        """children: 'chat', 'tool_chat' (a chat asking for a tool) and 'tool'."""
        a = self._span(f"invoke_agent {agent}", root.span_id, Span.SPAN_KIND_INTERNAL, {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL,
            "gen_ai.agent.name": agent,
            "gen_ai.agent.id": "agent_" + agent.lower(),
            "gen_ai.agent.description": AGENTS[agent],
            "gen_ai.conversation.id": self.conv,
        })
        call_id = None
        for i, c in enumerate(children):
            if c == "tool":
                self.tool(a, agent, call_id or f"call_{self.g.rng.getrandbits(40):010x}")
            else:
                last = final and i == len(children) - 1
                call_id = self.chat(a, agent, wants_tool=(c == "tool_chat"), final=last)
        self._end(a)

    def chat(self, parent: Span, agent: str, wants_tool: bool, final: bool) -> str | None:
        g = self.g
        self.resp += 1
        self.chats += 1
        prev = self.last_output

        def make_in(budget: int) -> list[dict[str, Any]]:
            head = [_msg("user", self.task[: max(40, budget // 3)])]
            return head + [_msg("assistant", prev[: max(40, budget - len(json.dumps(head)) - 60)], name="previous")]

        inp = _json_in_range(make_in, 300, 800)
        if len(inp) < 300:  # a short history: add the earlier context the agent was given
            short = 300 - len(inp)
            ctx = _msg("user", "Context: " + g.text(short + 10, short + 250))
            inp = json.dumps([ctx] + json.loads(inp))
        call_id = None
        if wants_tool:
            tool = TOOLS.get(agent, ("web_search", ""))[0]
            call_id = f"call_{g.rng.getrandbits(40):010x}"
            arg = g.text(180, 600)
            out_obj = {"role": "assistant", "parts": [
                {"type": "text", "content": f"I will use {tool}."},
                {"type": "tool_call", "id": call_id, "name": tool, "arguments": {"query": arg}},
            ], "finish_reason": "tool_calls"}
            finish = "tool_calls"
            self.last_output = arg
        else:
            body = ("FINAL ANSWER: " if final else "") + g.text(230, 680)
            out_obj = {**_msg("assistant", body), "finish_reason": "stop"}
            finish = "stop"
            self.last_output = body
        out = json.dumps([out_obj])
        s = self._span(f"chat {MODEL}", parent.span_id, Span.SPAN_KIND_CLIENT, {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL,
            "gen_ai.request.max_tokens": 512,
            "gen_ai.request.temperature": 0.0,
            "gen_ai.response.model": MODEL + "-2024-07-18",
            "gen_ai.response.id": f"chatcmpl-{self.conv[:8]}-{self.resp}",
            "gen_ai.response.finish_reasons": [finish],
            "gen_ai.conversation.id": self.conv,
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": f"You are {agent}. {AGENTS[agent]}"}]),
            "gen_ai.input.messages": inp,
            "gen_ai.output.messages": out,
            "gen_ai.usage.input_tokens": len(inp) // 4,
            "gen_ai.usage.output_tokens": len(out) // 4,
            "server.address": "api.openai.com",
            "server.port": 443,
        })
        self._end(s, CHAT_NS)
        return call_id

    def tool(self, parent: Span, agent: str, call_id: str) -> None:
        name, desc = TOOLS.get(agent, ("web_search", "Search the web and return the top results."))
        result = self.g.text(150, 500)
        s = self._span(f"execute_tool {name}", parent.span_id, Span.SPAN_KIND_INTERNAL, {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": desc,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps({"query": self.last_output[:120]}),
            "gen_ai.tool.call.result": result,
            "gen_ai.conversation.id": self.conv,
        })
        self._end(s, TOOL_NS)
        self.last_output = result


def _middle_turns(m: int) -> list[int]:
    """Split m spans of worker turns into turns of 2-4 spans (invoke_agent + 1-3 children)."""
    out = []
    while m > 0:
        if m in (2, 3, 4):
            out.append(m)
            m = 0
        elif m == 5:
            out += [3, 2]
            m = 0
        else:
            out.append(4)
            m -= 4
    return out


CHILDREN = {2: ["chat"], 3: ["tool_chat", "tool"], 4: ["tool_chat", "tool", "chat"]}


def build_run(g: Gen, ss: Any, n: int, run_no: int) -> int:
    """One run of exactly n >= 7 spans: root, Planner turn, worker turns, final Planner turn."""
    rb = RunBuilder(g, ss, g.conv_id(), run_no)
    root = rb.root()
    rb.turn(root, "Planner", ["chat"])
    roster = g.rng.sample(WORKERS, g.rng.randint(2, 3))
    for i, size in enumerate(_middle_turns(n - 5)):
        rb.turn(root, roster[i % len(roster)], CHILDREN[size])
    rb.turn(root, "Planner", ["chat"], final=True)
    rb.finish_root(root, rb.last_output)
    assert rb.count == n, (rb.count, n)
    return n


def new_request(service: str) -> tuple[ExportTraceServiceRequest, Any]:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for k, v in (("service.name", service), ("telemetry.sdk.language", "python"),
                 ("telemetry.sdk.name", "opentelemetry"), ("telemetry.sdk.version", "1.45.1")):
        kv = rs.resource.attributes.add()
        kv.key = k
        kv.value.string_value = v
    ss = rs.scope_spans.add()
    ss.scope.name = "maslens.bench.serve_ingest"
    ss.scope.version = "0.1.0"
    return req, ss


def generate(n_requests: int, seed: int) -> tuple[list[bytes], bytes, str, dict[str, Any]]:
    g = Gen(seed)
    bodies = []
    runs = 0
    sizes = []
    run_no = 0
    for _ in range(n_requests):
        req, ss = new_request("bench-mas")
        remaining = SPANS_PER_REQUEST
        while remaining:
            n = g.rng.choice([11, 12, 13, 13, 13, 13, 14, 15])
            if remaining <= 15:
                n = remaining
            elif remaining <= 22:
                n = remaining // 2  # 8..11, leaving 8..11
            build_run(g, ss, n, run_no)
            run_no += 1
            sizes.append(n)
            remaining -= n
        assert len(ss.spans) == SPANS_PER_REQUEST
        bodies.append(req.SerializeToString())
        runs += 1
    # The query run: 65 agent turns of 2 chat spans = 130 chat steps (no tools), its own request.
    req, ss = new_request("bench-mas")
    conv = f"bench-query-{QUERY_CHATS}-seed{seed}"
    rb = RunBuilder(g, ss, conv, run_no)
    root = rb.root()
    agents = ["Planner"] + WORKERS
    for t in range(QUERY_CHATS // 2):
        rb.turn(root, agents[t % len(agents)], ["chat", "chat"], final=(t == QUERY_CHATS // 2 - 1))
    rb.finish_root(root, rb.last_output)
    assert rb.chats == QUERY_CHATS
    query_body = req.SerializeToString()
    info = {
        "runs": len(sizes),
        "run_spans_mean": statistics.mean(sizes),
        "run_spans_min": min(sizes),
        "run_spans_max": max(sizes),
        "request_bytes_mean": statistics.mean(len(b) for b in bodies),
        "query_run_spans": rb.count,
        "query_run_bytes": len(query_body),
    }
    return bodies, query_body, conv, info


# ---------------------------------------------------------------------------------------------------------
# Sending
# ---------------------------------------------------------------------------------------------------------
def send_all(url: str, bodies: list[bytes], retry_503: bool = False, deadline: float | None = None) -> dict[str, Any]:
    """Sequential POSTs from one keep-alive http.client connection; per-request latency. With a deadline
    (perf_counter), stops sending (and retrying) once it has passed; `accepted` counts the requests sent."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    lat = []
    client_s = 0.0
    retries = 0
    accepted = 0
    t0 = time.perf_counter()
    for body in bodies:
        while deadline is None or time.perf_counter() < deadline:
            a = time.perf_counter()
            conn.request("POST", u.path, body=body, headers={"content-type": "application/x-protobuf"})
            b = time.perf_counter()
            r = conn.getresponse()
            data = r.read()
            c = time.perf_counter()
            client_s += b - a
            if r.status == 503 and retry_503:
                retries += 1
                time.sleep(0.1)
                continue
            if r.status != 200:
                raise RuntimeError(f"POST {url}: HTTP {r.status}: {data[:300]!r}")
            lat.append(c - a)
            accepted += 1
            break
        else:
            break
    t1 = time.perf_counter()
    conn.close()
    return {"t0": t0, "t_sent": t1, "lat": lat, "send_call_s": client_s, "retries_503": retries,
            "accepted": accepted}


def _discard_server(sock: socket.socket) -> None:
    sock.listen(4)
    resp = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
    buf = bytearray(1 << 22)
    while True:
        c, _ = sock.accept()
        pending = b""
        while True:
            while b"\r\n\r\n" not in pending:
                d = c.recv(65536)
                if not d:
                    break
                pending += d
            if b"\r\n\r\n" not in pending:
                break
            head, _, rest = pending.partition(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            need = int(m.group(1)) if m else 0
            got = len(rest)
            view = memoryview(buf)
            while got < need:
                k = c.recv_into(view, min(len(buf), need - got))
                if not k:
                    break
                got += k
            pending = rest[need:] if len(rest) > need else b""
            c.sendall(resp)
        c.close()


def client_ceiling(bodies: list[bytes], pidfile: str | None) -> dict[str, Any]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    p = multiprocessing.get_context("fork").Process(target=_discard_server, args=(sock,), daemon=True)
    p.start()
    sock.close()
    if pidfile:
        with open(pidfile, "a") as pf:
            pf.write(f"{p.pid}\n")
    try:
        r = send_all(f"http://127.0.0.1:{port}/v1/traces", bodies)
    finally:
        p.kill()
        p.join()
    return r


# ---------------------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------------------
class Procs:
    """Processes this script started; their pids also go to a file the shell's trap reads."""

    def __init__(self, pidfile: str | None) -> None:
        self.pidfile = pidfile
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], env: dict[str, str], out: str, err: str) -> subprocess.Popen:
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen(argv, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        if self.pidfile:
            with open(self.pidfile, "a") as pf:
                pf.write(f"{p.pid}\n")
        return p

    def stop(self, p: subprocess.Popen) -> None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self) -> None:
        for p in self.procs:
            self.stop(p)


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0])  # kB
    return out


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_rows(db: str, table: str) -> int | None:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("GET", u.path + (("?" + u.query) if u.query else ""))
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def top_procs() -> str:
    out = subprocess.run(["ps", "-eo", "pid,pcpu,rss,comm", "--sort=-pcpu"], capture_output=True, text=True).stdout
    return "\n".join("    " + line for line in out.splitlines()[:6])


# ---------------------------------------------------------------------------------------------------------
# The two receivers
# ---------------------------------------------------------------------------------------------------------
def bench_maslens(args, procs: Procs, bodies: list[bytes], query_body: bytes, conv: str, spans: int) -> dict[str, Any]:
    tmp = args.tmp
    db = os.path.join(tmp, "m.db")
    home = os.path.join(tmp, "maslens-home")
    os.makedirs(home, exist_ok=True)
    env = {**os.environ, "MASLENS_HOME": home}
    env.pop("MASLENS_DB", None)
    out_path = os.path.join(tmp, "maslens.out")
    p = procs.start([args.maslens, "serve", "--port", "0", "--db", db, "--diagnose", "off", "--settle", "1"],
                    env, out_path, os.path.join(tmp, "maslens.err"))
    deadline = time.time() + 60
    base = None
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"maslens exited with {p.returncode}: {open(out_path).read()[-2000:]}")
        text = open(out_path).read()
        m = re.search(r"http://[0-9.]+:\d+", text)
        if m:
            base = m.group(0)
            break
        time.sleep(0.05)
    if not base:
        raise RuntimeError("maslens printed no URL within 60 s")
    print(f"maslens: {base} (pid {p.pid})", flush=True)
    cpu0 = proc_cpu_s(p.pid)
    r = send_all(base + "/v1/traces", bodies)
    # All acknowledged; now until every span is queryable.
    while True:
        n = count_rows(db, "spans")
        if n is not None and n >= spans:
            break
        if time.perf_counter() - r["t0"] > args.timeout:
            break
        time.sleep(0.005)
    t_all = time.perf_counter()
    cpu_ingest = proc_cpu_s(p.pid) - cpu0
    stored = n or 0
    res = {
        "spans_sent": spans,
        "spans_stored": stored,
        "spans_lost": spans - stored,
        "send_s": r["t_sent"] - r["t0"],
        "all_queryable_s": t_all - r["t0"],
        "spans_per_s": stored / (t_all - r["t0"]),
        "lat_p50_ms": pct(r["lat"], 50) * 1000,
        "lat_p99_ms": pct(r["lat"], 99) * 1000,
        "lat_max_ms": max(r["lat"]) * 1000,
        "client_send_call_s": r["send_call_s"],
        "server_cpu_s_during_ingest": cpu_ingest,
    }
    res.update({f"after_ingest_{k}_kb": v for k, v in proc_status(p.pid).items()})
    print(f"maslens: {stored}/{spans} spans queryable after {res['all_queryable_s']:.2f} s "
          f"({res['spans_per_s']:.0f} spans/s), load {loadavg()}", flush=True)

    # The 130-step run.
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    tq = time.perf_counter()
    conn.request("POST", "/v1/traces", body=query_body, headers={"content-type": "application/x-protobuf"})
    rr = conn.getresponse()
    rr.read()
    if rr.status != 200:
        raise RuntimeError(f"query run: HTTP {rr.status}")
    path = "/api/runs/" + urllib.parse.quote(conv, safe="")
    state = None
    doc: dict[str, Any] = {}
    while time.perf_counter() - tq < args.timeout:
        conn.request("GET", path)
        g = conn.getresponse()
        body = g.read()
        if g.status == 200:
            doc = json.loads(body)
            state = doc["run"]["state"]
            if state == "complete" and doc.get("diagnoses"):
                break
        time.sleep(0.05)
    t_ready = time.perf_counter() - tq
    if not (state == "complete" and doc.get("diagnoses")):
        raise RuntimeError(f"query run not complete with a diagnosis after {args.timeout} s (state {state})")
    runs_by_state = {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        runs_by_state = dict(con.execute("SELECT state, COUNT(*) FROM runs GROUP BY state").fetchall())
        diagnosed = con.execute("SELECT COUNT(DISTINCT run_id) FROM diagnoses").fetchone()[0]
        con.close()
    except sqlite3.Error as e:
        diagnosed = f"error: {e}"
    glat = []
    size = 0
    for _ in range(args.gets):
        a = time.perf_counter()
        conn.request("GET", path)
        g = conn.getresponse()
        body = g.read()
        glat.append(time.perf_counter() - a)
        if g.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {g.status}")
        size = len(body)
    conn.close()
    res["query"] = {
        "run_id": conv,
        "n_steps": doc["run"]["n_steps"],
        "n_spans": doc["run"]["n_spans"],
        "agents": doc["run"]["agents"],
        "diagnoses": [d.get("method") for d in doc["diagnoses"]],
        "ready_after_s": t_ready,
        "gets": args.gets,
        "response_bytes": size,
        "p50_ms": pct(glat, 50) * 1000,
        "p99_ms": pct(glat, 99) * 1000,
        "max_ms": max(glat) * 1000,
    }
    res["runs_by_state_at_query"] = runs_by_state
    res["runs_diagnosed_at_query"] = diagnosed
    st = proc_status(p.pid)
    res["vmhwm_kb"] = st["VmHWM"]
    res["vmrss_kb"] = st["VmRSS"]
    res["server_cpu_s_total"] = proc_cpu_s(p.pid)
    procs.stop(p)
    return res


def phoenix_spans_table(db: str) -> str | None:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        cands = []
        for t in tables:
            cols = {r[1] for r in con.execute(f"PRAGMA table_info({t})")}
            if "span_id" in cols and "trace_rowid" in cols and "parent_id" in cols:
                cands.append(t)
        con.close()
    except sqlite3.Error:
        return None
    if "spans" in cands:
        return "spans"
    return cands[0] if cands else None


def bench_phoenix(args, procs: Procs, bodies: list[bytes], spans: int) -> dict[str, Any]:
    wd = os.path.join(args.tmp, "phx")
    os.makedirs(wd, exist_ok=True)
    port, grpc = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": wd, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc)}
    for k in list(env):
        if k.startswith("PHOENIX_SQL") or k.startswith("OTEL_"):
            env.pop(k)
    t_start = time.perf_counter()
    p = procs.start([args.phoenix, "serve"], env, os.path.join(args.tmp, "phoenix.log"),
                    os.path.join(args.tmp, "phoenix.err"))
    base = f"http://127.0.0.1:{port}"
    while True:
        if p.poll() is not None:
            raise RuntimeError(f"phoenix exited with {p.returncode}; see {args.tmp}/phoenix.log")
        try:
            st, _ = http_get(base + "/healthz", 2)
            if st == 200:
                break
        except OSError:
            pass
        if time.perf_counter() - t_start > 180:
            raise RuntimeError("phoenix: /healthz not 200 within 180 s")
        time.sleep(0.25)
    startup = time.perf_counter() - t_start
    db = os.path.join(wd, "phoenix.db")
    table = phoenix_spans_table(db)
    print(f"phoenix: {base} (pid {p.pid}) healthy after {startup:.1f} s; spans table: {table}, load {loadavg()}",
          flush=True)
    if table is None:
        raise RuntimeError(f"phoenix: no spans table in {db}")
    cpu0 = proc_cpu_s(p.pid)
    r = send_all(base + "/v1/traces", bodies, retry_503=True, deadline=time.perf_counter() + args.phoenix_timeout)
    print(f"phoenix: {r['accepted']}/{len(bodies)} requests accepted after {r['t_sent'] - r['t0']:.1f} s "
          f"({r['retries_503']} x 503 retried); waiting for its database", flush=True)
    n = 0
    last_print = time.perf_counter()
    timed_out = False
    while True:
        c = count_rows(db, table)
        if c is not None:
            n = c
        if n >= spans:
            break
        now = time.perf_counter()
        if now - r["t0"] > args.phoenix_timeout:
            timed_out = True
            break
        if now - last_print > 30:
            print(f"phoenix: {n}/{spans} spans stored after {now - r['t0']:.0f} s", flush=True)
            last_print = now
        time.sleep(0.2)
    t_all = time.perf_counter()
    res = {
        "startup_s": startup,
        "spans_sent": spans,
        "spans_stored": n,
        "requests_accepted": r["accepted"],
        "timed_out": timed_out,
        "send_s": r["t_sent"] - r["t0"],
        "all_queryable_s": t_all - r["t0"],
        "spans_per_s": n / (t_all - r["t0"]),
        "lat_p50_ms": pct(r["lat"], 50) * 1000,
        "lat_p99_ms": pct(r["lat"], 99) * 1000,
        "lat_max_ms": max(r["lat"]) * 1000,
        "retries_503": r["retries_503"],
        "server_cpu_s_during_ingest": proc_cpu_s(p.pid) - cpu0,
    }
    st = proc_status(p.pid)
    res["vmhwm_kb"] = st["VmHWM"]
    res["vmrss_kb"] = st["VmRSS"]
    procs.stop(p)
    return res


# ---------------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--maslens", required=True, help="the maslens binary")
    ap.add_argument("--build", default="unknown", help="how the binary was built (printed)")
    ap.add_argument("--phoenix", help="the phoenix executable (omit with --skip-phoenix)")
    ap.add_argument("--skip-phoenix", action="store_true")
    ap.add_argument("--spans", type=int, default=100_000, help="spans to send, a multiple of 1000")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--gets", type=int, default=200)
    ap.add_argument("--tmp", required=True, help="scratch directory (databases, logs)")
    ap.add_argument("--pidfile", help="append the pid of every started server here")
    ap.add_argument("--timeout", type=float, default=300, help="maslens waits (s)")
    ap.add_argument("--phoenix-timeout", type=float, default=420, help="wait for Phoenix's database (s)")
    ap.add_argument("--out", required=True, help="write the summary as JSON here")
    args = ap.parse_args()
    # SIGTERM (the shell's trap) unwinds through the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.spans <= 0 or args.spans % SPANS_PER_REQUEST:
        ap.error("--spans must be a positive multiple of 1000")
    n_req = args.spans // SPANS_PER_REQUEST

    machine = {
        "cpus": os.cpu_count(),
        "load_before": loadavg(),
        "top_before": top_procs(),
        "maslens_binary": args.maslens,
        "maslens_build": args.build,
    }
    print(f"machine: {machine['cpus']} CPUs, load average before: {machine['load_before']}; busiest processes:\n"
          f"{machine['top_before']}", flush=True)

    t = time.perf_counter()
    bodies, query_body, conv, info = generate(n_req, args.seed)
    info["generate_s"] = time.perf_counter() - t
    print(f"generated {n_req} requests x {SPANS_PER_REQUEST} spans = {args.spans} spans in {info['runs']} runs "
          f"({info['run_spans_min']}-{info['run_spans_max']} spans, mean {info['run_spans_mean']:.2f}), "
          f"{info['request_bytes_mean'] / 1e6:.2f} MB a request; query run {info['query_run_spans']} spans "
          f"({QUERY_CHATS} chat steps); {info['generate_s']:.1f} s", flush=True)

    procs = Procs(args.pidfile)
    summary: dict[str, Any] = {"generator": info, "machine": machine, "spans": args.spans, "requests": n_req}
    try:
        ceiling = client_ceiling(bodies, args.pidfile)
        summary["client_ceiling"] = {
            "send_s": ceiling["t_sent"] - ceiling["t0"],
            "spans_per_s": args.spans / (ceiling["t_sent"] - ceiling["t0"]),
            "lat_p50_ms": pct(ceiling["lat"], 50) * 1000,
            "lat_p99_ms": pct(ceiling["lat"], 99) * 1000,
        }
        print(f"client ceiling (same sender, discard server): {summary['client_ceiling']['spans_per_s']:.0f} spans/s",
              flush=True)
        summary["maslens"] = bench_maslens(args, procs, bodies, query_body, conv, args.spans)
        if not args.skip_phoenix:
            summary["phoenix"] = bench_phoenix(args, procs, bodies, args.spans)
    finally:
        procs.stop_all()
    machine["load_after"] = loadavg()

    m = summary["maslens"]
    q = m["query"]
    ph = summary.get("phoenix")
    ratio = m["spans_per_s"] / ph["spans_per_s"] if ph and ph["spans_per_s"] > 0 else None
    summary["ratio_maslens_over_phoenix"] = ratio

    print()
    print(f"== serve ingest: {args.spans} spans in {n_req} OTLP/HTTP protobuf requests of {SPANS_PER_REQUEST} spans, "
          f"one sequential keep-alive client (Python http.client), seed {args.seed}")
    print(f"   maslens binary: {args.maslens} ({args.build})")
    rows = [("maslens", m)] + ([("phoenix 20.26.1", ph)] if ph else [])
    print(f"{'receiver':<17}{'spans/s':>9}{'stored':>9}{'lost':>6}{'acked s':>9}{'stored s':>10}"
          f"{'p50 ms':>8}{'p99 ms':>8}{'VmHWM MB':>10}{'CPU s':>7}")
    for name, r in rows:
        print(f"{name:<17}{r['spans_per_s']:>9.0f}{r['spans_stored']:>9}{r['spans_sent'] - r['spans_stored']:>6}"
              f"{r['send_s']:>9.2f}{r['all_queryable_s']:>10.2f}{r['lat_p50_ms']:>8.1f}{r['lat_p99_ms']:>8.1f}"
              f"{r['vmhwm_kb'] / 1024:>10.1f}{r['server_cpu_s_during_ingest']:>7.1f}")
    c = summary["client_ceiling"]
    print(f"{'(client ceiling)':<17}{c['spans_per_s']:>9.0f}{'':>9}{'':>6}{c['send_s']:>9.2f}{'':>10}"
          f"{c['lat_p50_ms']:>8.1f}{c['lat_p99_ms']:>8.1f}   (same sender against a discard server)")
    print(f"maslens: of {m['send_s']:.2f} s sending, the client spent {m['client_send_call_s']:.2f} s writing requests "
          f"(the rest waiting for answers); the server used {m['server_cpu_s_during_ingest']:.1f} CPU s "
          f"({m['server_cpu_s_during_ingest'] / m['all_queryable_s']:.2f} cores) until all spans were queryable")
    if ph:
        if ph["timed_out"]:
            print(f"phoenix: TIMED OUT after {ph['all_queryable_s']:.0f} s (--phoenix-timeout) with "
                  f"{ph['spans_stored']}/{args.spans} spans stored ({ph['requests_accepted']}/{n_req} requests "
                  f"accepted); its spans/s is the rate up to then, 'lost' counts what had not arrived")
        print(f"phoenix: {ph['retries_503']} requests answered 503 (queue at capacity) and were retried after 0.1 s; "
              f"start-up {ph['startup_s']:.1f} s")
    print(f"maslens GET /api/runs/{{id}} of the {q['n_steps']}-step run ({q['n_spans']} spans, "
          f"{q['response_bytes']} bytes, diagnoses: {', '.join(q['diagnoses'])}): {q['gets']} GETs "
          f"p50 {q['p50_ms']:.2f} ms, p99 {q['p99_ms']:.2f} ms, max {q['max_ms']:.2f} ms "
          f"(target p99 < 50 ms: {'met' if q['p99_ms'] < 50 else 'NOT met'}); ready {q['ready_after_s']:.1f} s after its POST")
    print(f"maslens runs at query time: {m['runs_by_state_at_query']}, with a diagnosis: {m['runs_diagnosed_at_query']}; "
          f"VmHWM {m['vmhwm_kb'] / 1024:.1f} MB, VmRSS {m['vmrss_kb'] / 1024:.1f} MB at the end")
    if ratio is not None:
        print(f"ratio maslens / phoenix spans/s: {ratio:.1f}x (target >= 50x: {'met' if ratio >= 50 else 'NOT met'})")
    print(f"machine: {machine['cpus']} CPUs; load average before {machine['load_before']}, after {machine['load_after']}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"summary JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
