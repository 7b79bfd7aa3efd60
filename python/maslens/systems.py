"""Systems the improvement loop can run (docs/improve.md): the protocol, and adapters that expose
the agents' system prompts of real frameworks' systems.

A system maps agent names to their system prompts (``prompts``) and runs one task with a given
set of prompts (``run``), returning the run's maslens trace and its final output. maslens'
improvement loop (:func:`maslens.improve`) changes only the prompts it passes to ``run``: the
system must build its agents from them on every call.

A system that can also go on from a message history (``resume``, the :class:`Resumable`
protocol) lets the loop verify a proposal by replay: a failed run re-run from its decisive step
with the original and with the changed prompts (MASIF's counterfactual replay).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import os
import threading
import uuid
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from . import _native
from ._native import Trace, TraceError

_T = TypeVar("_T")


@dataclass(frozen=True)
class Run:
    """One run of a system on one task: its trace (the steps the agents took) and its final
    output (what the metric scores)."""

    trace: Trace
    output: str
    #: Anything the system wants to keep with the run (token counts, the framework's result).
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


@runtime_checkable
class System(Protocol):
    """A multi-agent system whose agents' system prompts the loop may change."""

    @property
    def prompts(self) -> Mapping[str, str]:
        """Agent name -> its system prompt, as the system ships (an attribute holding a dict will do)."""
        ...

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        """Run ``task`` with these prompts (every agent of ``self.prompts`` has one)."""
        ...


#: One message of a history handed to :meth:`Resumable.resume`: ``role`` (``user`` or
#: ``assistant``), ``name`` (the agent, or ``user``) and ``content``.
Message = dict[str, str]


@runtime_checkable
class Resumable(Protocol):
    """A system that can go on from a message history (for replay from a decisive step). A
    system with a ``resume`` method that cannot always resume says so with ``resumable = False``
    (:func:`can_resume`)."""

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        """Go on with ``task`` after ``history`` (the trace's steps before the replayed one, the
        task first where the trace starts with it), ``agent`` taking the next turn, every agent with its prompt in ``prompts``.
        Raise ``ValueError`` when this history cannot be resumed (the run is then not replayed)."""
        ...


def can_resume(system: object) -> bool:
    """Whether ``system`` can go on from a message history."""
    return isinstance(system, Resumable) and bool(getattr(system, "resumable", True))


def history_of(trace: Trace, step: int) -> list[Message]:
    """The steps of ``trace`` before ``step`` as a message history."""
    out: list[Message] = []
    for s in trace.steps[:step]:
        agent = str(s.get("agent") or s.get("speaker") or "assistant")
        out.append({"role": "user" if agent == "user" else "assistant", "name": agent, "content": str(s.get("content") or "")})
    return out


