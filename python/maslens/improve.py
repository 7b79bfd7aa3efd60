"""The improvement loop (docs/improve.md): from "who broke it" to a verified fix.

Run the tasks; localize each failure; credit per agent from the located failures; rewrite only the
weakest agents' prompts, fed with the located steps and reasons; re-run held-out tasks and keep a
change only when the held-out score rises beyond a paired bootstrap interval; iterate within a
budget. A black-box baseline (one rewrite of every prompt from the failed outputs alone) runs at the
loop's measured call budget. Every decision is made by maslens' native code; this module runs the
user's system.

Resume: every system run is kept in ``out/state.json`` (keyed by the prompts and the task), and the
model's calls go through the maslens cache, so a rerun after a kill repeats no paid call.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import random
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, Unpack

from . import _native
from ._api import LlmOptions, Model, ModelArg, _check_llm, _model, locate
from ._native import BudgetExceeded, Trace
from ._results import Verdict
from .systems import Message, Resumable, Run, System, can_resume, history_of

#: A task: its text, or a dict with ``task`` (the text) and optionally ``answer`` (for exact match).
Task = Union[str, Mapping[str, Any]]
#: Scores a run's output on a task: 1.0 is right, 0.0 wrong (values between allowed).
Metric = Callable[[str, Mapping[str, Any]], float]


def exact_match(output: str, task: Mapping[str, Any]) -> float:
    """1.0 when the output, trimmed and lower-cased, equals the task's ``answer`` or ends with it
    as its last line; else 0.0."""
    want = str(task.get("answer", "")).strip().lower()
    got = output.strip().lower()
    last = got.splitlines()[-1].strip() if got else ""
    return 1.0 if want and (got == want or last == want) else 0.0


@dataclass
class ImproveResult:
    """The loop's outcome: the final prompts, the report (``report.json`` as a dict), its Markdown
    and HTML, and the agents changed."""

    prompts: dict[str, str]
    report: dict[str, Any] = field(repr=False)
    markdown: str = field(repr=False)
    html: str = field(repr=False)
    changed: list[str] = field(default_factory=list)


def _task(t: Task) -> dict[str, Any]:
    return {"task": t} if isinstance(t, str) else dict(t)


class _State:
    """System runs kept across restarts (``state.json``, written atomically after each run)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.runs: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            self.runs = json.loads(path.read_text()).get("runs", {})
        self.new_runs = 0

    @staticmethod
    def key(prompts: Mapping[str, str], task: Mapping[str, Any]) -> str:
        blob = json.dumps([dict(sorted(prompts.items())), task], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".state-")
        with os.fdopen(fd, "w") as f:
            json.dump({"runs": self.runs}, f)
        os.replace(tmp, self.path)


@dataclass
class _Loop:
    system: System
    metric: Metric
    model: Model
    state: _State
    seed: int
    max_runs: int | None
    locate_method: str
    rewrite_max_tokens: int
    level: float
    resamples: int
    #: The last candidate verified (for replay when no change was kept).
    last_candidate: dict[str, str] | None = None

    def run(self, prompts: Mapping[str, str], task: Mapping[str, Any]) -> tuple[float, Run]:
        key = _State.key(prompts, task)
        kept = self.state.runs.get(key)
        if kept is not None:
            trace = Trace.from_json(kept["trace"], "native", f"state:{key[:12]}")
            return float(kept["score"]), Run(trace=trace, output=kept["output"])
        if self.max_runs is not None and self.state.new_runs >= self.max_runs:
            raise BudgetExceeded(f"{self.max_runs} system runs made (max_runs)")
        run = self.system.run(str(task["task"]), dict(prompts))
        score = float(self.metric(run.output, task))
        self.state.runs[key] = {"score": score, "output": run.output, "trace": run.trace.to_json(False)}
        self.state.new_runs += 1
        self.state.save()
        return score, run

    def scores(self, prompts: Mapping[str, str], tasks: Sequence[Mapping[str, Any]]) -> list[tuple[float, Run]]:
        return [self.run(prompts, t) for t in tasks]

    def verify(self, prompts: Mapping[str, str], candidate: Mapping[str, str], held: Sequence[Mapping[str, Any]], salt: int) -> dict[str, Any]:
        """The held-out tasks scored with ``prompts`` and with ``candidate``, and the decision."""
        before = [s for s, _ in self.scores(prompts, held)]
        after = [s for s, _ in self.scores(candidate, held)]
        out: dict[str, Any] = json.loads(_native.improve_accept(before, after, self.resamples, self.level, self.seed + salt))
        return out

    def calls(self) -> int:
        return int(self.usage().get("calls", 0))

    def usage(self) -> dict[str, Any]:
        """The model's totals so far (the one usage type: calls, cache hits, tokens, cost)."""
        return dict(self.model.usage().get("total", {}))

    def blame(self, failed: Sequence[tuple[Mapping[str, Any], Run]], agents: list[str], k: int, exclude: set[str]) -> dict[str, Any]:
        """Credit from the located failures, and ``chosen``: the ``k`` weakest agents not in ``exclude``."""
        if not failed:
            return {"failures": 0, "located": 0, "unprompted": {}, "agents": [], "evidence": {}, "chosen": []}
        traces = [r.trace for _, r in failed]
        raw = [v.raw if v.error is None and v.agent is not None else None for v in self.locate(traces)]
        out: dict[str, Any] = json.loads(_native.improve_blame(traces, json.dumps(raw), agents, k, sorted(exclude)))
        return out

    def locate(self, traces: Sequence[Trace]) -> list[Verdict]:
        method = self.locate_method
        return locate(traces, method=method, model=self.model if method != "prior" else None, progress=False)  # type: ignore[arg-type]

    def resume(self, prompts: Mapping[str, str], task: Mapping[str, Any], history: list[Message], agent: str) -> float:
        """The score of ``task`` resumed after ``history`` with ``prompts`` (kept in the state)."""
        key = _State.key(prompts, {**task, "resume": [history, agent]})
        kept = self.state.runs.get(key)
        if kept is not None:
            return float(kept["score"])
        if self.max_runs is not None and self.state.new_runs >= self.max_runs:
            raise BudgetExceeded(f"{self.max_runs} system runs made (max_runs)")
        assert isinstance(self.system, Resumable)
        run = self.system.resume(str(task["task"]), dict(prompts), history, agent)
        score = float(self.metric(run.output, task))
        self.state.runs[key] = {"score": score, "output": run.output, "trace": run.trace.to_json(False)}
        self.state.new_runs += 1
        self.state.save()
        return score

    def rewrite(self, agent: str, prompt: str, evidence: list[dict[str, Any]], salt: int) -> dict[str, Any]:
        text = _native.improve_rewrite(self.model._native, agent, prompt, json.dumps(evidence), self.rewrite_max_tokens, self.seed + salt)
        out: dict[str, Any] = json.loads(text)
        return out


