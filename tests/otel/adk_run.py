#!/usr/bin/env python3
"""A real Google ADK run (a SequentialAgent of two LlmAgents, one tool), traced by ADK's native OpenTelemetry.

`pipeline` (a SequentialAgent, a container) runs `researcher` (tool `lookup_fact`), then `writer`. ADK's own
spans follow the GenAI conventions (telemetry schema 2, the default): `invoke_workflow` > `invoke_agent
<name>` (`gen_ai.agent.name`, `gen_ai.conversation.id` = the session id) > `generate_content <model>` and
`execute_tool <tool>`. Message content is in the spans only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY` (or `SPAN_AND_EVENT`); ADK's default
captures none. `--capture-content` sets SPAN_ONLY. ADK traces through the global tracer provider, so the
script sets it before importing ADK. The model is ADK's `LiteLlm` wrapper (`openai/<model>`, `api_base`) on any
OpenAI-compatible endpoint (`tests/otel/scripted_model.py` uses the tools offered).

    python tests/otel/adk_run.py --base-url http://127.0.0.1:PORT/v1 --capture-content --dump /tmp/adk.jsonl

Prints one JSON line: {"trace_ids", "agents", "model_calls", "output", ...}.
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
    from google.adk.agents import LlmAgent, SequentialAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    model = LiteLlm(model=f"openai/{args.model}", api_base=args.base_url, api_key="unused", max_tokens=64)

    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive."""
        return "Apollo 11 landed on 20 July 1969."

    researcher = LlmAgent(name="researcher", model=model, tools=[lookup_fact],
                          instruction="You are researcher. Use lookup_fact, then answer in one sentence.")
    writer = LlmAgent(name="writer", model=model,
                      instruction="You are writer. Give the final answer in one sentence.")
    pipeline = SequentialAgent(name="pipeline", sub_agents=[researcher, writer])
    sessions = InMemorySessionService()
    runner = Runner(app_name="apollo", agent=pipeline, session_service=sessions)
    session = await sessions.create_session(app_name="apollo", user_id="user", session_id=args.session_id)
    message = types.Content(role="user", parts=[types.Part(text=args.task)])
    authors, output = [], ""
    async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
        authors.append(event.author)
        for part in (event.content.parts if event.content and event.content.parts else []):
            if part.text:
                output = part.text
    return {"agents": ["researcher", "writer"], "authors": authors, "output": output}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    # A name LiteLLM knows to support function calling; the scripted endpoint answers whatever is asked for.
    p.add_argument("--model", default="gpt-4o-mini", help="model name (default gpt-4o-mini)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--session-id", default="adk-session-1", help="ADK session id (gen_ai.conversation.id)")
    p.add_argument("--capture-content", action="store_true",
                   help="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY (default: ADK's, no content)")
    add_export_args(p, default_service="adk-pipeline")
    args = p.parse_args()
    served_model(args.base_url)  # fails early when nothing answers there
    if args.capture_content:
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    else:
        os.environ.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM's model table, not the network
    pipe = Pipeline(args)
    from opentelemetry import trace

    trace.set_tracer_provider(pipe.provider)  # before ADK creates its tracers
    summary = asyncio.run(run(args))
    rc = pipe.finish()
    spans = pipe.tee.spans
    summary.update(
        trace_ids=pipe.tee.trace_ids,
        spans=len(spans),
        model_calls=sum(1 for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "generate_content"),
        capture_content=args.capture_content,
    )
    print(json.dumps(summary))
    return rc


if __name__ == "__main__":
    sys.exit(main())
