"""The IF-GRPO reward function against TRL's documented reward-function contract: called as
`reward(prompts=..., completions=..., completion_ids=..., **dataset_columns, trainer_state=...)`
with standard (text) or conversational (message list) completions, it returns one float per
completion. TRL itself is not installed here (too heavy); its contract is written out below."""

from __future__ import annotations

import importlib.util
import inspect
import math
from pathlib import Path
from typing import Any

import pytest

import maslens
from maslens.rewards import completion_text, if_grpo_reward, transcript_trace
from conftest import ServeModel

ROOT = Path(__file__).resolve().parents[2]


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("trl_grpo_if_reward", ROOT / "python" / "examples" / "trl_grpo_if_reward.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports neither trl nor torch at module level
    return mod


def _trl_call(reward: Any, prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
    """What GRPOTrainer passes (trl/trainer/grpo_trainer.py, `_calculate_rewards`): keyword
    arguments prompts, completions, completion_ids, the dataset's other columns, trainer_state."""
    ids = [[1, 2, 3] for _ in completions]
    out = reward(prompts=prompts, completions=completions, completion_ids=ids, trainer_state=None, **columns)
    assert isinstance(out, list) and len(out) == len(completions)
    assert all(isinstance(x, float) and math.isfinite(x) for x in out)
    return list(out)


def test_signature_is_what_trl_calls() -> None:
    reward = if_grpo_reward(lambda text, **_: True, model="openai:x@http://127.0.0.1:9/v1")
    params = inspect.signature(reward).parameters
    assert list(params)[:2] == ["prompts", "completions"]
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), "TRL passes extra columns"
    assert reward.__name__ == "if_grpo_reward", "TRL logs rewards under the function's name"


def test_transcripts_become_multi_agent_traces() -> None:
    t = transcript_trace("What is 2+2?", "Solver: 2+2 is 4.\nso 4\nChecker: right. ANSWER 4", "c0")
    assert [s["agent"] for s in t.steps] == ["user", "Solver", "Checker"]
    assert t.steps[1]["content"] == "2+2 is 4.\nso 4"
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"


def test_if_grpo_rewards_from_a_real_scan(serve_model: ServeModel, tmp_path: Path) -> None:
    ex = _example()
    judge = maslens.Model(serve_model.spec, cache_path=str(tmp_path / "c.sqlite"))
    reward = ex.make_reward(judge, detect_max_tokens=64)  # the 135M judge never ends its JSON: small keeps it quick
    rows = ex.toy_rows(2)
    a0, a1 = rows[0]["answer"], rows[1]["answer"]
    good = f"Solver: I add the numbers.\nChecker: ANSWER {a0}"
    sloppy = f"Solver: I think it is 3.\nSolver: no, I add them again.\nChecker: ANSWER {a0}"
    wrong = "Solver: It is 5.\nChecker: ANSWER 5"
    # Standard format: a group of two and a group of one.
    prompts = [rows[0]["prompt"][1]["content"]] * 2 + [rows[1]["prompt"][1]["content"]]
    completions = [good, wrong, f"Checker: ANSWER {a1}"]
    out = _trl_call(reward, prompts, completions, answer=[a0, a0, a1])
    assert out[0] > 0 > out[1], "a success beats a failure in its group"
    assert out[2] == 0.0, "a group with one outcome is not shaped"
    # Conversational format: prompts and completions are message lists.
    conv_prompts = [rows[0]["prompt"]] * 2
    conv = [[{"role": "assistant", "content": c}] for c in (sloppy, wrong)]
    out2 = _trl_call(reward, conv_prompts, conv, answer=[a0] * 2)
    assert out2[1] < 0 < out2[0]
    assert judge.usage()["total"]["calls"] > 0, "the scan asked the model"


def test_mismatched_batches_are_refused() -> None:
    reward = if_grpo_reward(lambda text, **_: True, model="openai:x@http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="2 prompts for 1 completions"):
        reward(prompts=["a", "b"], completions=["x"])
