"""Traces from the objects multi-agent frameworks return, without converting files by hand.

Each ``from_*`` function takes the framework's own result object (duck-typed: the framework is
not imported here) and returns a :class:`maslens.Trace` whose steps are the agents' messages in
order, with tool calls and tool results kept. The keyword arguments ``id``, ``task``,
``ground_truth``, ``outcome`` (``"success"``/``"failure"``/``"unknown"``) and ``metadata`` are
set on the trace; the framework's name is recorded in ``metadata["framework"]``.

| framework | object | function |
| --- | --- | --- |
| AG2 (``autogen``) | ``GroupChat``, ``GroupChatManager``, ``ChatResult``, message dicts | :func:`from_ag2` |
| AutoGen AgentChat | ``TaskResult`` (``team.run()``), its ``messages`` | :func:`from_autogen` |
| LangGraph | the final state (``{"messages": [...]}``), or ``stream(stream_mode="updates")`` chunks | :func:`from_langgraph` |
| OpenAI Agents SDK | ``RunResult`` / ``RunResultStreaming`` (handoffs included) | :func:`from_openai_agents` |
| CrewAI | ``CrewOutput`` (``crew.kickoff()``) | :func:`from_crewai` |
| any | OpenAI-style message dicts or SDK message objects | :func:`from_messages` |
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._native import Trace, TraceError

Message = dict[str, Any]


def _get(obj: Any, key: str, default: Any = None) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` otherwise."""
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _plain(obj: Any) -> Any:
    """A JSON-like copy of ``obj``: pydantic models, dataclasses and mappings become dicts."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    for method in ("model_dump", "to_dict", "dict"):
        f = getattr(obj, method, None)
        if callable(f):
            try:
                return _plain(f())
            except TypeError:
                continue
    if hasattr(obj, "__dict__"):
        return {k: _plain(v) for k, v in vars(obj).items() if not k.startswith("_")}
    return str(obj)


def _text(content: Any) -> str:
    """Message content as text: strings as they are, parts joined, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            else:
                t = _get(p, "text")
                parts.append(t if isinstance(t, str) else f"[{_get(p, 'type', type(p).__name__)}]")
        return "\n".join(parts)
    try:
        return json.dumps(_plain(content), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(content)


def _args(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(_plain(arguments), ensure_ascii=False)


def _trace(
    messages: list[Message],
    framework: str,
    *,
    id: str | None,
    task: str | None,
    ground_truth: str | None,
    outcome: str | None,
    metadata: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None = None,
) -> Trace:
    if not messages:
        raise TraceError(f"{framework}: the run holds no messages to make a trace of")
    meta: dict[str, Any] = {"framework": framework, **(extra or {}), **(metadata or {})}
    return Trace.from_messages(
        messages, id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=_plain(meta)
    )


def from_messages(
    messages: Iterable[Any],
    *,
    id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    outcome: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Trace:
    """A trace from OpenAI-style messages: dicts or SDK objects (``ChatCompletionMessage``,
    pydantic models) with ``role``, ``content`` and optionally ``name``, ``tool_calls``,
    ``tool_call_id``. The acting agent is ``name``, else ``role``."""
    msgs = []
    for i, m in enumerate(messages):
        d = _plain(m)
        if not isinstance(d, dict):
            raise TraceError(f"messages[{i}]: expected a message (dict or SDK object), not {type(m).__name__}")
        msgs.append({k: v for k, v in d.items() if v is not None})
    return _trace(msgs, "messages", id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=metadata)


# --- AG2 / AutoGen 0.2 -------------------------------------------------------------------------


def _ag2_messages(raw: Iterable[Any]) -> list[Message]:
    out: list[Message] = []
    for m in raw:
        d = _plain(m)
        if not isinstance(d, dict):
            continue
        name = d.get("name")
        role = d.get("role") or "assistant"
        # AG2 keeps tool results as one message with `tool_responses`: one tool message each.
        responses = d.get("tool_responses")
        if isinstance(responses, list) and responses:
            for r in responses:
                out.append(
                    {
                        "role": "tool",
                        "name": name or "tool",
                        "tool_call_id": r.get("tool_call_id"),
                        "content": _text(r.get("content")),
                    }
                )
            continue
        msg: Message = {"role": role, "content": _text(d.get("content"))}
        if name:
            msg["name"] = name
        calls = d.get("tool_calls") or ([{"id": None, "function": d["function_call"]}] if d.get("function_call") else [])
        if calls:
            msg["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {"name": _get(c.get("function"), "name"), "arguments": _args(_get(c.get("function"), "arguments"))},
                }
                for c in calls
            ]
        if d.get("tool_call_id"):
            msg["tool_call_id"] = d["tool_call_id"]
        out.append(msg)
    return out


def from_ag2(
    run: Any,
    *,
    id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    outcome: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Trace:
    """A trace from an AG2 (AutoGen 0.2 API) run: a ``GroupChat`` (its ``messages``), a
    ``GroupChatManager`` (its ``groupchat``), a ``ChatResult`` (its ``chat_history``), or the
    message dicts themselves. Each message's ``name`` is the acting agent."""
    raw: Any
    extra: dict[str, Any] = {}
    if _get(run, "groupchat") is not None:  # GroupChatManager
        run = run.groupchat
    if isinstance(run, (list, tuple)):
        raw = run
    elif _get(run, "chat_history") is not None:  # ChatResult
        raw = run.chat_history
        if _get(run, "summary"):
            extra["summary"] = _text(run.summary)
    elif _get(run, "messages") is not None:  # GroupChat
        raw = run.messages
        agents = _get(run, "agents")
        if agents:
            extra["agents"] = [_get(a, "name") for a in agents]
    else:
        raise TraceError(
            f"from_ag2: expected a GroupChat, GroupChatManager, ChatResult or messages, not {type(run).__name__}"
        )
    msgs = _ag2_messages(raw)
    return _trace(msgs, "ag2", id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=metadata, extra=extra)


# --- AutoGen AgentChat (0.4+) ------------------------------------------------------------------


def _autogen_messages(items: Iterable[Any]) -> list[Message]:
    out: list[Message] = []
    for m in items:
        kind = type(m).__name__
        source = str(_get(m, "source", "") or "")
        role = "user" if source == "user" else "assistant"
        if kind.endswith("StreamingChunkEvent"):
            continue  # the full message follows
        content = _get(m, "content")
        if kind == "ToolCallRequestEvent":
            out.append(
                {
                    "role": "assistant",
                    "name": source,
                    "content": "",
                    "tool_calls": [
                        {"id": _get(c, "id"), "type": "function", "function": {"name": _get(c, "name"), "arguments": _args(_get(c, "arguments"))}}
                        for c in content or []
                    ],
                }
            )
        elif kind == "ToolCallExecutionEvent":
            for r in content or []:
                out.append(
                    {
                        "role": "tool",
                        "name": str(_get(r, "name") or "tool"),
                        "tool_call_id": _get(r, "call_id"),
                        "content": _text(_get(r, "content")),
                    }
                )
        else:
            to_text = getattr(m, "to_text", None)
            text = to_text() if callable(to_text) else _text(content)
            msg: Message = {"role": role, "name": source or role, "content": text}
            if kind == "HandoffMessage":
                msg["content"] = f"[handoff to {_get(m, 'target')}] {text}"
            out.append(msg)
    return out


def from_autogen(
    result: Any,
    *,
    id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    outcome: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Trace:
    """A trace from AutoGen AgentChat: a ``TaskResult`` (``await team.run(task=...)``) or its
    ``messages``. Text, handoff and stop messages are steps of their ``source``; tool calls and
    tool results are kept; streaming chunks are skipped (the full message follows)."""
    items = _get(result, "messages")
    extra: dict[str, Any] = {}
    if items is None:
        if isinstance(result, (list, tuple)):
            items = result
        else:
            raise TraceError(f"from_autogen: expected a TaskResult or its messages, not {type(result).__name__}")
    else:
        stop = _get(result, "stop_reason")
        if stop:
            extra["stop_reason"] = str(stop)
    msgs = _autogen_messages(items)
    if task is None:
        first = next((m for m in msgs if m.get("name") == "user"), None)
        task = first["content"] if first else None
    return _trace(msgs, "autogen-agentchat", id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=metadata, extra=extra)


# --- LangGraph / LangChain ---------------------------------------------------------------------

_LC_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system", "function": "tool"}


def _langchain_message(m: Any, node: str | None) -> Message:
    kind = str(_get(m, "type", "ai"))
    role = _LC_ROLES.get(kind, "assistant")
    msg: Message = {"role": role, "content": _text(_get(m, "content"))}
    name = _get(m, "name") or (node if role == "assistant" else None)
    if name:
        msg["name"] = name
    calls = _get(m, "tool_calls") or []
    if calls:
        msg["tool_calls"] = [
            {"id": _get(c, "id"), "type": "function", "function": {"name": _get(c, "name"), "arguments": _args(_get(c, "args"))}}
            for c in calls
        ]
    if role == "tool" and _get(m, "tool_call_id"):
        msg["tool_call_id"] = _get(m, "tool_call_id")
    return msg


def from_langgraph(
    state: Any,
    *,
    id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    outcome: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    messages_key: str = "messages",
) -> Trace:
    """A trace from a LangGraph run: the final state (``graph.invoke(...)``: a dict whose
    ``messages`` are LangChain messages) or the list of chunks of ``graph.stream(...,
    stream_mode="updates")``. From the state, an AI message's agent is its ``name`` (set it, e.g.
    ``create_react_agent(name=...)``), else ``assistant``; from updates, the node that returned
    it, which attributes every message even when names are not set."""
    msgs: list[Message] = []
    if isinstance(state, Mapping) and messages_key in state:
        msgs = [_langchain_message(m, None) for m in state[messages_key]]
    elif isinstance(state, (list, tuple)) and state and all(isinstance(c, Mapping) for c in state) and not any(
        "role" in c or "content" in c for c in state
    ):
        for chunk in state:  # stream_mode="updates": {node: {"messages": [...]}}
            for node, update in chunk.items():
                if isinstance(update, Mapping) and messages_key in update:
                    new = update[messages_key]
                    for m in new if isinstance(new, (list, tuple)) else [new]:
                        msgs.append(_langchain_message(m, str(node)))
    elif isinstance(state, (list, tuple)):
        msgs = [_langchain_message(m, None) for m in state]
    else:
        raise TraceError(
            f"from_langgraph: expected a state with {messages_key!r}, a list of messages, or stream updates, "
            f"not {type(state).__name__}"
        )
    return _trace(msgs, "langgraph", id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=metadata)


# --- OpenAI Agents SDK -------------------------------------------------------------------------


def _output_text(raw: Any) -> str:
    parts = _get(raw, "content") or []
    texts = [_get(p, "text") or _get(p, "refusal") or "" for p in parts]
    return "\n".join(t for t in texts if t)


def from_openai_agents(
    result: Any,
    *,
    id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    outcome: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Trace:
    """A trace from an OpenAI Agents SDK run (``Runner.run(...)``'s ``RunResult``): the input,
    then each new item under the agent that produced it: messages, tool calls and their outputs,
    and handoffs (a handoff call by the agent that hands off, its output naming source and
    target). ``metadata["handoffs"]`` lists them."""
    items = _get(result, "new_items")
    if items is None:
        raise TraceError(f"from_openai_agents: expected a RunResult, not {type(result).__name__}")
    msgs: list[Message] = []
    given = _get(result, "input")
    if isinstance(given, str):
        msgs.append({"role": "user", "name": "user", "content": given})
        task = task if task is not None else given
    elif isinstance(given, (list, tuple)):
        for g in given:
            d = _plain(g)
            if isinstance(d, dict) and d.get("role") in ("user", "system", "developer"):
                msgs.append({"role": "user" if d["role"] == "user" else "system", "content": _text(d.get("content"))})
    handoffs: list[dict[str, str]] = []
    tools: dict[str, str] = {}
    for it in items:
        kind = type(it).__name__
        agent = str(_get(_get(it, "agent"), "name", "") or "assistant")
        raw = _get(it, "raw_item")
        if kind == "MessageOutputItem":
            msgs.append({"role": "assistant", "name": agent, "content": _output_text(raw)})
        elif kind in ("ToolCallItem", "HandoffCallItem"):
            call_id = str(_get(raw, "call_id") or _get(raw, "id") or "")
            name = str(_get(raw, "name") or _get(raw, "type") or "tool")
            tools[call_id] = name
            msgs.append(
                {
                    "role": "assistant",
                    "name": agent,
                    "content": "",
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": _args(_get(raw, "arguments") or "")}}],
                }
            )
        elif kind == "ToolCallOutputItem":
            call_id = str(_get(raw, "call_id") or "")
            msgs.append({"role": "tool", "name": tools.get(call_id, "tool"), "tool_call_id": call_id, "content": _text(_get(it, "output"))})
        elif kind == "HandoffOutputItem":
            src = str(_get(_get(it, "source_agent"), "name", agent))
            dst = str(_get(_get(it, "target_agent"), "name", ""))
            handoffs.append({"from": src, "to": dst})
            call_id = str(_get(raw, "call_id") or "")
            msgs.append({"role": "tool", "name": tools.get(call_id, "handoff"), "tool_call_id": call_id, "content": f"handoff from {src} to {dst}"})
        elif kind == "ReasoningItem":
            summary = _get(raw, "summary") or []
            text = "\n".join(str(_get(s, "text", "")) for s in summary)
            if text:
                msgs.append({"role": "assistant", "name": agent, "content": f"[reasoning] {text}"})
    extra: dict[str, Any] = {"handoffs": handoffs}
    last = _get(_get(result, "last_agent"), "name")
    if last:
        extra["last_agent"] = str(last)
    final = _get(result, "final_output")
    if final is not None:
        extra["final_output"] = _text(final)
    return _trace(msgs, "openai-agents", id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=metadata, extra=extra)


# --- CrewAI ------------------------------------------------------------------------------------


def from_crewai(
    output: Any,
    *,
    id: str | None = None,
    task: str | None = None,
    ground_truth: str | None = None,
    outcome: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Trace:
    """A trace from a CrewAI run (``crew.kickoff()``'s ``CrewOutput``): for each task, the
    agent's conversation when the task output keeps it (``TaskOutput.messages``: the prompts the
    crew sent as steps of ``Crew``, the agent's answers as its steps; the task's final output is
    added when the conversation holds no answer, as CrewAI 1.x keeps only the prompts of an agent
    that answered at once), else the task's description (by ``Crew``) and the agent's output."""
    tasks: Sequence[Any] | None = _get(output, "tasks_output")
    if tasks is None:
        raise TraceError(f"from_crewai: expected a CrewOutput, not {type(output).__name__}")
    msgs: list[Message] = []
    for t in tasks:
        agent = str(_get(t, "agent") or "agent")
        conversation = _get(t, "messages") or []
        if conversation:
            answered = False
            for m in conversation:
                role = str(_get(m, "role") or "assistant")
                if role == "system":
                    continue  # the agent's role prompt, the same in every task
                answered = answered or role == "assistant"
                name = agent if role == "assistant" else "Crew"
                msgs.append({"role": "assistant" if role == "assistant" else "user", "name": name, "content": _text(_get(m, "content"))})
            if not answered:
                # CrewAI 1.x keeps the prompts but not the answer when the agent answered at once.
                msgs.append({"role": "assistant", "name": agent, "content": _text(_get(t, "raw"))})
        else:
            msgs.append({"role": "user", "name": "Crew", "content": _text(_get(t, "description"))})
            msgs.append({"role": "assistant", "name": agent, "content": _text(_get(t, "raw"))})
    if task is None and tasks:
        task = _text(_get(tasks[0], "description")) or None
    extra = {"final_output": _text(_get(output, "raw"))}
    return _trace(msgs, "crewai", id=id, task=task, ground_truth=ground_truth, outcome=outcome, metadata=metadata, extra=extra)
