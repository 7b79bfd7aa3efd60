#!/usr/bin/env python3
"""A real OpenAI Agents SDK run (a handoff and a tool), traced by OpenInference, exported over OTLP/HTTP.

`Triage` hands off to `Researcher` (the `transfer_to_researcher` tool), which calls the function
tool `lookup_fact` and answers. `--max-turns 2` makes the run fail with `MaxTurnsExceeded` (the
failing variant). The SDK talks Chat Completions to any OpenAI-compatible endpoint
(`tests/otel/scripted_model.py`, which always uses the tools offered, or `maslens serve-model`).
`OpenAIAgentsInstrumentor` replaces the SDK's own trace processors (nothing goes to OpenAI).

    python tests/otel/openai_agents_run.py --base-url http://127.0.0.1:PORT/v1 --dump /tmp/oa.jsonl

Prints one JSON line: {"trace_ids", "agents", "model_calls", "outcome", "error", ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from otel_common import Pipeline, add_export_args, served_model  # noqa: E402

TASK = "When did Apollo 11 land on the Moon?"


async def run(args: argparse.Namespace) -> dict:
    from agents import Agent, Runner, function_tool, set_default_openai_api, set_default_openai_client
    from agents.exceptions import MaxTurnsExceeded
    from openai import AsyncOpenAI

    set_default_openai_client(AsyncOpenAI(base_url=args.base_url, api_key="unused"), use_for_tracing=False)
    set_default_openai_api("chat_completions")

    calls = {"lookup_fact": 0}

    @function_tool
    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive."""
        calls["lookup_fact"] += 1
        return "Apollo 11 landed on 20 July 1969."

    researcher = Agent(
        name="Researcher",
        instructions="You are Researcher. Use lookup_fact, then answer in one sentence.",
        model=args.model,
        tools=[lookup_fact],
    )
    if args.as_tool:
        # Agents as tools: Triage keeps the conversation and calls Researcher like a function.
        triage = Agent(
            name="Triage",
            instructions="You are Triage. Ask Researcher with ask_researcher, then answer.",
            model=args.model,
            tools=[researcher.as_tool(tool_name="ask_researcher", tool_description="Ask Researcher a question.")],
        )
    else:
        triage = Agent(
            name="Triage",
            instructions="You are Triage. Hand every question to Researcher.",
            model=args.model,
            handoffs=[researcher],
        )
    out: dict = {"agents": ["Triage", "Researcher"], "outcome": "success", "error": None}
    try:
        result = await Runner.run(triage, args.task, max_turns=args.max_turns)
        out["final_output"] = str(result.final_output)
        out["last_agent"] = result.last_agent.name
    except MaxTurnsExceeded as e:
        out["outcome"] = "failure"
        out["error"] = f"MaxTurnsExceeded: {e}"
    out["tool_calls"] = calls["lookup_fact"]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    p.add_argument("--model", help="model name (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--max-turns", type=int, default=10, help="Runner max_turns (2 fails: MaxTurnsExceeded)")
    p.add_argument("--as-tool", action="store_true",
                   help="Researcher as a tool of Triage (Agent.as_tool) instead of a handoff")
    add_export_args(p, default_service="openai-agents-mas")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)
    pipe = Pipeline(args)
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=pipe.provider)
    summary = asyncio.run(run(args))
    rc = pipe.finish()
    spans = pipe.tee.spans
    summary.update(
        trace_ids=pipe.tee.trace_ids,
        spans=len(spans),
        model_calls=sum(1 for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"),
    )
    print(json.dumps(summary))
    return rc


if __name__ == "__main__":
    sys.exit(main())
