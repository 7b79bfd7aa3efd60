#!/usr/bin/env python3
"""A real LlamaIndex AgentWorkflow run (a handoff and a tool), traced by OpenInference's llama-index instrumentor.

(`--native`: traced instead by LlamaIndex's own exporter, `llama-index-observability-otel`.)

`triage` (FunctionAgent, root) hands off to `researcher` (FunctionAgent with the tool
`lookup_fact`), which answers. The agent names appear only in the workflow's own spans
(`AgentWorkflow.setup_agent` / `run_agent_step` inputs carry `current_agent_name`); each model
call is several LLM-kind spans. Model: OpenAILike against any OpenAI-compatible endpoint (run
`tests/otel/scripted_model.py --arg to_agent=researcher` so that the handoff names a real agent).

    python tests/otel/llamaindex_run.py --base-url http://127.0.0.1:PORT/v1 --dump /tmp/li.jsonl
    python tests/otel/llamaindex_run.py --base-url http://127.0.0.1:PORT/v1 --native --dump /tmp/li_native.jsonl

`--native` registers `LlamaIndexOpenTelemetry` (llama_index.observability.otel) on this script's
TracerProvider: one span per instrumented LlamaIndex method (named after it, e.g.
`OpenAILike.astream_chat`, `FunctionAgent.take_step`), LlamaIndex's instrumentation events as
span events (`LLMChatStartEvent`, `LLMChatEndEvent`, `AgentInput`, `AgentOutput`, ...) whose
attributes are the flattened event (nested lists as JSON strings).

Prints one JSON line: {"trace_ids", "agents", "model_calls", "response", ...}.
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
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive."""
        return "Apollo 11 landed on 20 July 1969."

    llm = OpenAILike(model=args.model, api_base=args.base_url, api_key="unused", is_chat_model=True,
                     is_function_calling_model=True, max_tokens=64)
    triage = FunctionAgent(name="triage", description="Routes questions.", llm=llm,
                           system_prompt="You are triage. Hand every question to researcher.",
                           can_handoff_to=["researcher"], streaming=not args.no_stream)
    researcher = FunctionAgent(name="researcher", description="Looks facts up.", llm=llm, tools=[lookup_fact],
                               system_prompt="You are researcher. Use lookup_fact, then answer.",
                               streaming=not args.no_stream)
    wf = AgentWorkflow(agents=[triage, researcher], root_agent="triage", timeout=60)
    resp = await wf.run(user_msg=args.task)
    return {"agents": ["triage", "researcher"], "response": str(resp)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    p.add_argument("--model", help="model name (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--native", action="store_true",
                   help="trace with LlamaIndex's own exporter (llama-index-observability-otel) instead of OpenInference")
    p.add_argument("--no-stream", action="store_true",
                   help="FunctionAgent(streaming=False): the model calls use achat, not astream_chat")
    add_export_args(p, default_service="llamaindex-mas")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)
    pipe = Pipeline(args)
    if args.native:
        from llama_index.observability.otel import LlamaIndexOpenTelemetry
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        class _Discard(SpanExporter):
            # LlamaIndexOpenTelemetry always adds a processor for its span_exporter; the pipeline's
            # own processor already exports (and dumps) every span of the provider handed to it.
            def export(self, spans):  # type: ignore[no-untyped-def]
                return SpanExportResult.SUCCESS

        # As its README says, with the OTLP exporter as span_exporter and no tracer_provider; here
        # the pipeline's provider (its resource, its OTLP/dump exporter) is reused instead.
        LlamaIndexOpenTelemetry(span_exporter=_Discard(), tracer_provider=pipe.provider).start_registering()
    else:
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=pipe.provider)
    summary = asyncio.run(run(args))
    rc = pipe.finish()
    spans = pipe.tee.spans
    summary.update(
        trace_ids=pipe.tee.trace_ids,
        spans=len(spans),
        llm_spans=sum(1 for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"),
        instrumentation="llama-index-observability-otel" if args.native else "openinference",
    )
    if args.native:  # the spans that carry LlamaIndex's LLMChatStartEvent: one per model call
        summary["model_calls"] = sum(1 for s in spans if any(e.name == "LLMChatStartEvent" for e in s.events))
    print(json.dumps(summary))
    return rc


if __name__ == "__main__":
    sys.exit(main())
