#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server for the fault benches (standard library
only). Answers are deterministic functions of the request: under a JSON schema
(`response_format.json_schema`) it writes a value of that schema built from the prompt (a step
that the prompt shows as `Step N | agent: A`, picked by a hash of the messages, a reason quoting
that step's words, a confidence from the hash); without one, a short text. The same request
always gets the same answer, whoever asks and however often.

It counts requests per identity (SHA-256 of the request's messages, the same identity
`identity_of_cached` computes from a maslens cache row), so a driver can tell a repeated call
from a new one.

Used as a library (`Fixture(...).start()`) by bench/chaos_eval_locate.py and
bench/llm_faults.py, or run alone: `python3 bench/fixture_llm.py --port 8099 [--delay-ms 20]`.
"""
import argparse
import hashlib
import http.server
import json
import re
import socketserver
import threading
import time

STEP_RE = re.compile(r"^Step (\d+) \| agent: ([^|\n]+?)(?: \| speaker: [^\n]*)?$", re.M)


def identity(messages):
    """The identity of a request: its messages (role, content), canonical JSON, SHA-256."""
    canon = [[m.get("role"), m.get("content")] for m in messages]
    return hashlib.sha256(json.dumps(canon, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def identity_of_cached(request_json):
    """The identity of a request stored in a maslens cache row (`calls.request`)."""
    req = json.loads(request_json)
    msgs = []
    for m in req.get("messages", []):
        role = m.get("role")
        if isinstance(role, str):
            role = role.lower()
        msgs.append({"role": role, "content": m.get("content")})
    return identity(msgs)


def steps_in(text):
    """(index, agent, content) of every `Step N | agent: A` block in a prompt."""
    out = []
    marks = list(STEP_RE.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end():end].strip()
        out.append((int(m.group(1)), m.group(2).strip(), body))
    return out


class Answerer:
    """Builds the deterministic answer to one request."""

    def __init__(self, body):
        self.body = body
        msgs = body.get("messages", [])
        self.ident = identity(msgs)
        self.h = int(self.ident[:16], 16)
        text = "\n".join(m.get("content") or "" for m in msgs if isinstance(m.get("content"), str))
        steps = steps_in(text)
        if steps:
            self.step = steps[self.h % len(steps)]
        else:
            self.step = (0, "agent", "")
        words = [w for w in re.findall(r"[A-Za-z]{4,}", self.step[2])][:6]
        quote = " ".join(words) if words else "nothing"
        self.reason = f"Step {self.step[0]} says '{quote}', which sends the run the wrong way."

    def value(self, schema, name="", depth=0):
        if depth > 12 or not isinstance(schema, dict):
            return None
        if "const" in schema:
            return schema["const"]
        if "enum" in schema and schema["enum"]:
            return schema["enum"][(self.h >> 8) % len(schema["enum"])]
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                return self.value(schema[key][0], name, depth + 1)
        t = schema.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), t[0] if t else None)
        if t == "object" or "properties" in schema:
            props = schema.get("properties", {})
            keys = list(schema.get("required", [])) + [k for k in props if k not in schema.get("required", [])]
            return {k: self.value(props.get(k, {}), k, depth + 1) for k in keys if k in props}
        if t == "array":
            n = min(1, schema.get("maxItems", 1))
            return [self.value(schema.get("items", {}), name, depth + 1) for _ in range(n)]
        if t == "integer":
            if "step" in name:
                return self.step[0]
            lo = schema.get("minimum", 0)
            hi = schema.get("maximum", lo + 3)
            return lo + (self.h >> 4) % (hi - lo + 1)
        if t == "number":
            lo = schema.get("minimum", 0)
            hi = schema.get("maximum", 1)
            return round(lo + (hi - lo) * (0.5 + ((self.h >> 12) % 50) / 100.0), 2)
        if t == "boolean":
            return bool((self.h >> 20) & 1)
        if t == "string":
            if "agent" in name:
                s = self.step[1]
            elif name in ("reason", "error_description", "error_evidence", "summary", "rationale"):
                s = self.reason
            else:
                s = f"{name or 'value'} {self.h % 97}"
            return s[: schema.get("maxLength", len(s))]
        if t == "null":
            return None
        return self.reason

    def text(self):
        rf = self.body.get("response_format") or {}
        schema = (rf.get("json_schema") or {}).get("schema")
        if rf.get("type") == "json_schema" and isinstance(schema, dict):
            return json.dumps(self.value(schema))
        if rf.get("type") == "json_object":
            return json.dumps({"answer": self.reason})
        return f"Scripted answer {self.h % 1000}."


def completion(body, text, finish="stop"):
    prompt = sum(len((m.get("content") or "")) for m in body.get("messages", []) if isinstance(m.get("content"), str)) // 4
    return {
        "id": "chatcmpl-fixture",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fixture"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4 + 1, "total_tokens": prompt + len(text) // 4 + 1},
    }


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.received = 0
        self.answered = 0
        self.per_identity = {}
        self.log = []  # (time, identity) per received request

    def note(self, ident):
        with self.lock:
            self.received += 1
            self.per_identity[ident] = self.per_identity.get(ident, 0) + 1
            self.log.append((time.time(), ident))
            return self.received


class Fixture:
    """The scripted server on 127.0.0.1 (port 0: a free one), in a thread."""

    def __init__(self, port=0, delay_ms=0, answer=None):
        self.stats = Stats()
        self.delay = delay_ms / 1000.0
        self.answer = answer or (lambda body: Answerer(body).text())
        fixture = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle(self):
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a client killed with SIGKILL

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self.reply(200, {"object": "list", "data": [{"id": "fixture", "object": "model"}]})
                else:
                    self.reply(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                try:
                    body = json.loads(raw)
                except ValueError:
                    self.reply(400, {"error": {"message": "bad JSON", "type": "invalid_request_error"}})
                    return
                fixture.stats.note(identity(body.get("messages", [])))
                if fixture.delay:
                    time.sleep(fixture.delay)
                self.reply(200, completion(body, fixture.answer(body)))
                with fixture.stats.lock:
                    fixture.stats.answered += 1

            def reply(self, code, obj):
                data = json.dumps(obj).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed: nothing to answer

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.server.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8099)
    ap.add_argument("--delay-ms", type=int, default=0)
    a = ap.parse_args()
    f = Fixture(a.port, a.delay_ms)
    print(f"listening on {f.base_url}", flush=True)
    f.server.serve_forever()


if __name__ == "__main__":
    main()