def check_prompts(system: System, prompts: Mapping[str, str]) -> None:
    """Raise ``ValueError`` unless ``prompts`` names exactly the agents of ``system.prompts``."""
    missing = [name for name in system.prompts if name not in prompts]
    if missing:
        raise ValueError(f"prompts lack agent(s) {', '.join(map(repr, missing))} of the system")
    unknown = [name for name in prompts if name not in system.prompts]
    if unknown:
        raise ValueError(f"prompts name unknown agent(s) {', '.join(map(repr, unknown))} (the system has {list(system.prompts)})")


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _run_async(coro: Coroutine[Any, Any, _T]) -> _T:
    """Await ``coro`` on maslens' background event loop (one thread, kept for the process):
    model clients a system keeps across runs stay bound to one loop, whether or not the caller
    runs a loop of its own (``asyncio.run`` per run breaks them on the second run)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="maslens-systems", daemon=True).start()
        loop = _loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


class FunctionSystem:
    """A system from a plain callable ``fn(task, prompts) -> Run``; with ``resume_fn(task,
    prompts, history, agent) -> Run`` it can also be replayed (:class:`Resumable`)."""

    def __init__(
        self,
        fn: Callable[[str, Mapping[str, str]], Run],
        prompts: Mapping[str, str],
        resume_fn: Callable[[str, Mapping[str, str], Sequence[Message], str], Run] | None = None,
    ) -> None:
        self.fn = fn
        self.prompts: Mapping[str, str] = dict(prompts)
        self.resume_fn = resume_fn
        self.resumable = resume_fn is not None

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        check_prompts(self, prompts)
        return self.fn(task, prompts)

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        if self.resume_fn is None:
            raise ValueError("this FunctionSystem has no resume_fn")
        check_prompts(self, prompts)
        return self.resume_fn(task, prompts, history, agent)


class AgentChatSystem:
    """An AutoGen AgentChat team, built by ``make_team(prompts)`` on every run (e.g.
    ``RoundRobinGroupChat([AssistantAgent(name, model_client=..., system_message=prompts[name]), ...])``).
    Teams run on one background event loop, so a model client may be shared across runs."""

    def __init__(self, make_team: Callable[[Mapping[str, str]], Any], prompts: Mapping[str, str], *, outcome: str = "unknown") -> None:
        self.make_team = make_team
        self.prompts: Mapping[str, str] = dict(prompts)
        self.outcome = outcome
        #: The team the last run built (for inspection).
        self.last_team: Any = None

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        check_prompts(self, prompts)
        from .adapters import from_autogen

        async def go() -> Any:
            self.last_team = self.make_team(dict(prompts))
            return await self.last_team.run(task=task)

        result = _run_async(go())
        messages = list(result.messages)
        output = _message_text(messages[-1]) if messages else ""
        return Run(from_autogen(result, outcome=self.outcome), output, {"result": result})

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        """Go on after ``history`` with ``agent`` speaking next: the team is built with
        ``prompts``, the history is its task (one ``TextMessage`` per message, from the agent that
        wrote it, so every participant sees it as it happened), and a round-robin team's next
        speaker is set to ``agent`` through the team's own state (``save_state`` /
        ``load_state``). Other teams (selector, swarm, Magentic-One) choose the next speaker
        themselves: when their choice is not ``agent`` this raises ``ValueError`` and the run is
        not replayed. The trace holds the history and the new messages."""
        check_prompts(self, prompts)
        from autogen_agentchat.messages import BaseChatMessage, TextMessage

        from .adapters import from_autogen

        if not history:
            raise ValueError("nothing to resume from: the history is empty")
        task_messages = [TextMessage(content=m["content"], source=m.get("name") or m["role"]) for m in history]

        async def go() -> Any:
            team = self.make_team(dict(prompts))
            self.last_team = team
            await _next_speaker(team, agent)
            return await team.run(task=task_messages)

        result = _run_async(go())
        messages = list(result.messages)
        new = [m for m in messages[len(task_messages) :] if isinstance(m, BaseChatMessage)]
        if not new:
            raise ValueError("the team stopped before anyone spoke after the history (its termination condition counts the history's messages too)")
        if new[0].source != agent:
            raise ValueError(f"the team chose {new[0].source!r} to speak after the history, not {agent!r}")
        output = _message_text(messages[-1])
        return Run(from_autogen(result, task=task, outcome=self.outcome), output, {"result": result})


async def _next_speaker(team: Any, agent: str) -> None:
    """Make ``agent`` the next speaker of a round-robin ``team`` through its saved state (the
    participants' states are in their order, the manager's last); other teams are left as
    they are (their manager's state has no ``next_speaker_index``)."""
    state = dict(await team.save_state())
    agents = dict(state.get("agent_states", {}))
    *names, manager_name = list(agents) or [""]
    if agent not in names:
        raise ValueError(f"the team has no participant named {agent!r} (it has {names})")
    manager = dict(agents[manager_name])
    if "next_speaker_index" in manager:
        manager["next_speaker_index"] = names.index(agent)
        agents[manager_name] = manager
        state["agent_states"] = agents
        await team.load_state(state)


def _message_text(message: Any) -> str:
    to_text = getattr(message, "to_text", None)
    return str(to_text() if callable(to_text) else getattr(message, "content", ""))


class OpenAIAgentsSystem:
    """An OpenAI Agents SDK system: ``make_agent(prompts)`` builds the starting ``Agent`` (its
    agents' ``instructions=prompts[name]``, handoffs included) on every run. An SDK error
    (``MaxTurnsExceeded``, ...) ends the run with output ``""``, ``extra["error"]`` and the trace
    of what ran. Runs go on one background event loop, so a model client may be shared across runs."""

    def __init__(
        self, make_agent: Callable[[Mapping[str, str]], Any], prompts: Mapping[str, str], *, max_turns: int = 10, run_config: Any = None
    ) -> None:
        self.make_agent = make_agent
        self.prompts: Mapping[str, str] = dict(prompts)
        self.max_turns = max_turns
        self.run_config = run_config
        #: The starting agent the last run built (for inspection).
        self.last_agent: Any = None

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        check_prompts(self, prompts)
        from agents import Runner
        from agents.exceptions import AgentsException

        from .adapters import from_openai_agents

        self.last_agent = agent = self.make_agent(dict(prompts))
        try:
            result = _run_async(Runner.run(agent, task, max_turns=self.max_turns, run_config=self.run_config))
        except AgentsException as e:
            error = f"{type(e).__name__}: {e}"
            return Run(_failed_trace(e.run_data, task, error), "", {"error": error, "exception": e})
        return Run(from_openai_agents(result), str(result.final_output), {"result": result})

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        """Start the agent named ``agent`` (the starting agent or one reachable by handoffs)
        with ``history`` as the run's input items; the trace holds the task and the new items."""
        check_prompts(self, prompts)
        from agents import Runner
        from agents.exceptions import AgentsException

        from .adapters import from_openai_agents

        start = _find_agent(self.make_agent(dict(prompts)), agent)
        items: Any = [{"role": m["role"], "content": m["content"]} for m in history]  # the SDK's easy input messages
        try:
            result = _run_async(Runner.run(start, items, max_turns=self.max_turns, run_config=self.run_config))
        except AgentsException as e:
            error = f"{type(e).__name__}: {e}"
            return Run(_failed_trace(None, task, error), "", {"error": error, "exception": e})
        return Run(from_openai_agents(result, task=task), str(result.final_output), {"result": result})


def _find_agent(start: Any, name: str) -> Any:
    """The agent named ``name`` among ``start`` and the agents reachable by its handoffs."""
    seen: set[int] = set()
    todo = [start]
    while todo:
        a = todo.pop()
        if id(a) in seen:
            continue
        seen.add(id(a))
        if getattr(a, "name", None) == name:
            return a
        todo.extend(h for h in getattr(a, "handoffs", []) or [] if hasattr(h, "handoffs"))
    raise ValueError(f"no agent named {name!r} is reachable from the starting agent by handoffs")


def _failed_trace(run_data: Any, task: str, error: str) -> Trace:
    """The trace of an Agents SDK run that raised: from its ``run_data`` when it has one, else the task alone."""
    from .adapters import from_openai_agents

    meta = {"error": error}
    if run_data is not None:
        try:
            return from_openai_agents(run_data, task=task, outcome="failure", metadata=meta)
        except TraceError:
            pass
    user = {"role": "user", "name": "user", "content": task}
    return Trace.from_messages([user], task=task, outcome="failure", metadata={"framework": "openai-agents", **meta})


class LangGraphSystem:
    """A LangGraph graph of prompted nodes, compiled by ``make_graph(prompts)`` on every run (each
    node calling its model with ``prompts[node]`` as the system message). The run streams the graph
    (``stream_mode="updates"``), so every message is attributed to the node that returned it; the
    output is the last message's text."""

    def __init__(
        self, make_graph: Callable[[Mapping[str, str]], Any], prompts: Mapping[str, str], *, messages_key: str = "messages", outcome: str = "unknown"
    ) -> None:
        self.make_graph = make_graph
        self.prompts: Mapping[str, str] = dict(prompts)
        self.messages_key = messages_key
        self.outcome = outcome

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        check_prompts(self, prompts)
        from .adapters import from_langgraph

        graph = self.make_graph(dict(prompts))
        chunks = list(graph.stream({self.messages_key: [("user", task)]}, stream_mode="updates"))
        trace = from_langgraph(chunks, task=task, outcome=self.outcome, messages_key=self.messages_key)
        steps = trace.steps
        return Run(trace, str(steps[-1]["content"]) if steps else "", {"updates": chunks})

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        """Go on after ``history`` at the node ``agent``. When ``START`` leads to ``agent`` the
        graph simply runs with the history as its messages; otherwise a copy of the compiled graph
        with an in-memory checkpointer gets the history as the state written by a node with an edge
        into ``agent`` (the last such node of the history, else the first in the graph), and goes
        on from there (LangGraph's ``update_state(..., as_node=...)``). When the graph then runs
        another node first (a conditional edge chose otherwise), this raises ``ValueError`` and
        the run is not replayed. The trace holds the history's agent messages and the new ones."""
        check_prompts(self, prompts)
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.memory import InMemorySaver

        from .adapters import from_langgraph

        graph = self.make_graph(dict(prompts))
        edges = graph.get_graph().edges
        preds = [e.source for e in edges if e.target == agent]
        if not preds:
            nodes = sorted({e.target for e in edges} - {"__end__"})
            raise ValueError(f"the graph has no node {agent!r} that an edge leads to (its nodes: {nodes})")
        msgs: list[Any] = [HumanMessage(content=m["content"]) if m["role"] == "user" else AIMessage(content=m["content"], name=m.get("name")) for m in history]
        if not history or history[0]["role"] != "user":
            msgs.insert(0, HumanMessage(content=task))
        if "__start__" in preds:
            chunks = list(graph.stream({self.messages_key: msgs}, stream_mode="updates"))
        else:
            spoke = [m.get("name") for m in history]
            pred = next((n for n in reversed(spoke) if n in preds), preds[0])
            saved = graph.copy({"checkpointer": InMemorySaver()})
            config: Any = {"configurable": {"thread_id": "maslens-resume"}}
            saved.update_state(config, {self.messages_key: msgs}, as_node=pred)
            chunks = list(saved.stream(None, config, stream_mode="updates"))
        ran = [node for chunk in chunks for node in chunk]
        if not ran or ran[0] != agent:
            raise ValueError(f"the graph ran {ran[0] if ran else 'nothing'!r} after the history, not {agent!r}")
        before = [{m["name"]: {self.messages_key: [AIMessage(content=m["content"], name=m["name"])]}} for m in history if m["role"] != "user" and m.get("name")]
        trace = from_langgraph(before + chunks, task=task, outcome=self.outcome, messages_key=self.messages_key)
        steps = trace.steps
        return Run(trace, str(steps[-1]["content"]) if steps else "", {"updates": chunks})


class CrewAISystem:
    """A CrewAI crew, built by ``make_crew(prompts)`` on every run; the prompt of an agent is what
    the factory makes of ``prompts[role]`` (its ``backstory``, say). The task goes to
    ``crew.kickoff(inputs={"task": task})``, so the crew's task descriptions name ``{task}``; the
    output is the crew's final output."""

    def __init__(self, make_crew: Callable[[Mapping[str, str]], Any], prompts: Mapping[str, str], *, outcome: str = "unknown") -> None:
        self.make_crew = make_crew
        self.prompts: Mapping[str, str] = dict(prompts)
        self.outcome = outcome

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        check_prompts(self, prompts)
        from .adapters import from_crewai

        output = self.make_crew(dict(prompts)).kickoff(inputs={"task": task})
        return Run(from_crewai(output, task=task, outcome=self.outcome), str(getattr(output, "raw", "")), {"result": output})

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        """Go on after ``history`` as CrewAI resumes a crew from a checkpoint: the tasks whose
        agents answered in the history keep those answers as their outputs (the context of the
        tasks after them), and the crew runs from the first task left, which must be
        ``agent``'s. The history's answers are read in task order, an agent's consecutive
        answers as one task (the last is its output), so a sequential crew resumes; a
        hierarchical crew, or one with two tasks in a row for one agent, raises ``ValueError``."""
        check_prompts(self, prompts)
        from .adapters import from_crewai

        # CrewAI needs openai<3 and lives in its own venv (docs/improve.md): imported by name.
        task_output: Any = importlib.import_module("crewai.tasks.task_output").TaskOutput
        crew = self.make_crew(dict(prompts))
        roles = _crew_task_roles(crew)
        done = _crew_outputs(roles, history)
        if len(done) == len(roles):
            raise ValueError("the history answers every task of the crew: nothing is left to run")
        if roles[len(done)] != agent:
            raise ValueError(f"the crew's next task after the history is {roles[len(done)]!r}'s, not {agent!r}'s")
        for t, raw in zip(crew.tasks, done):
            t.output = task_output(description=str(t.description), agent=t.agent.role, raw=raw)
        # The tasks with an output are skipped, their outputs passed on as context (CrewAI's
        # resume from a checkpoint: Crew._get_execution_start_index).
        crew.checkpoint_kickoff_event_id = f"maslens-resume-{uuid.uuid4()}"
        output = crew.kickoff(inputs={"task": task})
        return Run(from_crewai(output, task=task, outcome=self.outcome), str(getattr(output, "raw", "")), {"result": output})


def _crew_task_roles(crew: Any) -> list[str]:
    """The role of each task's agent, in order; ``ValueError`` where a resume could not tell the
    tasks apart (a hierarchical crew, a task without agent, two tasks in a row for one agent)."""
    if "hierarchical" in str(getattr(crew, "process", "")):
        raise ValueError("a hierarchical crew's manager chooses who works next: only a sequential crew resumes")
    roles: list[str] = []
    for i, t in enumerate(crew.tasks):
        if t.agent is None:
            raise ValueError(f"task {i + 1} of the crew has no agent")
        if roles and roles[-1] == t.agent.role:
            raise ValueError(f"tasks {i} and {i + 1} of the crew are both {t.agent.role!r}'s: the history cannot say where one ends")
        roles.append(str(t.agent.role))
    return roles


def _crew_outputs(roles: Sequence[str], history: Sequence[Message]) -> list[str]:
    """The outputs of the tasks the history answered: the agents' answers in task order (the
    crew's own prompts and the user's messages are left out), an agent's consecutive answers
    one task, the last its output."""
    answers = [m for m in history if m.get("name") in roles and m.get("role") != "user"]
    outputs: list[str] = []
    for i, m in enumerate(answers):
        if i > 0 and answers[i - 1]["name"] == m["name"]:
            outputs[-1] = str(m["content"])
            continue
        if len(outputs) == len(roles) or roles[len(outputs)] != m["name"]:
            expected = roles[len(outputs)] if len(outputs) < len(roles) else "no one (every task answered)"
            raise ValueError(f"the history's answers do not follow the crew's tasks: {m['name']!r} answered where {expected!r} works")
        outputs.append(str(m["content"]))
    return outputs


class DebateSystem:
    """maslens' own debate runtime (the credit paper's setting, docs/credit.md) behind the system
    protocol: the roles of a debate configuration (TOML, as ``maslens optimize`` takes it) are the
    agents, their prompts what the loop may change; the aggregators keep the configuration's
    prompts. A task is a multiple-choice question as :meth:`task` writes it (the question, then
    lines ``A) ...``); the output is the final answer's letter (``""`` when none). It resumes from
    a history: the recorded turns are kept and the rest are asked for."""

    def __init__(self, config: str | os.PathLike[str], model: Any = None, *, seed: int = 0, **llm: Any) -> None:
        from ._api import Model

        # A path (one line), or the TOML text itself.
        self.config = Path(config).read_text() if isinstance(config, os.PathLike) or "\n" not in config else config
        self.model = model if isinstance(model, Model) else Model(model, **llm)
        self.prompts: Mapping[str, str] = dict(_native.debate_prompts(self.config))
        self.seed = seed
        self._answers: dict[str, str] = {}

    def task(self, question: str, options: Sequence[str], answer: str | None = None, id: str = "q") -> dict[str, Any]:
        """A task dict for :func:`maslens.improve`: ``task`` (the question and its options),
        ``answer`` (the gold letter, for exact match) and ``id``. The system keeps the gold
        letter, so its traces of this task say whether the debate got it right."""
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        text = question.strip() + "\n\n" + "\n".join(f"{letters[i]}) {o}" for i, o in enumerate(options))
        out: dict[str, Any] = {"task": text, "id": id}
        if answer is not None:
            out["answer"] = answer
            self._answers[text] = answer
        return out

    def tasks(self, spec: str) -> list[dict[str, Any]]:
        """The questions of a dataset (``mmlu:PATH``, ``aqua:PATH``, ... as ``maslens optimize
        --dataset`` takes it) as tasks; records that cannot be read are warned about by file and
        record, and skipped."""
        loaded = json.loads(_native.debate_questions(spec))
        for problem in loaded["problems"]:
            warnings.warn(f"skipped: {problem}", stacklevel=2)
        return [self.task(q["question"], q["options"], q["answer"], q["id"]) for q in loaded["items"]]

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        return self.resume(task, prompts, [], "")

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        check_prompts(self, prompts)
        question, options = _split_mcq(task)
        gold = self._answers.get(task)
        q = json.dumps({"id": hashlib.sha256(task.encode()).hexdigest()[:12], "question": question, "options": options, "answer": gold})
        trace, answer = _native.debate_run(self.model._native, self.config, json.dumps(dict(prompts)), q, [m["content"] for m in history], self.seed)
        return Run(trace, answer or "", {})


def _split_mcq(task: str) -> tuple[str, list[str]]:
    """The question and the options of a task :meth:`DebateSystem.task` wrote."""
    lines = task.rstrip().splitlines()
    options: list[str] = []
    while lines and len(lines[-1]) >= 3 and lines[-1][1:3] == ") " and lines[-1][0].isupper():
        options.insert(0, lines.pop()[3:])
    expected = [chr(ord("A") + i) for i in range(len(options))]
    if len(options) < 2 or [ln[0] for ln in task.rstrip().splitlines()[-len(options):]] != expected:
        raise ValueError("a debate task is a question followed by option lines 'A) ...', 'B) ...' (DebateSystem.task writes one)")
    return "\n".join(lines).strip(), options
