#!/usr/bin/env python3
"""A real smolagents run (a manager agent and a managed agent with a tool), traced by OpenInference.

`manager` (ToolCallingAgent) delegates to the managed agent `researcher` (ToolCallingAgent with the
tool `lookup_fact`), which answers through `final_answer`. Exported over OTLP/HTTP and/or dumped
(`--dump FILE`) as OTLP/JSON lines. Model: any OpenAI-compatible endpoint
(`tests/otel/scripted_model.py` uses the tools offered; `maslens serve-model` rarely does).

    python tests/otel/smolagents_run.py --base-url http://127.0.0.1:PORT/v1 --dump /tmp/smol.jsonl

Prints one JSON line: {"trace_ids", "agents", "model_calls", "final_answer", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from otel_common import Pipeline, add_export_args, served_model  # noqa: E402

TASK = "When did Apollo 11 land on the Moon?"


def run(args: argparse.Namespace) -> dict:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive.

        Args:
            query: what to look up.
        """
        return "Apollo 11 landed on 20 July 1969."

    model = OpenAIServerModel(model_id=args.model, api_base=args.base_url, api_key="unused")
    researcher = ToolCallingAgent(
        tools=[lookup_fact], model=model, name="researcher",
        description="Looks facts up in the mission archive.", max_steps=args.max_steps, verbosity_level=-1,
    )
    if args.code:
        # A CodeAgent manager: its steps must be Python code; a reply without code is an
        # AgentParsingError on that step (smolagents then retries until max_steps).
        from smolagents import CodeAgent

        manager = CodeAgent(tools=[], model=model, name="manager", managed_agents=[researcher],
                            max_steps=args.max_steps, verbosity_level=-1)
    else:
        manager = ToolCallingAgent(tools=[], model=model, name="manager", managed_agents=[researcher],
                                   max_steps=args.max_steps, verbosity_level=-1)
    answer = manager.run(args.task)
    return {"agents": ["manager", "researcher"], "final_answer": str(answer)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    p.add_argument("--model", help="model name (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--code", action="store_true",
                   help="the manager is a CodeAgent (the scripted model writes no code: parsing errors)")
    add_export_args(p, default_service="smolagents-mas")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)
    pipe = Pipeline(args)
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument(tracer_provider=pipe.provider)
    summary = run(args)
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