def _split(tasks: list[dict[str, Any]], held_out: Sequence[Task] | float, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not isinstance(held_out, (int, float)):
        return tasks, [_task(t) for t in held_out]
    if not 0.0 < float(held_out) < 1.0:
        raise ValueError(f"held_out: a share between 0 and 1, or the held-out tasks; got {held_out}")
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    n = max(1, round(len(tasks) * float(held_out)))
    if n >= len(tasks):
        raise ValueError(f"held_out={held_out} leaves no training task among {len(tasks)}")
    chosen = set(order[:n])
    return [t for i, t in enumerate(tasks) if i not in chosen], [t for i, t in enumerate(tasks) if i in chosen]


def _iteration(
    loop: _Loop, index: int, prompts: dict[str, str], train: list[dict[str, Any]], held: list[dict[str, Any]], k: int, tried: set[str], exhausted: set[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """One iteration; returns its record and the prompts after it (changed only when kept). The
    ``k`` agents with the lowest credit are rewritten, leaving out ``exhausted`` ones (rewritten
    since the last kept change, and not kept). A candidate already tried (``tried``) is not
    verified again: the record says ``repeated``."""
    runs = loop.scores(prompts, train)
    failed = [(t, r) for t, (s, r) in zip(train, runs, strict=True) if s < 1.0]
    record: dict[str, Any] = {"index": index, "train_score": sum(s for s, _ in runs) / len(runs), "failures": len(failed)}
    blame = loop.blame(failed, sorted(prompts), k, exhausted)
    chosen: list[str] = blame["chosen"]
    record.update(located=blame["located"], credit=blame["agents"], unprompted=blame["unprompted"], chosen=chosen)
    candidate = dict(prompts)
    rewrites = []
    for j, agent in enumerate(chosen):
        w = loop.rewrite(agent, prompts[agent], blame["evidence"].get(agent, []), salt=index * 100 + j)
        rewrites.append(w)
        if w.get("prompt"):
            candidate[agent] = w["prompt"]
    record["rewrites"] = rewrites
    key = _State.key(candidate, {})
    if candidate != prompts and key in tried:
        record["repeated"] = True
        record["calls"] = loop.calls()
        exhausted.update(chosen)
        return record, prompts
    tried.add(key)
    if candidate != prompts:
        loop.last_candidate = candidate
        record["acceptance"] = loop.verify(prompts, candidate, held, salt=index)
        if record["acceptance"]["accepted"]:
            prompts = candidate
            exhausted.clear()
        else:
            exhausted.update(chosen)
    record["calls"] = loop.calls()
    return record, prompts


def _baseline(loop: _Loop, initial: dict[str, str], train: list[dict[str, Any]], held: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Whole-system rewrites from the failed outputs until ``budget`` model calls are spent."""
    start = loop.calls()
    prompts = dict(initial)
    proposals: list[dict[str, Any]] = []
    while loop.calls() - start < budget and len(proposals) < 20:
        runs = loop.scores(prompts, train)
        failed = [{"task": t["task"], "output": r.output} for t, (s, r) in zip(train, runs, strict=True) if s < 1.0]
        if not failed:
            break
        index = len(proposals) + 1
        tokens = min(800, loop.rewrite_max_tokens * len(prompts))
        answer = json.loads(_native.improve_blackbox(loop.model._native, json.dumps(prompts), json.dumps(failed), tokens, loop.seed + 10_000 + index))
        p: dict[str, Any] = {"index": index, "changed": [], "rejected": answer.get("rejected")}
        if "prompts" in answer:
            candidate = dict(answer["prompts"])
            p["changed"] = sorted(a for a in candidate if candidate[a] != prompts.get(a))
            p["acceptance"] = loop.verify(prompts, candidate, held, salt=10_000 + index)
            if p["acceptance"]["accepted"]:
                prompts = candidate
        proposals.append(p)
    final = [s for s, _ in loop.scores(prompts, held)]
    return {"budget_calls": budget, "calls": loop.calls() - start, "proposals": proposals, "final_prompts": prompts, "final_score": sum(final) / len(final)}


def _replay(loop: _Loop, initial: dict[str, str], proposal: dict[str, str], kept: bool, splits: Sequence[tuple[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Replay with ``proposal`` against ``initial``: each failed run (initial prompts) from its
    located decisive step, each successful one from the first step of a changed agent."""
    changed = sorted(a for a in proposal if proposal[a] != initial.get(a))
    out: dict[str, Any] = {"kept": kept, "changed": changed, "rows": [], "stats": [], "skipped": []}
    if not can_resume(loop.system):
        out["unsupported"] = f"{type(loop.system).__name__} cannot go on from a message history (it has no resume method, or says resumable = False)"
        return out
    for config, tasks in splits:
        scored = loop.scores(initial, tasks)
        failed = [i for i, (s, _) in enumerate(scored) if s < 1.0]
        verdicts = dict(zip(failed, loop.locate([scored[i][1].trace for i in failed]), strict=True))
        for i, (task, (score, run)) in enumerate(zip(tasks, scored, strict=True)):
            point = _replay_point(run.trace, verdicts.get(i), initial, changed, score >= 1.0)
            if isinstance(point, str):
                out["skipped"].append(f"{config} task {i + 1} ({run.trace.id}): {point}")
                continue
            step, agent = point
            history = history_of(run.trace, step)
            try:
                rows = [(name, loop.resume(p, task, history, agent)) for name, p in (("noop", initial), ("fix", proposal))]
            except ValueError as e:
                out["skipped"].append(f"{config} task {i + 1} ({run.trace.id}): resume failed: {e}")
                continue
            for name, replayed in rows:
                out["rows"].append({"config": config, "task": str(task["task"]), "trace": run.trace.id, "if_step": step,
                                    "original_success": score >= 1.0, "intervention": name, "success": replayed >= 1.0})
    out["stats"] = json.loads(_native.improve_replay(json.dumps(out["rows"]), loop.resamples, loop.seed))
    return out


def _replay_point(trace: Trace, verdict: Verdict | None, prompts: Mapping[str, str], changed: list[str], success: bool) -> tuple[int, str] | str:
    """Where to replay a run from, (step, agent), or why it is not replayed."""
    if success:
        for s in trace.steps:
            if s.get("agent") in changed:
                return int(s["index"]), str(s["agent"])
        return "no changed agent acts in it"
    if verdict is None or verdict.error is not None or verdict.agent is None or verdict.step is None:
        return "its failure was not located" + (f" ({verdict.error})" if verdict is not None and verdict.error else "")
    if verdict.agent not in prompts:
        return f"located at {verdict.agent!r}, which has no prompt the loop can change"
    return int(verdict.step), str(verdict.agent)


def _write(out: Path, report: dict[str, Any], rendered: dict[str, Any], runs: Mapping[str, dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out / "report.md").write_text(rendered["markdown"])
    (out / "report.html").write_text(rendered["html"])
    diff: list[str] = []
    for agent in rendered["changed"]:
        before = report["initial_prompts"][agent].splitlines(keepends=True)
        after = report["final_prompts"][agent].splitlines(keepends=True)
        diff.extend(difflib.unified_diff(before, after, f"a/{agent}", f"b/{agent}"))
        diff.append("\n")
    (out / "prompts.diff").write_text("".join(diff))
    # Every system run, as native JSONL: `maslens import traces.jsonl --db` shows them in the UI.
    with open(out / "traces.jsonl", "w") as f:
        for kept in runs.values():
            f.write(kept["trace"] + "\n")


def improve(
    system: System,
    tasks: Sequence[Task],
    metric: Metric | None = None,
    *,
    held_out: Sequence[Task] | float = 0.5,
    iterations: int = 3,
    k: int = 1,
    model: ModelArg = None,
    locate_method: str = "stacked",
    baseline: bool = True,
    replay: bool = True,
    level: float = 0.95,
    resamples: int = 2000,
    max_runs: int | None = None,
    rewrite_max_tokens: int = 400,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    name: str | None = None,
    **llm: Unpack[LlmOptions],
) -> ImproveResult:
    """Improve ``system``'s prompts on ``tasks`` (docs/improve.md). ``metric(output, task)``
    scores a run (default: :func:`exact_match` against each task's ``answer``). ``held_out``: a
    share of ``tasks`` (seeded) or the held-out tasks themselves. ``k`` agents with the lowest
    credit are rewritten per iteration. ``model`` localizes (``locate_method``) and rewrites; its
    budgets (``max_calls``, ``max_cost``) and ``max_runs`` (system runs) stop the loop, which
    then reports what it did. ``replay``: when the system is :class:`~maslens.Resumable`, verify
    the kept change (else the last candidate) by replay from the decisive steps (SPR, RR,
    delta-RR in the report). ``out``: where the report, the prompt diff, the traces and the
    resume state go."""
    _check_llm("improve", llm)
    if not isinstance(system, System):
        raise TypeError("system: expected a maslens.System (prompts and run(task, prompts))")
    all_tasks = [_task(t) for t in tasks]
    train, held = _split(all_tasks, held_out, seed)
    m = model if isinstance(model, Model) else Model(model, **llm)
    outdir = Path(out) if out is not None else None
    loop = _Loop(system, metric or exact_match, m, _State(outdir / "state.json" if outdir else None), seed, max_runs, locate_method, rewrite_max_tokens, level, resamples)
    initial = dict(system.prompts)
    report: dict[str, Any] = {
        "format_version": 2, "system": name or type(system).__name__, "model": m.id, "seed": seed,
        "train_tasks": len(train), "held_out_tasks": len(held), "k": k, "level": level, "resamples": resamples,
        "initial_prompts": initial, "iterations": [], "notes": [],
    }
    prompts = dict(initial)
    calls_before = loop.calls()
    try:
        report["initial_score"] = _mean(loop.scores(prompts, held))
        tried: set[str] = set()
        exhausted: set[str] = set()
        for i in range(1, iterations + 1):
            record, prompts = _iteration(loop, i, prompts, train, held, k, tried, exhausted)
            report["iterations"].append(record)
            if record["failures"] == 0 or not record["chosen"]:
                break
        report["final_score"] = _mean(loop.scores(prompts, held))
        report["usage"], report["system_runs"] = loop.usage(), loop.state.new_runs
        if baseline:
            report["baseline"] = _baseline(loop, initial, train, held, loop.calls() - calls_before)
        proposal = prompts if prompts != initial else loop.last_candidate
        if replay and proposal is not None:
            calls, runs = loop.calls(), loop.state.new_runs
            report["replay"] = _replay(loop, initial, proposal, proposal is prompts, [("held-out", held), ("train", train)])
            report["replay"].update(calls=loop.calls() - calls, system_runs=loop.state.new_runs - runs)
    except BudgetExceeded as e:
        report["stopped"] = str(e)
    report["final_prompts"] = prompts
    report.setdefault("usage", loop.usage())
    report.setdefault("system_runs", loop.state.new_runs)
    rendered = json.loads(_native.improve_render(json.dumps(report)))
    if outdir is not None:
        _write(outdir, report, rendered, loop.state.runs)
    return ImproveResult(prompts=prompts, report=report, markdown=rendered["markdown"], html=rendered["html"], changed=rendered["changed"])


def _mean(scored: list[tuple[float, Run]]) -> float:
    return sum(s for s, _ in scored) / len(scored) if scored else 0.0


def _load(spec: str, what: str) -> Any:
    """``MODULE:ATTR`` -> the attribute (a callable without arguments is called)."""
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise SystemExit(f"maslens improve: {what} {spec!r}: expected MODULE:ATTRIBUTE")
    obj = getattr(importlib.import_module(module), attr)
    return obj


def _read_tasks(path: str) -> list[Task]:
    tasks: list[Task] = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                t = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"maslens improve: {path} line {n}: not JSON: {e}") from e
            if isinstance(t, dict) and not isinstance(t.get("task"), str):
                raise SystemExit(f"maslens improve: {path} line {n}: field `task`: expected a string")
            if not isinstance(t, (str, dict)):
                raise SystemExit(f"maslens improve: {path} line {n}: expected a string or an object with `task`")
            tasks.append(t)
    if not tasks:
        raise SystemExit(f"maslens improve: {path}: no task")
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    """``maslens improve`` / ``python -m maslens.improve``: the loop on a system named by a Python
    entry point. Exit 0 when it ran, 1 when a budget stopped it, 2 on bad input."""
    import argparse

    ap = argparse.ArgumentParser(prog="maslens improve", description="Improve a multi-agent system's prompts (docs/improve.md).")
    ap.add_argument("system", help="MODULE:ATTRIBUTE: a maslens.System, or a function returning one")
    ap.add_argument("--tasks", required=True, help="JSONL: one task per line, a string or {\"task\": ..., \"answer\": ...}")
    ap.add_argument("--metric", help="MODULE:FUNCTION(output, task) -> score in [0, 1] (default: exact match with `answer`)")
    ap.add_argument("--out", required=True, help="report.{json,md,html}, prompts.diff, traces.jsonl and the resume state")
    ap.add_argument("--model", help="model spec (default: the configured one)")
    ap.add_argument("--held-out", type=float, default=0.5)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("-k", type=int, default=1)
    ap.add_argument("--locate-method", default="stacked", choices=["stacked", "llm", "prior"])
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--no-replay", action="store_true", help="skip the replay from the decisive steps")
    ap.add_argument("--max-runs", type=int)
    ap.add_argument("--max-calls", type=int)
    ap.add_argument("--max-cost", type=float)
    ap.add_argument("--cache-path")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    target = _load(args.system, "system")
    system = target if isinstance(target, System) else target()
    metric = _load(args.metric, "metric") if args.metric else None
    llm: dict[str, Any] = {k: v for k, v in {"max_calls": args.max_calls, "max_cost": args.max_cost, "cache_path": args.cache_path}.items() if v is not None}
    r = improve(
        system, _read_tasks(args.tasks), metric, held_out=args.held_out, iterations=args.iterations, k=args.k, model=args.model,
        locate_method=args.locate_method, baseline=not args.no_baseline, replay=not args.no_replay, max_runs=args.max_runs, seed=args.seed, out=args.out,
        name=args.system, **llm,
    )
    print(r.markdown)
    return 1 if r.report.get("stopped") else 0


if __name__ == "__main__":
    raise SystemExit(main())
