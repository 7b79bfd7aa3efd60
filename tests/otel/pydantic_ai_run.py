#!/usr/bin/env python3
"""A real pydantic-ai run (agent delegation), traced by pydantic-ai's own OpenTelemetry GenAI spans.

`coordinator` calls the tool `ask_researcher`, which runs the agent `researcher` (tool
`lookup_fact`) and returns its answer: the nested agent's spans sit under the coordinator's
`execute_tool ask_researcher` span. pydantic-ai emits the GenAI conventions natively
(`invoke_agent`, `chat`, `execute_tool`, `gen_ai.input/output.messages`) through
`Agent.instrument_all(InstrumentationSettings(tracer_provider=...))`. Model: any OpenAI-compatible endpoint
(`tests/otel/scripted_model.py` uses the tools offered).

    python tests/otel/pydantic_ai_run.py --base-url http://127.0.0.1:PORT/v1 --dump /tmp/pai.jsonl

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
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(args.model, provider=OpenAIProvider(base_url=args.base_url, api_key="unused"))
    inst = InstrumentationSettings(tracer_provider=pipe.provider, include_content=True)
    Agent.instrument_all(inst)
    researcher = Agent(model, name="researcher",
                       instructions="You are researcher. Use lookup_fact, then answer in one sentence.")
    coordinator = Agent(model, name="coordinator",
                        instructions="You are coordinator. Ask the researcher, then answer.")

    @researcher.tool_plain(retries=1)
    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive."""
        if args.retry:
            from pydantic_ai import ModelRetry

            raise ModelRetry("the archive is offline; try another query")
        return "Apollo 11 landed on 20 July 1969."

    @coordinator.tool_plain
    async def ask_researcher(question: str) -> str:
        """Ask the researcher agent a question."""
        r = await researcher.run(question)
        return str(r.output)

    try:
        result = coordinator.run_sync(args.task)
    except Exception as e:  # --retry with a model that keeps calling the tool: UnexpectedModelBehavior
        return {"agents": ["coordinator", "researcher"], "outcome": "failure", "error": f"{type(e).__name__}: {e}"}
    return {"agents": ["coordinator", "researcher"], "output": str(result.output)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    p.add_argument("--model", help="model name (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--retry", action="store_true",
                   help="lookup_fact always raises ModelRetry (the scripted model then answers with the error: "
                        "a quiet failure; a model that calls the tool again fails the run)")
    add_export_args(p, default_service="pydantic-ai-mas")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)
    pipe = Pipeline(args)
    summary = run(args, pipe)
    rc = pipe.finish()
    spans = pipe.tee.spans
    summary.update(
        trace_ids=pipe.tee.trace_ids,
        spans=len(spans),
        model_calls=sum(1 for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"),
    )
    print(json.dumps(summary))
    return rc


if __name__ == "__main__":
    sys.exit(main())
