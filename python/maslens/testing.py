"""Scripted systems with one planted flaw, for checking the improvement loop end to end without a
strong model (docs/improve.md, "What the planted-flaw figures show").

Each system is a fixed pipeline of agents doing integer arithmetic. One agent's **shipped prompt**
is flawed: while that agent runs with exactly that prompt it makes its flaw on most tasks (a seeded
draw per task); with any other prompt it works. The scripts never read a prompt's wording: an
agent only compares its prompt with the shipped one (by hash). So the figures these systems give
measure whether the loop finds and changes the right agent, and what that costs; they cannot say
whether a rewrite is a good prompt.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ._native import Trace
from .systems import Message, Run

Shape = Literal["chain3", "chain4", "star"]
Flaw = Literal["wrong-value", "dropped-operand", "early-stop"]

#: Each shape's steps: (agent, what the step does). ``plan`` restates the operands, ``add`` sums the
#: first two, ``mul`` multiplies by the third, ``pass`` reports the value on.
SHAPES: dict[str, list[tuple[str, str]]] = {
    "chain3": [("Planner", "add"), ("Solver", "mul"), ("Checker", "pass")],
    "chain4": [("Reader", "plan"), ("Planner", "add"), ("Solver", "mul"), ("Reporter", "pass")],
    "star": [("Orchestrator", "plan"), ("Adder", "add"), ("Multiplier", "mul"), ("Orchestrator", "pass")],
}
FLAWS: tuple[str, ...] = ("wrong-value", "dropped-operand", "early-stop")


def tasks(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` tasks "(a + b) * c" with their answers, seeded."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
        out.append({"task": f"Compute ({a} + {b}) * {c}.", "answer": str((a + b) * c)})
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class PlantedFlawSystem:
    """A scripted pipeline of ``shape`` whose ``flawed`` agent makes ``flaw`` while it runs with
    its shipped prompt (on a share ``rate`` of tasks, drawn per task with ``seed``)."""

    shape: Shape
    flawed: str
    flaw: Flaw
    seed: int = 0
    rate: float = 0.8
    prompts: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        agents = dict.fromkeys(a for a, _ in SHAPES[self.shape])
        if self.flawed not in agents:
            raise ValueError(f"{self.flawed!r} is not an agent of {self.shape}: {list(agents)}")
        self.prompts = {a: f"You are {a}. Do your part of the arithmetic and pass the result on." for a in agents}
        self.prompts[self.flawed] += " Be quick; approximate when unsure."
        self._shipped = _digest(self.prompts[self.flawed])

    def _errs(self, prompts: Mapping[str, str], task: str) -> bool:
        if _digest(prompts[self.flawed]) != self._shipped:
            return False
        return random.Random(f"{self.seed}:{task}").random() < self.rate

    def run(self, task: str, prompts: Mapping[str, str]) -> Run:
        return self._go(task, prompts, [], None)

    def resume(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str) -> Run:
        """Go on after ``history``: its steps are re-made as recorded (each the flawed or the
        sound version of the step, whichever has the recorded text), the rest with ``prompts``."""
        return self._go(task, prompts, history, agent)

    def _go(self, task: str, prompts: Mapping[str, str], history: Sequence[Message], agent: str | None) -> Run:
        missing = sorted(set(self.prompts) - set(prompts))
        if missing:
            raise ValueError(f"no prompt for agent {missing[0]!r}")
        a, b, c = (int(x) for x in task.replace("(", " ").replace(")", " ").replace(".", " ").split() if x.isdigit())
        shape = SHAPES[self.shape]
        done = len(history) - 1 if history else 0
        if history and (history[0]["content"] != task or done >= len(shape) or shape[done][0] != agent):
            raise ValueError(f"cannot resume {self.shape} at step {done + 1} with {agent!r} after this history")
        errs = self._errs(prompts, task)
        messages: list[dict[str, str]] = [{"role": "user", "content": task}]
        ops: tuple[int, int, int] | None = (a, b, c)
        value: int | None = None
        for i, (name, step) in enumerate(shape):
            if i < done:
                ops, value, text = self._recorded(name, step, (a, b, c), ops, value, history[i + 1]["content"])
            else:
                ops, value, text = _do(name, step, (a, b, c), ops, value, self.flaw if errs and name == self.flawed else None)
            messages.append({"role": "assistant", "name": name, "content": text})
        output = str(value) if value is not None else "no result"
        return Run(trace=Trace.from_messages(messages, task=task, outcome="unknown"), output=output)

    def _recorded(self, name: str, step: str, abc: tuple[int, int, int], ops: tuple[int, int, int] | None, value: int | None, want: str) -> tuple[tuple[int, int, int] | None, int | None, str]:
        for flaw in (None, self.flaw):
            made = _do(name, step, abc, ops, value, flaw)
            if made[2] == want:
                return made
        raise ValueError(f"{name}'s recorded step {want!r} is not a step this script makes")


def _do(name: str, step: str, abc: tuple[int, int, int], ops: tuple[int, int, int] | None, value: int | None, flaw: str | None) -> tuple[tuple[int, int, int] | None, int | None, str]:
    """One step: the operands and value after it, and its text."""
    if step == "plan":
        new_ops, text = _plan(name, *abc, flaw)
        return new_ops, value, text
    new_value, text = _step(name, step, ops, value, flaw)
    return ops, new_value, text


def _plan(agent: str, a: int, b: int, c: int, flaw: str | None) -> tuple[tuple[int, int, int] | None, str]:
    if flaw == "early-stop":
        return None, f"{agent}: I will plan this later."
    if flaw == "wrong-value":
        a += 1
    if flaw == "dropped-operand":
        b = 0
        return (a, b, c), f"{agent}: take {a} and multiply it by {c}."
    return (a, b, c), f"{agent}: add {a} and {b}, then multiply by {c}."


def _step(agent: str, step: str, ops: tuple[int, int, int] | None, value: int | None, flaw: str | None) -> tuple[int | None, str]:
    """An ``add``, ``mul`` or ``pass`` step; a flawed one makes its flaw and says it did its part."""
    if flaw == "early-stop":
        return None, f"{agent}: done for now."
    if step == "add":
        if ops is None:
            return None, f"{agent}: there is nothing to add."
        a, b, _ = ops
        total = a + (0 if flaw == "dropped-operand" else b) + (1 if flaw == "wrong-value" else 0)
        return total, f"{agent}: the sum is {total}."
    if value is None:
        return None, f"{agent}: I have no value to work with."
    if step == "mul" and ops is not None:
        c = ops[2]
        product = value if flaw == "dropped-operand" else value * c + (c if flaw == "wrong-value" else 0)
        return product, f"{agent}: the product is {product}."
    reported = value + 1 if flaw == "wrong-value" else (value // 10 if flaw == "dropped-operand" else value)
    return reported, f"{agent}: the answer is {reported}."


class FixtureModel:
    """A labelled fixture, not a model: an OpenAI-compatible endpoint on loopback that answers a
    prompt rewrite with a fixed new prompt and the black-box baseline with a new prompt for every
    agent its JSON schema asks for. With :class:`PlantedFlawSystem` it isolates what the loop
    decides (which agent to change, whether to keep it) from what a model writes. Counts calls.

    ``with FixtureModel() as spec: maslens.improve(..., model=spec)``."""

    REWRITE = "You are this team's agent. Work step by step and check every number before passing it on."

    def __init__(self) -> None:
        import http.server
        import threading

        fixture = self
        self.calls = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the preflight's model list
                self._send({"object": "list", "data": [{"id": "fixture", "object": "model"}]})

            def do_POST(self) -> None:
                import json

                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                fixture.calls += 1
                self._send(_chat_completion(fixture._answer(body)))

            def _send(self, obj: object) -> None:
                import json

                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.spec = f"openai:fixture@http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _answer(self, body: dict[str, object]) -> str:
        import json

        fmt = body.get("response_format")
        if isinstance(fmt, dict):
            schema = fmt.get("json_schema", {}).get("schema", {})
            agents = schema.get("properties", {}).get("prompts", {}).get("required", [])
            return json.dumps({"prompts": {a: f"You are {a}. {self.REWRITE}" for a in agents}})
        return self.REWRITE

    def __enter__(self) -> str:
        self._thread.start()
        return self.spec

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _chat_completion(text: str) -> dict[str, object]:
    return {
        "id": "fixture",
        "object": "chat.completion",
        "model": "fixture",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }
