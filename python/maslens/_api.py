"""The methods, with the CLI's options as keyword arguments (docs/python.md)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import warnings
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Literal, ParamSpec, TypedDict, TypeVar, Union, Unpack

from . import _native
from ._native import OptionsError, Trace, TraceError
from ._progress import ProgressArg, progress_callback
from ._results import (
    Advantage,
    Advantages,
    CreditResult,
    EvalReport,
    FixProposal,
    ModesReport,
    ScanResult,
    TraceList,
    Verdict,
    Verdicts,
)

P = ParamSpec("P")
R = TypeVar("R")

PathLike = Union[str, "os.PathLike[str]"]
#: What methods take as traces: a trace, traces, a path (file or directory) or paths, or dicts
#: in any format maslens reads.
Traces = Union[Trace, PathLike, Mapping[str, Any], Iterable[Union[Trace, PathLike, Mapping[str, Any]]]]


class LlmOptions(TypedDict, total=False):
    """How a model is opened: the CLI's LLM flags (``maslens locate --help``). Unset options come
    from the environment (``MASLENS_MODEL``, ``MASLENS_CACHE``, the provider's key variable), the
    config file (``maslens config show``), then the defaults."""

    base_url: str
    api_key: str
    api_key_env: str
    #: ``read-write`` (default), ``off``, ``replay`` (answer only from the cache) or
    #: ``export:FILE`` (write uncached requests to a batch file).
    cache: str
    cache_path: PathLike
    max_calls: int
    max_tokens_total: int
    max_cost: float
    concurrency: int
    request_timeout: float
    max_retries: int
    prices: PathLike
    config: PathLike
    usage_log: PathLike
    threads: int
    context_size: int


_LLM_KEYS = frozenset(LlmOptions.__annotations__)


def _check_llm(function: str, options: Mapping[str, Any]) -> None:
    """Keyword arguments that are neither the function's own nor LLM options are typos: refuse
    them as Python does (``**llm`` would otherwise swallow them)."""
    unknown = sorted(set(options) - _LLM_KEYS)
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")


def _clean(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (os.fspath(v) if isinstance(v, os.PathLike) else v) for k, v in options.items() if v is not None}


class Model:
    """A model opened once and used across calls: the embedded default, any OpenAI-compatible
    server (``openai:NAME@http://host:port/v1``, ``maslens serve-model`` included), OpenAI,
    Anthropic, Gemini, Ollama, vLLM (docs/llm.md). The cache, budgets and usage totals belong to
    the model and add up over every call that uses it."""

    def __init__(self, spec: str | None = None, **options: Unpack[LlmOptions]) -> None:
        _check_llm("Model", options)
        self._native = _native.Model(spec, _clean(options))

    @property
    def id(self) -> str:
        """``provider:MODEL``."""
        return self._native.id

    def usage(self) -> dict[str, Any]:
        """Calls, cache hits, tokens and cost so far, in total and per stage."""
        return self._native.usage()

    def exported(self) -> int:
        """Requests written to the batch file (``cache="export:FILE"``)."""
        return self._native.exported()

    def __repr__(self) -> str:
        return f"Model({self.id!r})"


ModelArg = Union[Model, str, None]


def _model(model: ModelArg, options: Mapping[str, Any]) -> _native.Model:
    if isinstance(model, Model):
        if options:
            raise OptionsError(
                f"LLM options ({', '.join(sorted(options))}) go to Model(...) when you pass an opened Model"
            )
        return model._native
    if model is not None and not isinstance(model, str):
        raise OptionsError(f"model: expected a model spec (str) or a maslens.Model, not {type(model).__name__}")
    return _native.Model(model, _clean(options))


def read(paths: PathLike | Sequence[PathLike], *, format: str = "auto", strict: bool = False) -> TraceList:
    """Every trace under ``paths`` (files or directories; Who&When, Aegis-Bench, chat
    transcripts, native JSON/JSONL, auto-detected per file unless ``format`` says).

    A record that cannot be read is skipped with a warning and listed in ``.errors`` (file,
    record, path, message); ``strict=True`` raises :class:`TraceError` for the first one instead.
    """
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    traces, errors = _native.read([os.fspath(p) for p in items], format)
    if errors:
        if strict:
            e = errors[0]
            err = TraceError(e["text"])
            err.file, err.record, err.path, err.message = e["file"], e["record"], e["path"], e["message"]
            raise err
        for e in errors:
            warnings.warn(f"skipped: {e['text']}", stacklevel=2)
    return TraceList(traces, errors)


def _traces(traces: Traces) -> list[Trace]:
    if isinstance(traces, Trace):
        return [traces]
    if isinstance(traces, (str, os.PathLike)):
        return list(read(traces))
    if isinstance(traces, Mapping):
        return [Trace.from_dict(dict(traces))]
    out: list[Trace] = []
    for i, t in enumerate(traces):
        if isinstance(t, Trace):
            out.append(t)
        elif isinstance(t, (str, os.PathLike)):
            out.extend(read(t))
        elif isinstance(t, Mapping):
            out.append(Trace.from_dict(dict(t), name=f"traces[{i}]"))
        else:
            raise TraceError(f"traces[{i}]: expected a Trace, a path or a dict, not {type(t).__name__}")
    return out


#: ``stacked``: the LLM pipeline's ballots and the learned prior combined by cross-validated weights,
#: falling back to the prior when the model abstains or answers incoherently (the one default of
#: ``locate``, ``eval_locate``, the CLI and ``maslens serve``); ``llm``: AgentLocate alone;
#: ``prior``: no model.
Method = Literal["stacked", "llm", "prior"]
#: Which pair ``eval_locate`` scores: ``coherent`` (the verdict's primary pair, the default) or
#: ``independent`` (Who&When's tables: the agent-level and step-level answers apart).
PairRule = Literal["coherent", "independent"]
Protocol = Literal["all-at-once", "step-by-step", "binary-search", "a2p", "taxonomy", "echo", "counterfactual"]
#: AgentLocate's outputs (section 5): ``verified`` (Variant II, the Evaluators' vote; old name
#: ``full``), ``judge`` (Variant I, the Judge's hypothesis; old name ``judge-only``), ``judge-ft``
#: (eq. 6, the Judge with a fine-tuned model), ``evaluators-only`` (maslens's addition).
Variant = Literal["verified", "judge", "judge-ft", "evaluators-only", "full", "judge-only"]
Style = Literal["base", "concise", "evidence"]
ErrorModes = Literal["auto", "aegis", "none"]


def _locate_options(
    method: Method,
    protocol: Protocol,
    variant: Variant,
    evaluators: Sequence[Style],
    with_ground_truth: bool,
    error_modes: ErrorModes,
    max_answer_tokens: int,
    prior: PathLike | None,
    prior_weight: float,
    prior_narrowing: bool,
    stack: PathLike | None = None,
    allow_non_acting: bool = False,
    pair_rule: PairRule = "coherent",
) -> dict[str, Any]:
    return _clean(
        {
            "method": method,
            "protocol": protocol,
            "variant": variant,
            "evaluators": list(evaluators),
            "with_ground_truth": with_ground_truth,
            "error_modes": error_modes,
            "max_answer_tokens": max_answer_tokens,
            "prior": prior,
            "prior_weight": prior_weight,
            "prior_narrowing": prior_narrowing,
            "stack": stack,
            "allow_non_acting": allow_non_acting,
            "pair_rule": pair_rule,
        }
    )


def _evaluator_models(specs: Sequence[Model | str], options: Mapping[str, Any]) -> list[_native.Model]:
    return [s._native if isinstance(s, Model) else _native.Model(s, _clean(options)) for s in specs]


def locate(
    traces: Traces,
    *,
    method: Method = "stacked",
    model: ModelArg = None,
    protocol: Protocol = "all-at-once",
    variant: Variant = "verified",
    evaluators: Sequence[Style] = ("base", "concise", "evidence"),
    evaluator_models: Sequence[Model | str] = (),
    with_ground_truth: bool = False,
    error_modes: ErrorModes = "auto",
    max_answer_tokens: int = 384,
    prior: PathLike | None = None,
    prior_weight: float = 1.0,
    prior_narrowing: bool = False,
    stack: PathLike | None = None,
    allow_non_acting: bool = False,
    progress: ProgressArg = None,
    **llm: Unpack[LlmOptions],
) -> Verdicts:
    """Which agent and which step decided each run's failure (``maslens locate``).

    ``method="stacked"`` (default, as on the CLI): the LLM pipeline's ballots and the learned prior
    combined by weights fit by cross-validation (``stack``: ``builtin``, ``generic`` or a weights
    file from ``maslens eval stack``), the prior alone when the model abstains or answers
    incoherently; ``method="llm"``: AgentLocate, a Judge (``protocol``) re-checked by Evaluators
    (``evaluators`` styles, ``evaluator_models``) and a confidence-weighted vote (``variant`` picks
    the output); ``method="prior"``: the learned localizer, no model. ``prior="builtin"`` (or a probabilities
    file) lets the prior vote in the LLM pipeline; ``prior_narrowing`` lets it pick the steps a
    long trace shows in full. ``model`` is a :class:`Model` or a spec opened with ``llm``
    options for this call.

    Each verdict's ``agent`` acts at its ``step`` and is never a tool, terminal or the human user
    unless ``allow_non_acting``; ``alternatives`` lists the other answers (a method's agent-level
    answer where it differs, runner-ups), each saying what it is.
    """
    _check_llm("locate", llm)
    ts = _traces(traces)
    opts = _locate_options(
        method, protocol, variant, evaluators, with_ground_truth, error_modes,
        max_answer_tokens, prior, prior_weight, prior_narrowing, stack, allow_non_acting,
    )
    if method != "prior":
        m: _native.Model | None = _model(model, llm)
        evs = _evaluator_models(evaluator_models, llm)
    else:
        m, evs = None, []
    with progress_callback(progress, "locate", len(ts)) as cb:
        out = json.loads(_native.locate(ts, m, evs, opts, cb))
    steps = {t.id: t for t in ts}
    verdicts = Verdicts(
        (Verdict._from(e, _actors(steps.get(str(e.get("trace"))))) for e in out["results"]),
        problems=out["problems"],
        stopped=out["stopped"],
    )
    for p in verdicts.problems:
        warnings.warn(p, stacklevel=2)
    if verdicts.stopped:
        warnings.warn(f"stopped early: {verdicts.stopped}; rerun to resume from the cache", stacklevel=2)
    return verdicts


def _actors(trace: Trace | None) -> dict[int, str] | None:
    if trace is None:
        return None
    return {int(s["index"]): str(s["agent"]) for s in trace.steps}


def scan(
    traces: Traces,
    *,
    model: ModelArg = None,
    judges: Sequence[Model | str] = (),
    min_judges: int | None = None,
    absorption: bool = True,
    count_unsupported: bool = False,
    counting: Literal["maslens", "paper"] = "maslens",
    window_tokens: int | None = None,
    overlap: int = 2,
    detect_max_tokens: int = 1024,
    max_events: int = 10,
    absorb_max_tokens: int = 256,
    seed: int = 0,
    weights: PathLike | None = None,
    progress: ProgressArg = None,
    **llm: Unpack[LlmOptions],
) -> ScanResult:
    """Implicit failures (MASIF) in successful and failed runs alike (``maslens scan``): error
    types, evidence, how each was absorbed, severity-weighted cost and risk per trace, and the
    corpus report. ``judges`` adds models for multi-judge mode (``min_judges`` of them must agree)."""
    _check_llm("scan", llm)
    ts = _traces(traces)
    models = [_model(model, llm), *_evaluator_models(judges, llm)]
    opts = _clean(
        {
            "weights": weights,
            "min_judges": min_judges,
            "absorption": absorption,
            "count_unsupported": count_unsupported,
            "counting": counting,
            "window_tokens": window_tokens,
            "overlap": overlap,
            "detect_max_tokens": detect_max_tokens,
            "max_events": max_events,
            "absorb_max_tokens": absorb_max_tokens,
            "seed": seed,
        }
    )
    with progress_callback(progress, "scan", len(ts)) as cb:
        file = json.loads(_native.scan(ts, models, opts, cb))
    result = ScanResult._from(file)
    for e in result.errors:
        warnings.warn(e, stacklevel=2)
    return result


def credit(
    traces: Traces,
    *,
    model: ModelArg = None,
    segment: Literal["auto", "rounds", "phases", "windows"] = "auto",
    window: int = 5,
    lambda_: float = 0.5,
    critic_max_tokens: int = 128,
    max_step_chars: int = 1500,
    progress: ProgressArg = None,
    **llm: Unpack[LlmOptions],
) -> CreditResult:
    """Structural credit per role and temporal credit per round (or phase, or window of steps),
    scored by LLM critics (``maslens credit``). ``lambda_`` weighs the two critic scores
    (c = lambda*q + (1-lambda)*p)."""
    _check_llm("credit", llm)
    ts = _traces(traces)
    m = _model(model, llm)
    opts = {
        "segment": segment,
        "window": window,
        "lambda": lambda_,
        "critic_max_tokens": critic_max_tokens,
        "max_step_chars": max_step_chars,
    }
    with progress_callback(progress, "credit", len(ts)) as cb:
        run = json.loads(_native.credit(ts, m, opts, m.concurrency, cb))
    result = CreditResult._from(run)
    for e in result.errors:
        warnings.warn(e, stacklevel=2)
    return result


def advantages(records: Iterable[Mapping[str, Any]]) -> Advantages:
    """IF-GRPO advantages (MASIF eq. 1-4) of trajectories ``{"group", "id", "success",
    "if_cost"}`` (``maslens advantages``): successes ranked by implicit-failure cost inside their
    group, failures below every success. A record that cannot be used is left out with a
    warning naming it (``.warnings``)."""
    lines = []
    for i, r in enumerate(records):
        try:
            lines.append(json.dumps(dict(r), allow_nan=True))
        except (TypeError, ValueError) as e:
            raise TraceError(f"records[{i}]: not a JSON-like dict: {e}") from e
    out = json.loads(_native.advantages("\n".join(lines)))
    result = Advantages((Advantage(**a) for a in out["advantages"]), warnings=out["warnings"])
    for w in result.warnings:
        warnings.warn(w, stacklevel=2)
    return result


def prior_eval(traces: Traces, *, model: PathLike | None = None, seed: int = 7, bootstrap: int = 2000) -> dict[str, Any]:
    """Evaluate a prior model (the built-in one, or the file ``model`` that :func:`prior_train`
    wrote) on labelled traces next to the baselines (``maslens prior eval --json``): the report as
    a dict. When the model was trained on some of these traces the figures are in-sample: the
    report's ``"in_sample"`` says so and a warning is issued."""
    path = None if model is None else os.fspath(model)
    report: dict[str, Any] = json.loads(_native.prior_eval(_traces(traces), path, seed, bootstrap))
    if report.get("in_sample"):
        warnings.warn(str(report["in_sample"]), stacklevel=2)
    return report


def prior_train(
    traces: Traces,
    out: PathLike,
    *,
    folds: int = 10,
    inner_folds: int = 5,
    alpha: float | None = None,
    agent_alpha: float | None = None,
    objective: Literal["pointwise", "listwise"] | None = None,
    pair_rule: Literal["independent", "agent-first"] = "independent",
    agent_head: bool = True,
    seed: int = 7,
    bootstrap: int = 2000,
) -> dict[str, Any]:
    """Train a prior model on labelled traces and write it to ``out`` (``maslens prior train``):
    nested cross-validation grouped by task question with the configuration chosen inside, then
    the model chosen on all traces; ``alpha``, ``agent_alpha`` or ``objective`` fix one
    configuration instead. ``folds=0`` skips the cross-validation. Returns the report as a dict;
    the model records the traces it was trained on, so :func:`prior_eval` on them says in-sample."""
    text = _native.prior_train(
        _traces(traces), os.fspath(out), folds, inner_folds, alpha, agent_alpha, objective, pair_rule, agent_head, seed, bootstrap
    )
    report: dict[str, Any] = json.loads(text)
    return report


def inject(
    out: PathLike,
    debate: str | PathLike | None = None,
    *,
    dataset: str | None = None,
    model: ModelArg = None,
    questions: int = 20,
    kinds: Sequence[Literal["wrong-fact", "dropped-instruction"]] = ("wrong-fact", "dropped-instruction"),
    per_run: int = 4,
    seed: int = 0,
    simulation: bool = False,
    progress: ProgressArg = None,
    **llm: Unpack[LlmOptions],
) -> dict[str, Any]:
    """Fault injection into a debate's successful runs (``maslens inject``, docs/inject.md): for
    the first ``questions`` of ``dataset`` (``mmlu:PATH``, ...; else the configuration's
    ``[data]``) in a seeded order, a clean debate, then up to ``per_run`` runs with one fault put
    into one role's turn. The runs a fault turned wrong are written to ``out/traces.jsonl`` as
    labelled failure traces (training data for :func:`prior_train`), every question's outcome to
    ``out/summary.json``; returns what ``summary.json`` holds, as a dict. ``debate`` is the debate
    configuration (a TOML file's path, or its text, as ``maslens inject CONFIG`` takes it); every
    role calls ``model``.
    ``simulation=True`` runs the simulated system (a deterministic test environment, not a model)
    on synthetic questions. Records of the dataset that cannot be read are warned about and
    skipped; a rerun resumes through the model's cache."""
    _check_llm("inject", llm)
    text = path = None
    if isinstance(debate, str) and "\n" in debate:
        text = debate
    elif debate is not None:
        path = os.fspath(debate)
    m = None if simulation and model is None and not llm else _model(model, llm)
    with progress_callback(progress, "inject", questions) as cb:
        result = json.loads(
            _native.inject(os.fspath(out), text, path, dataset, m, questions, list(kinds), per_run, seed, simulation, cb)
        )
    for skipped in result["skipped"]:
        warnings.warn(f"skipped {skipped}", stacklevel=2)
    summary: dict[str, Any] = result["summary"]
    return summary


def prior_rank(traces: Traces, *, model: PathLike | None = None, top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` most likely (agent, step) candidates of each trace under a prior model (the
    built-in one, or the file ``model``), one dict per trace (``maslens prior rank --json``)."""
    path = None if model is None else os.fspath(model)
    ranked: list[dict[str, Any]] = json.loads(_native.prior_rank(_traces(traces), path, top))
    return ranked


def eval_locate(
    dataset: str,
    *,
    method: Method = "stacked",
    model: ModelArg = None,
    protocol: Protocol = "all-at-once",
    variant: Variant = "verified",
    evaluators: Sequence[Style] = ("base", "concise", "evidence"),
    evaluator_models: Sequence[Model | str] = (),
    with_ground_truth: bool = False,
    error_modes: ErrorModes = "auto",
    max_answer_tokens: int = 384,
    prior: PathLike | None = None,
    prior_weight: float = 1.0,
    prior_narrowing: bool = False,
    stack: PathLike | None = None,
    allow_non_acting: bool = False,
    pair_rule: PairRule = "coherent",
    compat_substring: bool = False,
    split: float | None = None,
    seed: int = 0,
    predictions: PathLike | None = None,
    limit: int | None = None,
    subset: str | None = None,
    tolerances: Sequence[int] = (0, 1, 2, 3, 5, 10, 20),
    out: PathLike | None = None,
    export_refinement: PathLike | None = None,
    refine_targets: Literal["verified", "gold"] = "verified",
    round: int = 1,
    base_model: str = "HuggingFaceTB/SmolLM2-135M-Instruct",
    progress: ProgressArg = None,
    **llm: Unpack[LlmOptions],
) -> EvalReport:
    """Benchmark failure localization on labelled traces (``maslens eval locate``): ``dataset``
    is ``whowhen:DIR``, ``aegis:FILE`` or a path. Exact agent and step accuracy with bootstrap
    intervals, the trivial baselines on the same cases, per-case rows; ``out`` writes
    report.json, report.md, report.html and verdicts.jsonl there. ``pair_rule`` says which pair
    is scored (``coherent``: the verdict's primary pair; ``independent``: Who&When's rule, the
    agent-level and step-level answers apart); the report records it."""
    _check_llm("eval_locate", llm)
    opts = _locate_options(
        method, protocol, variant, evaluators, with_ground_truth, error_modes,
        max_answer_tokens, prior, prior_weight, prior_narrowing, stack, allow_non_acting, pair_rule,
    )
    eopts = _clean(
        {
            "compat_substring": compat_substring,
            "split": split,
            "seed": seed,
            "predictions": predictions,
            "limit": limit,
            "subset": subset,
            "tolerances": list(tolerances),
            "out": out,
            "export_refinement": export_refinement,
            "refine_targets": refine_targets,
            "round": round,
            "base_model": base_model,
        }
    )
    needs_model = (predictions is None and method != "prior") or export_refinement is not None
    res = _run_eval(
        "eval locate", needs_model, model, evaluator_models, llm, progress,
        lambda m, evs, cb: _native.eval_locate(dataset, m, evs, opts, eopts, cb),
    )
    return EvalReport(report=res["report"], problems=res["problems"], markdown=res["markdown"])


def _run_eval(
    name: str,
    needs_model: bool,
    model: ModelArg,
    evaluator_models: Sequence[Model | str],
    llm: Mapping[str, Any],
    progress: ProgressArg,
    native: Callable[[_native.Model | None, list[_native.Model], Any], str],
) -> dict[str, Any]:
    """An evaluation (``eval_locate``, ``eval_compare``): its models when it needs them, its
    progress, the native call's JSON; each problem is also a warning at the caller's line."""
    m = _model(model, llm) if needs_model else None
    evs = _evaluator_models(evaluator_models, llm) if needs_model else []
    with progress_callback(progress, name) as cb:
        res: dict[str, Any] = json.loads(native(m, evs, cb))
    for p in res["problems"]:
        warnings.warn(p, stacklevel=3)
    return res


def modes(
    traces: Traces,
    verdicts: Iterable[Verdict] | None = None,
    *,
    outcome: Literal["failure", "unknown", "success", "any"] = "failure",
    system: str | None = None,
    similarity: float = 0.3,
    examples: int = 3,
    gold: bool = False,
    summarize: bool = False,
    summarize_top: int = 10,
    model: ModelArg = None,
    **llm: Unpack[LlmOptions],
) -> ModesReport:
    """Failure modes across runs (``maslens modes``): the traces of ``outcome`` grouped per system
    by responsible agent, most severe implicit-failure type and reason (no model needed).
    ``verdicts`` (what :func:`locate` returned) give each trace its localization; without them,
    the verdicts the traces carry (``maslens locate -o``). ``gold=True`` scores the modes against
    the traces' gold decisive agents; ``summarize=True`` asks ``model`` for one sentence per mode
    (the ``summarize_top`` largest of each system)."""
    _check_llm("modes", llm)
    ts = _traces(traces)
    vs = None
    if verdicts is not None:
        vs = json.dumps([v.raw for v in verdicts if v.error is None and v.raw])
    m = _model(model, llm) if summarize else None
    opts = _clean(
        {
            "outcome": outcome,
            "system": system,
            "similarity": similarity,
            "examples": examples,
            "gold": gold,
            "summarize_top": summarize_top,
        }
    )
    res = json.loads(_native.modes(ts, vs, m, opts))
    report = ModesReport(report=res["report"], markdown=res["markdown"])
    for n in report.notes:
        warnings.warn(n, stacklevel=2)
    return report


def propose_fix(
    traces: Traces,
    mode: str,
    verdicts: Iterable[Verdict] | None = None,
    *,
    outcome: Literal["failure", "unknown", "success", "any"] = "failure",
    system: str | None = None,
    similarity: float = 0.3,
    model: ModelArg = None,
    **llm: Unpack[LlmOptions],
) -> FixProposal:
    """A fix proposed for failure mode ``mode`` (its id in :func:`modes`' report, grouped with
    the same ``traces``, ``verdicts``, ``outcome``, ``system`` and ``similarity``; ``maslens modes
    --propose``): ``model`` rewrites the mode's agent's system prompt, as the traces record it,
    from the decisive steps and reasons of up to 8 example runs (docs/modes.md). A proposal, not
    a verified fix: :func:`maslens.improve` verifies a change on the user's system. An unknown
    mode, a mode without an agent or traces without its prompt raise :class:`OptionsError`;
    a rewrite the model could not give returns a proposal whose ``rejected`` says why."""
    _check_llm("propose_fix", llm)
    ts = _traces(traces)
    vs = None
    if verdicts is not None:
        vs = json.dumps([v.raw for v in verdicts if v.error is None and v.raw])
    opts = _clean({"outcome": outcome, "system": system, "similarity": similarity})
    res = json.loads(_native.modes_propose(ts, mode, _model(model, llm), vs, opts))
    return FixProposal(proposal=res["proposal"], markdown=res["markdown"])


def _in_thread(f: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """The async variant of ``f``: the same call on a worker thread (``asyncio.to_thread``),
    so the event loop goes on while models answer (the native code releases the GIL)."""

    @functools.wraps(f)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(f, *args, **kwargs)

    run.__doc__ = f"Async :func:`{f.__name__}` (same arguments; runs on a worker thread)."
    return run


locate_async = _in_thread(locate)
scan_async = _in_thread(scan)
credit_async = _in_thread(credit)
eval_locate_async = _in_thread(eval_locate)
advantages_async = _in_thread(advantages)
modes_async = _in_thread(modes)
propose_fix_async = _in_thread(propose_fix)
