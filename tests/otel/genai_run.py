#!/usr/bin/env python3
"""A scripted multi-agent run emitted with the plain OpenTelemetry SDK in the GenAI semantic conventions.

No model and no framework: this is "an OpenTelemetry SDK client" that instruments its own agents by hand,
the way the GenAI conventions describe (gen_ai.operation.name = invoke_workflow / invoke_agent / chat /
execute_tool, content as JSON strings in the parts format). The run is fixed: a Planner, a WebSurfer and a
Coder answer a date question; the WebSurfer reports Apollo 12's *launch* date as its landing date, so the
final answer is wrong (117 instead of 122). The summary line names that mistake for tests.

    python tests/otel/genai_run.py --endpoint http://127.0.0.1:4318/v1/traces [--encoding json] [--gzip]
    python tests/otel/genai_run.py --dump /tmp/genai.jsonl            # no server: OTLP/JSON lines only

Span tree of one run (default layout):

    invoke_workflow apollo_research        gen_ai.operation.name=invoke_workflow, gen_ai.workflow.name
      invoke_agent Planner                 gen_ai.agent.name=Planner
        chat gpt-4o-mini                   gen_ai.input.messages / output.messages / system_instructions
      invoke_agent WebSurfer
        chat gpt-4o-mini                   output: tool_call web_search
        execute_tool web_search            gen_ai.tool.name / call.id / call.arguments / call.result
        chat gpt-4o-mini                   output: the wrong claim
      invoke_agent Coder
        chat gpt-4o-mini                   output: tool_call run_python
        execute_tool run_python
        chat gpt-4o-mini
      invoke_agent Planner
        chat gpt-4o-mini                   output: FINAL ANSWER

--root agent replaces the workflow span by `invoke_agent Orchestrator`; --split-traces drops the root and
sends every agent turn as its own trace, tied together only by gen_ai.conversation.id.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: E402

from otel_common import Pipeline, add_export_args  # noqa: E402

MODEL = "gpt-4o-mini"
PROVIDER = "openai"
QUESTION = (
    "How many days passed between the Apollo 11 Moon landing and the Apollo 12 Moon landing? "
    "Answer with a single number."
)
CORRECT_ANSWER = "122"

AGENTS = {
    "Planner": {
        "id": "agent_planner",
        "description": "Breaks the task down, delegates, and gives the final answer.",
        "system": "You are the Planner. Split the task into steps, delegate each step to WebSurfer or Coder, "
        "and finish with 'FINAL ANSWER: <answer>'.",
    },
    "WebSurfer": {
        "id": "agent_websurfer",
        "description": "Searches the web and reports facts with sources.",
        "system": "You are WebSurfer. Use web_search to find facts and report them with their source.",
    },
    "Coder": {
        "id": "agent_coder",
        "description": "Writes and runs Python to compute results.",
        "system": "You are Coder. Write Python, run it with run_python, and report the result.",
    },
}

# Timing of the simulated run (nanoseconds): spans get explicit, strictly increasing timestamps.
CHAT_NS = 1_200_000_000
TOOL_NS = 400_000_000
GAP_NS = 5_000_000


def text_msg(role: str, content: str, name: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": content}]}
    if name:
        m["name"] = name
    return m


class Clock:
    def __init__(self, start_ns: int) -> None:
        self.now = start_ns

    def advance(self, ns: int) -> int:
        self.now += ns
        return self.now


class Run:
    """Emits one scripted run; collects what the summary line reports."""

    def __init__(self, tracer: trace.Tracer, conversation_id: str, root: str, split: bool, rounds: int) -> None:
        self.tracer = tracer
        self.conv = conversation_id
        self.root_kind = root
        self.split = split
        self.rounds = rounds
        self.clock = Clock(time.time_ns())
        self.history: list[dict[str, Any]] = [text_msg("user", QUESTION)]
        self.steps = 0
        self.spans = 0
        self.agents: list[str] = []
        self.trace_ids: list[str] = []
        self.mistake_span_id: str | None = None
        self.call_seq = 0
        self.resp_seq = 0

    # -- span helpers -----------------------------------------------------------------------------
    def _start(self, name: str, ctx: Any, attrs: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL) -> trace.Span:
        start = self.clock.advance(GAP_NS)
        span = self.tracer.start_span(name, context=ctx, kind=kind, attributes=attrs, start_time=start)
        self.spans += 1
        tid = format(span.get_span_context().trace_id, "032x")
        if tid not in self.trace_ids:
            self.trace_ids.append(tid)
        return span

    def _end(self, span: trace.Span, duration_ns: int = 0) -> None:
        span.end(end_time=self.clock.advance(duration_ns + GAP_NS))

    def chat(self, parent_ctx: Any, agent: str, output: dict[str, Any], usage_out: int) -> trace.Span:
        """One LLM call: input = system instructions + history so far; output = one assistant message."""
        self.resp_seq += 1
        finish = output.get("finish_reason", "stop")
        input_messages = list(self.history)
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": MODEL,
            "gen_ai.request.max_tokens": 512,
            "gen_ai.request.temperature": 0.0,
            "gen_ai.response.model": MODEL + "-2024-07-18",
            "gen_ai.response.id": f"chatcmpl-{self.conv[:8]}-{self.resp_seq}",
            "gen_ai.response.finish_reasons": [finish],
            "gen_ai.conversation.id": self.conv,
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": AGENTS[agent]["system"]}]),
            "gen_ai.input.messages": json.dumps(input_messages),
            "gen_ai.output.messages": json.dumps([output]),
            "gen_ai.usage.input_tokens": 40 + 25 * len(input_messages),
            "gen_ai.usage.output_tokens": usage_out,
            "server.address": "api.openai.com",
            "server.port": 443,
        }
        span = self._start(f"chat {MODEL}", parent_ctx, attrs, SpanKind.CLIENT)
        self._end(span, CHAT_NS)
        hist = {k: v for k, v in output.items() if k != "finish_reason"}
        hist["name"] = agent
        self.history.append(hist)
        self.steps += 1
        return span

    def tool(self, parent_ctx: Any, name: str, description: str, call_id: str, arguments: dict[str, Any], result: str) -> trace.Span:
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": description,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps(arguments),
            "gen_ai.tool.call.result": result,
            "gen_ai.conversation.id": self.conv,
        }
        span = self._start(f"execute_tool {name}", parent_ctx, attrs)
        self._end(span, TOOL_NS)
        self.history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": result}]})
        self.steps += 1
        return span

    def agent_turn(self, root_ctx: Any, agent: str, body) -> None:
        if agent not in self.agents:
            self.agents.append(agent)
        attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": MODEL,
            "gen_ai.agent.name": agent,
            "gen_ai.agent.id": AGENTS[agent]["id"],
            "gen_ai.agent.description": AGENTS[agent]["description"],
            "gen_ai.conversation.id": self.conv,
        }
        # --split-traces: every turn is its own trace (context=None with an empty current context).
        ctx = trace.set_span_in_context(trace.INVALID_SPAN) if self.split else root_ctx
        span = self._start(f"invoke_agent {agent}", ctx, attrs)
        body(trace.set_span_in_context(span))
        self._end(span)

    def next_call_id(self) -> str:
        self.call_seq += 1
        return f"call_{self.conv[:6]}_{self.call_seq}"

    # -- the script -------------------------------------------------------------------------------
    def emit(self) -> dict[str, Any]:
        root = None
        root_ctx = None
        if not self.split:
            if self.root_kind == "workflow":
                attrs = {
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.workflow.name": "apollo_research",
                    "gen_ai.conversation.id": self.conv,
                    "gen_ai.input.messages": json.dumps([text_msg("user", QUESTION)]),
                }
                root = self._start("invoke_workflow apollo_research", trace.set_span_in_context(trace.INVALID_SPAN), attrs)
            else:
                attrs = {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.provider.name": PROVIDER,
                    "gen_ai.agent.name": "Orchestrator",
                    "gen_ai.agent.id": "agent_orchestrator",
                    "gen_ai.conversation.id": self.conv,
                    "gen_ai.input.messages": json.dumps([text_msg("user", QUESTION)]),
                }
                root = self._start("invoke_agent Orchestrator", trace.set_span_in_context(trace.INVALID_SPAN), attrs)
            root_ctx = trace.set_span_in_context(root)

        plan = (
            "Plan: 1) WebSurfer: find the Moon landing dates of Apollo 11 and Apollo 12. "
            "2) Coder: compute the number of days between them. 3) I report the number."
        )
        self.agent_turn(root_ctx, "Planner", lambda c: self.chat(c, "Planner", {**text_msg("assistant", plan), "finish_reason": "stop"}, 45))

        landing11 = "1969-07-20"
        wrong12 = "1969-11-14"  # Apollo 12 *launched* on 14 Nov; it landed on 19 Nov 1969
        for r in range(self.rounds):
            query = "Apollo 11 and Apollo 12 Moon landing dates" if r == 0 else f"Apollo 12 landing date (check {r})"

            def websurfer(c: Any, query: str = query) -> None:
                cid = self.next_call_id()
                self.chat(c, "WebSurfer", {
                    "role": "assistant",
                    "parts": [{"type": "tool_call", "id": cid, "name": "web_search", "arguments": {"query": query}}],
                    "finish_reason": "tool_calls",
                }, 18)
                result = json.dumps([
                    {"title": "Apollo 11 - Wikipedia", "snippet": "Apollo 11 landed on the Moon on July 20, 1969."},
                    {"title": "Apollo 12 - NASA", "snippet": "Apollo 12 launched November 14, 1969 and landed in the Ocean of Storms on November 19, 1969."},
                ])
                self.tool(c, "web_search", "Search the web and return the top results.", cid, {"query": query}, result)
                claim = (
                    f"Apollo 11 landed on {landing11}. Apollo 12 landed on {wrong12} "
                    "(source: NASA, Apollo 12 mission page)."
                )
                span = self.chat(c, "WebSurfer", {**text_msg("assistant", claim), "finish_reason": "stop"}, 38)
                if self.mistake_span_id is None:
                    self.mistake_span_id = format(span.get_span_context().span_id, "016x")

            self.agent_turn(root_ctx, "WebSurfer", websurfer)

            def coder(c: Any) -> None:
                cid = self.next_call_id()
                code = "from datetime import date\nprint((date(1969, 11, 14) - date(1969, 7, 20)).days)"
                self.chat(c, "Coder", {
                    "role": "assistant",
                    "parts": [
                        {"type": "text", "content": "I will compute the difference with datetime."},
                        {"type": "tool_call", "id": cid, "name": "run_python", "arguments": {"code": code}},
                    ],
                    "finish_reason": "tool_calls",
                }, 52)
                self.tool(c, "run_python", "Run Python code and return stdout.", cid, {"code": code}, "117\n")
                self.chat(c, "Coder", {**text_msg("assistant", "The code printed 117: there are 117 days between the two landings."), "finish_reason": "stop"}, 21)

            self.agent_turn(root_ctx, "Coder", coder)

        final = "FINAL ANSWER: 117"
        self.agent_turn(root_ctx, "Planner", lambda c: self.chat(c, "Planner", {**text_msg("assistant", final), "finish_reason": "stop"}, 8))

        if root is not None:
            root.set_attribute("gen_ai.output.messages", json.dumps([{**text_msg("assistant", final), "finish_reason": "stop"}]))
            root.set_status(Status(StatusCode.OK))
            self._end(root)
        return {
            "trace_id": self.trace_ids[0],
            "trace_ids": self.trace_ids,
            "conversation_id": self.conv,
            "agents": self.agents,
            "steps": self.steps,
            "spans": self.spans,
            "answer": "117",
            "correct_answer": CORRECT_ANSWER,
            "mistake_agent": "WebSurfer",
            "mistake_span_id": self.mistake_span_id,
        }


def spans_for_rounds(rounds: int, root: bool) -> int:
    # root + Planner turn (2) + rounds x (WebSurfer 4 + Coder 4) + final Planner turn (2)
    return (1 if root else 0) + 2 + 8 * rounds + 2


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_export_args(p, default_service="genai-scripted-mas")
    p.add_argument("--conversation-id", help="gen_ai.conversation.id (default: a fresh UUID per run; "
                   "with --runs N > 1 run i gets ID-i)")
    p.add_argument("--runs", type=int, default=1, help="independent runs, one trace each (default 1)")
    p.add_argument("--rounds", type=int, default=1, help="WebSurfer+Coder rounds per run (default 1)")
    p.add_argument("--spans-per-run", type=int, help="at least this many spans per run (adds rounds)")
    p.add_argument("--root", choices=["workflow", "agent"], default="workflow",
                   help="root span: invoke_workflow (default) or invoke_agent Orchestrator")
    p.add_argument("--split-traces", action="store_true",
                   help="no root span; each agent turn is its own trace, grouped only by gen_ai.conversation.id")
    args = p.parse_args()

    rounds = max(1, args.rounds)
    if args.spans_per_run:
        rounds = max(rounds, math.ceil((args.spans_per_run - spans_for_rounds(0, not args.split_traces)) / 8))

    pipe = Pipeline(args)
    tracer = pipe.tracer("maslens.tests.genai_run", "0.1.0")
    rc = 0
    for i in range(args.runs):
        if args.conversation_id:
            conv = args.conversation_id if args.runs == 1 else f"{args.conversation_id}-{i}"
        else:
            conv = str(uuid.uuid4())
        summary = Run(tracer, conv, args.root, args.split_traces, rounds).emit()
        if not pipe.flush():
            rc = 1
        print(json.dumps(summary), flush=True)
    return pipe.finish() or rc


if __name__ == "__main__":
    sys.exit(main())
