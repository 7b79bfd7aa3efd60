#!/usr/bin/env python3
"""A real AG2 GroupChat run (classic API, ag2 0.14) traced by AG2's native OpenTelemetry (`autogen.opentelemetry`).

`user` (a UserProxyAgent that executes tools) opens a round-robin GroupChat with `researcher` (an assistant
with the tool `lookup_fact`) and `writer`, run by a `chat_manager`. Spans in the GenAI conventions
(`invoke_agent`, `chat`, `execute_tool`), messages captured. Model: any OpenAI-compatible endpoint
(`tests/otel/scripted_model.py` uses the tools offered).

    python tests/otel/ag2_run.py --base-url http://127.0.0.1:PORT/v1 --dump /tmp/ag2.jsonl

Prints one JSON line: {"trace_ids", "agents", "messages", ...}.
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
    from autogen import AssistantAgent, GroupChat, GroupChatManager, UserProxyAgent
    from autogen.opentelemetry import instrument_agent, instrument_llm_wrapper

    llm_config = {"config_list": [{"model": args.model, "base_url": args.base_url, "api_key": "unused"}],
                  "cache_seed": None}
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    researcher = AssistantAgent("researcher", llm_config=llm_config,
                                system_message="You are researcher. Use lookup_fact, then answer.")
    writer = AssistantAgent("writer", llm_config=llm_config,
                            system_message="You are writer. Give the final answer in one sentence.")

    def lookup_fact(query: str) -> str:
        """Look a fact up in the mission archive."""
        return "Apollo 11 landed on 20 July 1969."

    researcher.register_for_llm(name="lookup_fact", description="Look a fact up.")(lookup_fact)
    user.register_for_execution(name="lookup_fact")(lookup_fact)
    if args.pattern:
        # AG2's newer group API: a Pattern run by initiate_group_chat, traced by instrument_pattern
        # (which instruments the agents and the group chat the pattern makes).
        from autogen.agentchat import initiate_group_chat
        from autogen.agentchat.group.patterns import AutoPattern
        from autogen.opentelemetry import instrument_pattern

        researcher.register_for_execution(name="lookup_fact")(lookup_fact)
        pattern = AutoPattern(initial_agent=researcher, agents=[researcher, writer], user_agent=user,
                              group_manager_args={"llm_config": llm_config})
        instrument_llm_wrapper(tracer_provider=pipe.provider, capture_messages=True)
        instrument_pattern(pattern, tracer_provider=pipe.provider)
        result, _, last = initiate_group_chat(pattern=pattern, messages=args.task, max_rounds=args.max_round)
        return {"agents": ["researcher", "writer"], "messages": len(result.chat_history),
                "speakers": [m.get("name") for m in result.chat_history], "last_agent": last.name}
    chat = GroupChat(agents=[user, researcher, writer], messages=[], max_round=args.max_round,
                     speaker_selection_method=args.selection)
    manager = GroupChatManager(groupchat=chat, llm_config=llm_config)
    instrument_llm_wrapper(tracer_provider=pipe.provider, capture_messages=True)
    for a in (user, researcher, writer, manager):
        instrument_agent(a, tracer_provider=pipe.provider)
    user.initiate_chat(manager, message=args.task)
    return {"agents": ["user", "researcher", "writer"], "messages": len(chat.messages),
            "speakers": [m.get("name") for m in chat.messages]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL")
    p.add_argument("--model", help="model name (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--max-round", type=int, default=5)
    p.add_argument("--pattern", action="store_true",
                   help="AG2's AutoPattern through initiate_group_chat, traced by instrument_pattern")
    p.add_argument("--selection", default="round_robin", choices=["round_robin", "auto"],
                   help="GroupChat speaker selection (auto: the manager's model picks each next speaker)")
    add_export_args(p, default_service="ag2-groupchat")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)
    pipe = Pipeline(args)
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # AG2 prints the conversation on stdout
        summary = run(args, pipe)
    rc = pipe.finish()
    spans = pipe.tee.spans
    summary.update(trace_ids=pipe.tee.trace_ids, spans=len(spans),
                   model_calls=sum(1 for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"))
    print(json.dumps(summary))
    return rc


if __name__ == "__main__":
    sys.exit(main())
