#!/usr/bin/env python3
"""A real LangGraph supervisor run, traced by OpenInference's LangChainInstrumentor, exported over OTLP/HTTP.

A StateGraph with a `supervisor` node and two worker nodes (`research_agent`, `writer_agent`); every node
calls ChatOpenAI against any OpenAI-compatible endpoint (e.g. `maslens serve-model --port 0`). Routing is
decided by code in a fixed order (supervisor -> research_agent -> supervisor -> writer_agent -> supervisor
-> END), so the model needs no tool calling. Worker names end in "_agent" as in LangGraph's supervisor
examples; the OpenInference instrumentor marks a run whose name contains "agent" as an AGENT span, so the
supervisor node shows up as a CHAIN span: both are kept that way on purpose.

    python tests/otel/langgraph_run.py --base-url http://127.0.0.1:8088/v1 \\
        --endpoint http://127.0.0.1:4318/v1/traces --dump /tmp/langgraph.jsonl

Prints one JSON line: {"trace_ids": [...], "agents": [...], "model_calls": n, ...}.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import sys
import uuid
from typing import Annotated, TypedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from otel_common import Pipeline, add_export_args, served_model  # noqa: E402

TASK = "Which is larger, 2 to the power 10 or 10 to the power 3? Give the answer with one reason."

SYSTEM = {
    "supervisor": "You are the supervisor of a team with a research_agent and a writer_agent. "
    "In one short sentence, say what the next worker should do, or say FINISH when the answer is ready.",
    "research_agent": "You are research_agent. Work out the facts needed for the task in one or two short sentences.",
    "writer_agent": "You are writer_agent. Write the final answer in one short sentence starting with 'FINAL ANSWER:'.",
}
# Fixed routing: who acts after the supervisor's n-th turn.
ORDER = ["research_agent", "writer_agent"]


class State(TypedDict):
    messages: Annotated[list, operator.add]
    supervisor_turns: int
    model_calls: Annotated[int, operator.add]


def build_graph(llm, react: bool = False):
    from langchain_core.messages import AIMessage, SystemMessage
    from langgraph.graph import END, START, StateGraph

    def call(name: str, state: State) -> dict:
        reply = llm.invoke([SystemMessage(content=SYSTEM[name]), *state["messages"]])
        msg = AIMessage(content=reply.content, name=name, response_metadata=reply.response_metadata)
        return {"messages": [msg], "model_calls": 1}

    workers = {}
    if react:
        # Each worker a prebuilt ReAct agent (a subgraph whose own node is named "agent"; the
        # research agent has the tool lookup_fact), run inside the worker's node.
        from langchain_core.tools import tool
        from langgraph.prebuilt import create_react_agent

        @tool
        def lookup_fact(query: str) -> str:
            """Look a fact up."""
            return "2 to the power 10 is 1024; 10 to the power 3 is 1000."

        for name, tools in (("research_agent", [lookup_fact]), ("writer_agent", [])):
            workers[name] = create_react_agent(llm, tools, prompt=SYSTEM[name], name=name)

    def work(name: str, state: State) -> dict:
        if name not in workers:
            return call(name, state)
        out = workers[name].invoke({"messages": state["messages"]})["messages"][len(state["messages"]):]
        calls = sum(1 for m in out if isinstance(m, AIMessage))
        return {"messages": [*out[:-1], AIMessage(content=out[-1].content, name=name)], "model_calls": calls}

    def supervisor(state: State) -> dict:
        return {**call("supervisor", state), "supervisor_turns": state.get("supervisor_turns", 0) + 1}

    def route(state: State) -> str:
        turn = state["supervisor_turns"]  # 1 after the first supervisor turn
        return ORDER[turn - 1] if turn <= len(ORDER) else END

    g = StateGraph(State)
    g.add_node("supervisor", supervisor)
    g.add_node("research_agent", lambda s: work("research_agent", s))
    g.add_node("writer_agent", lambda s: work("writer_agent", s))
    g.add_edge(START, "supervisor")
    g.add_conditional_edges("supervisor", route, {**{n: n for n in ORDER}, END: END})
    for n in ORDER:
        g.add_edge(n, "supervisor")
    return g.compile()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8088/v1")
    p.add_argument("--model", help="model name sent to the endpoint (default: the first of GET BASE_URL/models)")
    p.add_argument("--task", default=TASK)
    p.add_argument("--max-tokens", type=int, default=48, help="max_tokens per model call (default 48)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--stream", action="store_true", help="streamed completions (ChatOpenAI streaming=True)")
    p.add_argument("--thread-id", help="LangGraph thread_id (-> OpenInference session.id; default a fresh UUID)")
    p.add_argument("--openai-instrumentor", action="store_true",
                   help="also instrument the openai SDK with OpenInference's OpenAIInstrumentor")
    p.add_argument("--transcript", action="store_true", help="include the message transcript in the summary")
    p.add_argument("--react", action="store_true",
                   help="workers are prebuilt ReAct agents (create_react_agent subgraphs; research_agent has a tool)")
    add_export_args(p, default_service="langgraph-supervisor-mas")
    args = p.parse_args()
    if not args.model:
        args.model = served_model(args.base_url)
    thread_id = args.thread_id or str(uuid.uuid4())

    pipe = Pipeline(args)
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=pipe.provider)
    if args.openai_instrumentor:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=pipe.provider)

    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=args.model,
        base_url=args.base_url,
        api_key="unused",
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        streaming=args.stream,
        max_retries=0,
    )
    graph = build_graph(llm, react=args.react)
    final = graph.invoke(
        {"messages": [HumanMessage(content=args.task, name="user")], "supervisor_turns": 0, "model_calls": 0},
        config={"configurable": {"thread_id": thread_id}, "metadata": {"thread_id": thread_id}},
    )
    rc = pipe.finish()
    spans = pipe.tee.spans
    summary = {
        "trace_ids": pipe.tee.trace_ids,
        "model": args.model,
        "thread_id": thread_id,
        "agents": ["supervisor", *ORDER],
        "model_calls": final["model_calls"],
        "messages": len(final["messages"]),
        "spans": len(spans),
        "llm_spans": sum(1 for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"),
        "exported_spans": pipe.tee.exported_spans,
    }
    if args.transcript:
        summary["transcript"] = [
            {"name": getattr(m, "name", None) or m.type, "content": m.content} for m in final["messages"]
        ]
    print(json.dumps(summary), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
