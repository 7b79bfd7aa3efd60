"""``eval_compare``: several localizers on the same cases (``maslens eval compare``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Unpack

from . import _native
from ._api import (
    ErrorModes,
    LlmOptions,
    Model,
    ModelArg,
    PairRule,
    PathLike,
    Style,
    _check_llm,
    _clean,
    _in_thread,
    _locate_options,
    _run_eval,
)
from ._native import OptionsError
from ._progress import ProgressArg
from ._results import CompareReport

#: The methods ``eval_compare`` runs, as ``maslens eval compare --methods`` names them.
CompareMethod = Literal[
    "prior", "stacked", "agentlocate", "llm", "all-at-once", "step-by-step", "binary-search", "a2p",
    "taxonomy", "echo", "counterfactual",
]
ALL_METHODS: tuple[CompareMethod, ...] = (
    "prior", "stacked", "agentlocate", "all-at-once", "step-by-step", "binary-search", "a2p",
    "taxonomy", "echo", "counterfactual",
)


def eval_compare(
    dataset: str,
    *,
    methods: Sequence[CompareMethod] = ALL_METHODS,
    model: ModelArg = None,
    evaluators: Sequence[Style] = ("base", "concise", "evidence"),
    evaluator_models: Sequence[Model | str] = (),
    with_ground_truth: bool = False,
    both_ground_truth: bool = False,
    error_modes: ErrorModes = "auto",
    max_answer_tokens: int = 384,
    prior: PathLike | None = None,
    prior_weight: float = 1.0,
    stack: PathLike | None = None,
    pair_rule: PairRule = "coherent",
    compat_substring: bool = False,
    seed: int = 0,
    limit: int | None = None,
    subset: str | None = None,
    tolerances: Sequence[int] = (0, 1, 3),
    out: PathLike | None = None,
    progress: ProgressArg = None,
    **llm: Unpack[LlmOptions],
) -> CompareReport:
    """Several localizers on the same cases with the same model and cache (``maslens eval
    compare``): per method agent and step accuracy with intervals, calls, tokens, cost; paired
    McNemar tests and bootstrap intervals between every two methods. ``methods``: ``prior``,
    ``stacked``, ``agentlocate`` (alias ``llm``), ``all-at-once``, ``step-by-step``,
    ``binary-search``, ``a2p``, ``taxonomy``, ``echo``; each sets its own method, protocol and variant.
    ``both_ground_truth`` runs each method that prompts a model twice, without and with the
    reference answer in its prompts (rows ``NAME+gt``), in one table. ``out`` writes
    compare.json, compare.md and each method's ``eval_locate`` report directory there."""
    _check_llm("eval_compare", llm)
    known = _native.compare_methods()
    unknown = [m for m in methods if m not in known and m != "llm"]
    if unknown:
        raise OptionsError(f'unknown method "{unknown[0]}" in methods (methods: {", ".join(known)})')
    if not methods:
        raise OptionsError("methods names no method")
    if both_ground_truth and with_ground_truth:
        raise OptionsError(
            "both_ground_truth runs each method without and with the ground truth: leave out "
            "with_ground_truth"
        )
    opts = _locate_options(
        "stacked", "all-at-once", "verified", evaluators, with_ground_truth, error_modes,
        max_answer_tokens, prior, prior_weight, False, stack, False, pair_rule,
    )
    eopts = _clean(
        {
            "compat_substring": compat_substring,
            "seed": seed,
            "limit": limit,
            "subset": subset,
            "tolerances": list(tolerances),
            "out": out,
        }
    )
    res = _run_eval(
        "eval compare", any(m != "prior" for m in methods), model, evaluator_models, llm, progress,
        lambda m, evs, cb: _native.eval_compare(
            dataset, list(methods), m, evs, opts, eopts, cb, both_ground_truth
        ),
    )
    return CompareReport(report=res["report"], problems=res["problems"], markdown=res["markdown"])


eval_compare_async = _in_thread(eval_compare)
