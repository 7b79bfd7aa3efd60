#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat endpoint for recording framework runs (stdlib only).

`maslens serve-model`'s 135M model rarely emits a tool call, so a framework run against it shows
no tool use, no handoff and no delegation. This server answers `POST /v1/chat/completions` (plain
and `stream: true`) and `GET /v1/models` by rule, so every framework walks the same path:

- the last message is not a tool result and tools are offered: call one tool, chosen as the
  first offered tool whose name is not `final_answer` (handoffs such as `transfer_to_*` and
  agent-as-tool wrappers are tools too), with arguments filled from its JSON schema;
- a tool result came back and `final_answer` is offered (smolagents): call `final_answer`;
- a group chat asks which role speaks next (AG2's auto speaker selection, AutoGen's SelectorGroupChat):
  the role after the last one that spoke (by message name, else the last "NAME:" line of the history
  in the prompt), in the order listed;
- otherwise: a short text answer that quotes the last tool result.

`--arg NAME=VALUE` fixes one argument (a handoff target); `--fail-after N` answers HTTP 500 from the N+1-th call on (a model failure mid-run).

    python tests/otel/scripted_model.py --port 0     # prints http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "scripted"
_lock = threading.Lock()
_calls = 0
# --arg NAME=VALUE: the value of every tool argument called NAME (e.g. LlamaIndex's handoff `to_agent`).
ARG_VALUES: dict[str, str] = {}


def _fill(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a tool from its JSON schema: strings "Apollo 11", numbers 1, booleans true."""
    out: dict[str, Any] = {}
    props = schema.get("properties") or {}
    for name, p in props.items():
        t = p.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), "string")
        if "anyOf" in p and not t:
            t = next((x.get("type") for x in p["anyOf"] if x.get("type") not in (None, "null")), "string")
        if name in ARG_VALUES:
            out[name] = ARG_VALUES[name]
            continue
        out[name] = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(
            t, "Apollo 11 landing date"
        )
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _answers_offered_tool(msgs: list[dict[str, Any]], names: list[str]) -> bool:
    """Whether the last message is the result of a call to one of the tools offered now (a handoff's
    result, from a tool of another agent, does not count), or a text observation (smolagents)."""
    last = msgs[-1] if msgs else {}
    if last.get("role") != "tool":
        return _text(last.get("content")).lstrip().startswith(("Observation", "Call id"))
    wanted = last.get("tool_call_id")
    for m in msgs:
        for c in m.get("tool_calls") or []:
            if c.get("id") == wanted:
                return not names or c.get("function", {}).get("name") in names
    return True


def _next_speaker(msgs: list[dict[str, Any]]) -> str | None:
    """A group chat's speaker-selection request (AG2's `speaker_selection_method="auto"`: "... select
    the next role from ['user', 'researcher', 'writer'] to play. Only return the role."): the role after
    the last one that spoke, in the list's order (so the chat goes round the list); None otherwise."""
    m = re.search(r"select the next role from \[([^\]]*)\]", _text((msgs[-1] if msgs else {}).get("content")))
    if not m:
        return None
    roles = re.findall(r"'([^']*)'|\"([^\"]*)\"", m.group(1))
    roles = [a or b for a, b in roles]
    if not roles:
        return None
    spoke = [x.get("name") for x in msgs[:-1] if x.get("name") in roles]
    if not spoke:
        # The history written into the prompt as "NAME: text" lines (AutoGen's SelectorGroupChat).
        text = "\n".join(_text(x.get("content")) for x in msgs)
        at = {r: text.rfind(f"\n{r}:") for r in roles}
        spoke = [r for r in sorted(roles, key=lambda r: at[r]) if at[r] >= 0]
    return roles[(roles.index(spoke[-1]) + 1) % len(roles)] if spoke else roles[0]


def decide(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for one request."""
    msgs = body.get("messages") or []
    speaker = _next_speaker(msgs)
    if speaker is not None:
        return {"text": speaker}
    tools = [t.get("function", {}) for t in body.get("tools") or [] if t.get("type", "function") == "function"]
    last = msgs[-1] if msgs else {}
    names = [t.get("name", "") for t in tools]
    after_tool = _answers_offered_tool(msgs, names)
    if tools and not after_tool:
        pick = next((t for t in tools if t.get("name") != "final_answer"), tools[0])
        return {"tool": pick.get("name", ""), "arguments": _fill(pick.get("parameters") or {})}
    result = _text(last.get("content"))[:80] if after_tool else ""
    answer = f"The answer is: {result}" if result else "Apollo 11 landed on 20 July 1969."
    if "final_answer" in names:
        return {"tool": "final_answer", "arguments": {"answer": answer}}
    return {"text": answer}


def _message(d: dict[str, Any], n: int) -> dict[str, Any]:
    if "tool" in d:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": d["tool"], "arguments": json.dumps(d["arguments"])},
                }
            ],
        }
    return {"role": "assistant", "content": d["text"]}


class Handler(BaseHTTPRequestHandler):
    fail_after: int | None = None

    def log_message(self, fmt: str, *a: Any) -> None:  # quiet
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "maslens"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        global _calls
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except json.JSONDecodeError as e:
            self._json(400, {"error": {"message": f"bad JSON: {e}"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        with _lock:
            _calls += 1
            call = _calls
        if self.fail_after is not None and call > self.fail_after:
            self._json(500, {"error": {"message": "scripted model failure", "type": "server_error"}})
            return
        msg = _message(decide(body), call)
        usage = {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
        created = int(time.time())
        if not body.get("stream"):
            self._json(200, {
                "id": f"chatcmpl-{call}", "object": "chat.completion", "created": created, "model": MODEL,
                "choices": [{"index": 0, "message": msg,
                             "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                "usage": usage,
            })
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {"id": f"chatcmpl-{call}", "object": "chat.completion.chunk", "created": created, "model": MODEL}
        delta: dict[str, Any] = {"role": "assistant"}
        if msg.get("tool_calls"):
            tc = msg["tool_calls"][0]
            delta["tool_calls"] = [{"index": 0, **tc}]
        else:
            delta["content"] = msg["content"]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {},
                                  "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}]},
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": usage})
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fail-after", type=int, help="answer 500 after this many calls")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                   help="fill every tool argument NAME with VALUE (repeatable), e.g. to_agent=researcher")
    args = p.parse_args()
    for item in args.arg:
        k, _, v = item.partition("=")
        ARG_VALUES[k] = v
    Handler.fail_after = args.fail_after
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"http://127.0.0.1:{srv.server_address[1]}/v1", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
