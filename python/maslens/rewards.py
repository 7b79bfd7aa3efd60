"""IF-shaped rewards for reinforcement learning with TRL's ``GRPOTrainer`` (MASIF's IF-GRPO).

:func:`if_grpo_reward` builds a reward function with TRL's signature
(``reward(prompts, completions, **kwargs) -> list[float]``). For each batch it

1. groups the completions by prompt (GRPO's groups: TRL samples ``num_generations`` completions
   per prompt),
2. decides success with your verifier (``success(completion_text, **row)``, where ``row`` holds
   the dataset columns of that completion, e.g. ``answer``),
3. scans each completion for implicit failures with maslens (a trace per completion, made by
   ``to_trace``; the default reads ``Name: text`` lines as steps of agents named ``Name``),
4. returns MASIF's IF-GRPO advantage of each completion (eq. 1-4: successes with fewer
   severity-weighted implicit failures rank higher; all-success and all-failure groups get 0).

TRL normalizes rewards within each group itself. With ``GRPOConfig(scale_rewards="none")`` its
advantage is ``A_i - mean(A)``: MASIF's A_i shifted by the group mean of the shaping term (zero
when the successes' costs are symmetric around their midpoint). With the default group scaling
it is also divided by the group's standard deviation. Ranks within a group are unchanged either
way. python/examples/trl_grpo_if_reward.py runs it on a toy task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from ._api import Model, advantages, scan
from ._native import Trace

#: A completion as TRL passes it: text (standard format) or a list of messages (conversational).
Completion = Any
SuccessFn = Callable[..., bool]
ToTraceFn = Callable[[Any, str, str], Trace]

_LINE = re.compile(r"^\s*([A-Za-z][\w\- ]{0,40}):\s*(.*)$")


def completion_text(completion: Completion) -> str:
    """The text of a completion in either of TRL's formats."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        return "\n".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return completion_text(prompt)


def transcript_trace(prompt: Any, completion: str, trace_id: str) -> Trace:
    """A trace of a role-played multi-agent transcript: each ``Name: text`` line starts a step
    of agent ``Name`` (continuation lines join it); text before the first such line is a step of
    ``assistant``. The prompt is the task and the user's first step."""
    task = _prompt_text(prompt)
    messages: list[dict[str, str]] = [{"role": "user", "name": "user", "content": task}]
    for line in completion.splitlines():
        m = _LINE.match(line)
        if m:
            messages.append({"role": "assistant", "name": m.group(1).strip(), "content": m.group(2)})
        elif messages[-1]["role"] == "assistant":
            messages[-1]["content"] += "\n" + line
        elif line.strip():
            messages.append({"role": "assistant", "name": "assistant", "content": line})
    return Trace.from_messages(messages, id=trace_id, task=task)


def if_grpo_reward(
    success: SuccessFn,
    *,
    model: Model | str | None = None,
    to_trace: ToTraceFn = transcript_trace,
    scan_options: dict[str, Any] | None = None,
) -> Callable[..., list[float]]:
    """A TRL reward function giving MASIF's IF-GRPO advantages (module docstring).

    ``success(completion_text, **row) -> bool`` is your verifier; ``model`` scans for implicit
    failures (a :class:`maslens.Model` keeps the cache and budgets across batches; a spec string
    is opened once, on first use); ``scan_options`` go to :func:`maslens.scan`.
    """
    opened: dict[str, Model] = {}

    def scanner() -> Model:
        if "m" not in opened:
            opened["m"] = model if isinstance(model, Model) else Model(model)
        return opened["m"]

    def reward(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> list[float]:
        n = len(completions)
        if len(prompts) != n:
            raise ValueError(f"{len(prompts)} prompts for {n} completions")
        texts = [completion_text(c) for c in completions]
        # Dataset columns arrive as lists, one value per completion; other kwargs (trainer_state,
        # completion_ids, log_extra, ...) are not per-completion data.
        columns = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n and k != "completion_ids"}
        rows = [{k: v[i] for k, v in columns.items()} for i in range(n)]
        ok = [bool(success(texts[i], **rows[i])) for i in range(n)]
        groups = [json.dumps(_prompt_text(p), ensure_ascii=False) for p in prompts]
        traces = [to_trace(prompts[i], texts[i], f"completion-{i}") for i in range(n)]
        result = scan(traces, model=scanner(), progress=False, **(scan_options or {}))
        cost = {t.id: t.cost for t in result.traces}
        records = [
            # A completion the scan could not read counts as costless: its success alone decides.
            {"group": groups[i], "id": traces[i].id, "success": ok[i], "if_cost": cost.get(traces[i].id, 0.0)}
            for i in range(n)
        ]
        adv = {a.id: a.advantage for a in advantages(records)}
        return [float(adv.get(traces[i].id, 0.0)) for i in range(n)]

    reward.__name__ = "if_grpo_reward"
    return reward
