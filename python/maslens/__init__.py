"""maslens: why did my multi-agent system fail, what went wrong quietly, which agent or round to
fix (docs/python.md).

    import maslens
    traces = maslens.read("runs/")                       # any format maslens reads
    verdicts = maslens.locate(traces, method="prior")    # who and when, no model
    verdicts.to_pandas()
    model = maslens.Model("openai:qwen@http://127.0.0.1:8080/v1")
    scan = maslens.scan(traces, model=model)             # implicit failures, risk
    credit = maslens.credit(traces, model=model)         # role x round credit
    modes = maslens.modes(traces, verdicts)              # failure modes across runs
    result = maslens.improve(system, tasks, model=model) # rewrite the blamed agents' prompts, verified

Traces from frameworks: :mod:`maslens.adapters` (AG2/AutoGen, AutoGen AgentChat, LangGraph,
OpenAI Agents SDK, CrewAI, OpenAI-style messages). Running systems: :func:`maslens.otel.instrument`
sends OpenTelemetry spans to ``maslens serve``.
"""

from ._api import (
    LlmOptions,
    Model,
    advantages,
    advantages_async,
    credit,
    credit_async,
    eval_locate,
    eval_locate_async,
    inject,
    locate,
    locate_async,
    modes,
    modes_async,
    prior_eval,
    prior_rank,
    prior_train,
    propose_fix,
    propose_fix_async,
    read,
    scan,
    scan_async,
)
from ._compare import eval_compare, eval_compare_async
from ._native import (
    BudgetExceeded,
    InternalError,
    MaslensError,
    ModelError,
    OptionsError,
    Trace,
    TraceError,
    has_local_model,
)
from ._native import version as _native_version
from ._results import (
    Advantage,
    Advantages,
    CompareReport,
    CreditResult,
    EvalReport,
    ImplicitFailure,
    FixProposal,
    ModesReport,
    Results,
    ScanResult,
    TraceCredit,
    TraceList,
    TraceScan,
    Verdict,
    Verdicts,
)
from .improve import ImproveResult, exact_match, improve
from .systems import AgentChatSystem, CrewAISystem, DebateSystem, FunctionSystem, LangGraphSystem, OpenAIAgentsSystem, Resumable, Run, System

__version__: str = _native_version()

__all__ = [
    "Advantage",
    "Advantages",
    "AgentChatSystem",
    "BudgetExceeded",
    "CreditResult",
    "CrewAISystem",
    "DebateSystem",
    "CompareReport",
    "EvalReport",
    "FunctionSystem",
    "ImplicitFailure",
    "ImproveResult",
    "LangGraphSystem",
    "InternalError",
    "LlmOptions",
    "MaslensError",
    "Model",
    "ModelError",
    "FixProposal",
    "ModesReport",
    "OpenAIAgentsSystem",
    "OptionsError",
    "Results",
    "Resumable",
    "Run",
    "ScanResult",
    "System",
    "Trace",
    "TraceCredit",
    "TraceError",
    "TraceList",
    "TraceScan",
    "Verdict",
    "Verdicts",
    "__version__",
    "advantages",
    "advantages_async",
    "credit",
    "credit_async",
    "eval_compare",
    "eval_compare_async",
    "eval_locate",
    "eval_locate_async",
    "exact_match",
    "has_local_model",
    "improve",
    "inject",
    "locate",
    "locate_async",
    "modes",
    "modes_async",
    "prior_eval",
    "prior_rank",
    "prior_train",
    "propose_fix",
    "propose_fix_async",
    "read",
    "scan",
    "scan_async",
]
