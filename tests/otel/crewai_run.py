#!/usr/bin/env python3
"""A real CrewAI run (sequential crew of two agents, one tool), traced by OpenInference's CrewAI instrumentor.

`researcher` (tool `lookup_fact`) does the first task, `writer` the second with the researcher's result as
context, `Process.sequential`, no delegation. `CrewAIInstrumentor` (openinference-instrumentation-crewai)
turns CrewAI's events into spans: `<crew>.kickoff` (CHAIN) > `<role>.<task>.execute` (AGENT, role in
`graph.node.id`) > `<model>.llm_call` (LLM, `llm.input_messages.*` / `llm.output_messages.*`) and
`<tool>.run` (TOOL). The instrumentor's default (wrapper) mode traces no model call: the model goes
through LiteLLM (`LLM("openai/<model>", base_url=..., is_litellm=True)`), traced by OpenInference's
`LiteLLMInstrumentor` (`completion` LLM spans, `llm.input_messages.*` / `llm.output_messages.*`), as in
OpenInference's CrewAI examples. `--native` keeps CrewAI's own OpenAI provider instead (then no span records
the model calls unless the openai SDK is instrumented too). Model: any OpenAI-compatible endpoint
(`tests/otel/scripted_model.py` uses the tools offered).

    python tests/otel/crewai_run.py --base-url http://127.0.0.1:PORT/v1 --dump /tmp/crewai.jsonl

Prints one JSON line: {"trace_ids", "agents", "model_calls", "output", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from otel_common import Pipeline, add_export_args, served_model  # noqa: E402

TASK = "When did Apollo 11 land on the Moon?"


def run(args: argparse.Namespace, pipe: Pipeline) -> dict:
    from crewai import LLM, Agent, Crew, Process, Task
    from crewai.tools import tool
    from openinference.instrumentation.crewai import CrewAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=pipe.provider)
    if not args.native:
        from openinference.instrumentation.litellm import LiteLLMInstrumentor

        LiteLLMInstrumentor().instrument(tracer_provider=pipe.provider)

    llm = LLM(model=f"openai/{args.model}", base_url=args.base_url, api_key="unused", max_tokens=64,
              is_litellm=not args.native)

    @tool("lookup_fact")
    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive."""
        return "Apollo 11 landed on 20 July 1969."

    researcher = Agent(role="researcher", goal="Find the fact the task asks for with lookup_fact.",
                       backstory="You are researcher.", tools=[lookup_fact], llm=llm,
                       allow_delegation=False, max_iter=3, verbose=False)
    writer = Agent(role="writer", goal="Give the final answer in one sentence.",
                   backstory="You are writer.", llm=llm, allow_delegation=False, max_iter=2, verbose=False)
    # Hierarchical: the tasks name no agent; CrewAI's manager agent delegates each to a coworker through its
    # "Delegate work to coworker" tool (run the model with --arg coworker=researcher).
    hier = args.hierarchical
    research = Task(description=args.task, expected_output="The date, with its source.",
                    agent=None if hier else researcher)
    answer = Task(description="Answer the question in one sentence from the research.",
                  expected_output="One sentence.", agent=None if hier else writer, context=[research])
    crew = Crew(name="apollo_crew", agents=[researcher, writer], tasks=[research, answer],
                process=Process.hierarchical if hier else Process.sequential,
                manager_llm=llm if hier else None, verbose=False)
    result = crew.kickoff()
    return {"agents": ["researcher", "writer"], "output": str(result)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    # A name LiteLLM knows to support function calling (for an unknown name CrewAI falls back to its ReAct text
    # prompt and offers no tools); the scripted endpoint answers whatever model is asked for.
    p.add_argument("--model", default="gpt-4o-mini", help="model name (default gpt-4o-mini)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--native", action="store_true",
                   help="CrewAI's own OpenAI provider instead of LiteLLM (no model spans)")
    p.add_argument("--hierarchical", action="store_true",
                   help="Process.hierarchical: CrewAI's manager agent delegates the tasks (model: --arg coworker=researcher)")
    add_export_args(p, default_service="crewai-crew")
    args = p.parse_args()
    served_model(args.base_url)  # fails early when nothing answers there
    # No CrewAI telemetry to its own servers; LiteLLM's model table from the package, not the network.
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pipe = Pipeline(args)
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # CrewAI prints progress on stdout
        summary = run(args, pipe)
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
