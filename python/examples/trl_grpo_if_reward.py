"""IF-shaped GRPO with TRL on a toy task: a model role-plays a Solver and a Checker on small sums,
and completions that reach the right answer with fewer implicit failures are rewarded more.

    pip install maslens trl torch datasets                  # on a machine with a GPU (or patience)
    maslens serve-model --port 8080 &                       # any OpenAI-compatible judge for the scan
    python python/examples/trl_grpo_if_reward.py --judge openai:judge@http://127.0.0.1:8080/v1

CI does not install TRL or torch: python/tests/test_rewards.py calls `make_reward()` with TRL's
documented reward-function arguments and checks the shapes against a real model.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from maslens import Model
from maslens.rewards import if_grpo_reward

SYSTEM = (
    "Two agents solve the sum together. Write lines 'Solver: ...' with the working and "
    "'Checker: ...' checking it, and end with 'Checker: ANSWER <number>'."
)


def toy_rows(n: int = 64) -> list[dict[str, Any]]:
    """Prompts and answers of the toy task (deterministic)."""
    rows = []
    for i in range(n):
        a, b = 7 + 3 * i % 41, 11 + 5 * i % 37
        rows.append({"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}], "answer": str(a + b)})
    return rows


def solved(completion: str, answer: str, **_: Any) -> bool:
    """The verifier: the last `ANSWER <number>` equals the dataset's answer."""
    found = re.findall(r"ANSWER\s+(-?\d+)", completion)
    return bool(found) and found[-1] == answer


def make_reward(judge: Model | str | None = None, detect_max_tokens: int = 384) -> Any:
    """The reward function handed to GRPOTrainer (absorption is not classified: the IF cost then
    weighs every event as of unknown absorption, one model call per completion)."""
    return if_grpo_reward(
        solved, model=judge, scan_options={"absorption": False, "detect_max_tokens": detect_max_tokens, "max_events": 3}
    )


def main() -> None:  # pragma: no cover - needs TRL, torch and a GPU-sized budget
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--judge", default=None, help="model spec for the implicit-failure scan")
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir="grpo-if-toy",
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=192,
        max_steps=args.steps,
        # TRL then subtracts only the group mean from maslens' IF-GRPO advantages.
        scale_rewards="none",
        logging_steps=5,
    )
    trainer = GRPOTrainer(
        model=args.policy,
        reward_funcs=[make_reward(Model(args.judge) if args.judge else None)],
        args=config,
        train_dataset=Dataset.from_list(toy_rows()),
    )
    trainer.train()


if __name__ == "__main__":
    main()
