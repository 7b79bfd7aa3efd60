#!/usr/bin/env python3
"""A real AutoGen AgentChat run, traced by OpenInference and exported over OTLP/HTTP.

A RoundRobinGroupChat of three AssistantAgents (no tools) talks to any OpenAI-compatible chat endpoint
(e.g. `maslens serve-model --port 0`, which serves the embedded 135M model) until MaxMessageTermination.
AutogenAgentChatInstrumentor produces the spans (team CHAIN, agent AGENT, model-client LLM);
--openai-instrumentor additionally wraps the openai SDK (a second, nested LLM span per call).

    python tests/otel/autogen_run.py --base-url http://127.0.0.1:8088/v1 \\
        --endpoint http://127.0.0.1:4318/v1/traces --dump /tmp/autogen.jsonl

Prints one JSON line: {"trace_ids": [...], "agents": [...], "model_calls": n, "messages": n, ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from otel_common import Pipeline, add_export_args, served_model  # noqa: E402

TASK = "Is 91 a prime number? Explain briefly."

AGENTS = [
    ("Solver", "Solves the task.", "You are Solver. Answer the user's question in one or two short sentences."),
    ("Checker", "Checks the previous answer.",
     "You are Checker. Check the previous answer. Say 'correct' or 'wrong' and why, in one sentence."),
    ("Reporter", "Writes the final answer.",
     "You are Reporter. Give the final answer in one short sentence starting with 'FINAL ANSWER:'."),
]


async def run_team(args: argparse.Namespace) -> dict:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model=args.model,
        base_url=args.base_url,
        api_key="unused",
        model_info={
            "vision": False,
            "function_calling": args.team == "swarm",
            "json_output": False,
            "family": "unknown",
            "structured_output": False,
        },
        max_tokens=args.max_tokens,
        temperature=args.temperature,
    )
    chosen = AGENTS[: args.agents]
    # Swarm: each agent can hand off to the next (a transfer_to_<name> tool; the last to the first).
    handoffs = {
        name: [chosen[(i + 1) % len(chosen)][0]] if args.team == "swarm" else []
        for i, (name, _, _) in enumerate(chosen)
    }
    agents = [
        AssistantAgent(
            name=name,
            description=desc,
            system_message=system,
            model_client=client,
            model_client_stream=args.stream,
            handoffs=handoffs[name] or None,
        )
        for name, desc, system in chosen
    ]
    stop = MaxMessageTermination(args.max_messages)
    if args.team == "selector":
        from autogen_agentchat.teams import SelectorGroupChat

        team = SelectorGroupChat(agents, model_client=client, termination_condition=stop)
    elif args.team == "swarm":
        from autogen_agentchat.teams import Swarm

        team = Swarm(agents, termination_condition=stop)
    else:
        team = RoundRobinGroupChat(agents, termination_condition=stop)
    result = await team.run(task=args.task)
    await client.close()
    names = [a.name for a in agents]
    agent_msgs = [m for m in result.messages if getattr(m, "source", None) in names]
    return {
        "agents": names,
        # AssistantAgent without tools makes exactly one model call per turn; models_usage marks a model reply.
        "model_calls": sum(1 for m in agent_msgs if getattr(m, "models_usage", None) is not None),
        "messages": len(result.messages),
        "stop_reason": result.stop_reason,
        "transcript": [
            {"source": m.source, "content": m.content if isinstance(m.content, str) else str(m.content)}
            for m in result.messages
        ],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8088/v1")
    p.add_argument("--model", help="model name sent to the endpoint (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--agents", type=int, choices=[2, 3], default=3, help="number of agents (default 3)")
    p.add_argument("--max-messages", type=int, default=4,
                   help="MaxMessageTermination, counting the task message (default 4: 3 agent turns)")
    p.add_argument("--max-tokens", type=int, default=48, help="max_tokens per model call (default 48)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--stream", action="store_true", help="model_client_stream=True (streamed completions)")
    p.add_argument("--team", choices=["round_robin", "selector", "swarm"], default="round_robin",
                   help="RoundRobinGroupChat (default), SelectorGroupChat (the model picks each speaker) or Swarm "
                        "(each agent hands off to the next with a transfer_to_<name> tool)")
    p.add_argument("--openai-instrumentor", action="store_true",
                   help="also instrument the openai SDK with OpenInference's OpenAIInstrumentor")
    p.add_argument("--transcript", action="store_true", help="include the message transcript in the summary")
    add_export_args(p, default_service="autogen-agentchat-mas")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)

    pipe = Pipeline(args)
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    AutogenAgentChatInstrumentor().instrument(tracer_provider=pipe.provider)
    if args.openai_instrumentor:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=pipe.provider)

    summary = asyncio.run(run_team(args))
    rc = pipe.finish()
    if not args.transcript:
        summary.pop("transcript")
    spans = pipe.tee.spans
    summary = {
        "trace_ids": pipe.tee.trace_ids,
        "model": args.model,
        **summary,
        "spans": len(spans),
        "llm_spans": sum(1 for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"),
        "exported_spans": pipe.tee.exported_spans,
    }
    print(json.dumps(summary), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
