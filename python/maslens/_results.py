"""Typed results of the methods. Each keeps the full JSON maslens wrote (``raw``, ``to_dict()``);
collections add ``to_pandas()`` (needs ``pandas``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from ._native import Trace

T = TypeVar("T")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("to_pandas() needs pandas: pip install 'maslens[pandas]'") from e
    return pandas


class Results(list[T], Generic[T]):
    """A list of results with ``to_dicts()`` and ``to_pandas()``."""

    def to_dicts(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self]  # type: ignore[attr-defined]

    def _rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self]  # type: ignore[attr-defined]

    def to_pandas(self) -> pandas.DataFrame:
        """One row per result (the flat fields; ``raw`` holds the rest)."""
        frame: pandas.DataFrame = _pandas().DataFrame(self._rows())
        return frame


class TraceList(Results["Trace"]):
    """Traces read from files, with the records that could not be read (``errors``: dicts with
    ``file``, ``record``, ``path``, ``message``)."""

    errors: list[dict[str, Any]]

    def __init__(self, traces: Iterable[Trace] = (), errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(traces)
        self.errors = errors or []

    def to_dicts(self) -> list[dict[str, Any]]:
        return [t.to_dict() for t in self]

    def _rows(self) -> list[dict[str, Any]]:
        return [
            {
                "id": t.id,
                "steps": len(t),
                "agents": len(t.agents),
                "outcome": t.outcome,
                "format": t.source_format,
                "task": t.task,
            }
            for t in self
        ]


@dataclass(frozen=True)
class Verdict:
    """Where a run failed: the responsible agent and the decisive step (``None`` when the method
    abstained or failed on this trace; ``error`` / ``abstain_reason`` say why)."""

    trace: str
    method: str
    #: The responsible agent: it acts at ``step`` (the one verdict's primary pair).
    agent: str | None
    step: int | None
    #: The agent acting at ``step`` (always ``agent``: kept for code written before the one verdict).
    step_agent: str | None
    #: The method's probability for (agent, step), when it has one.
    confidence: float | None
    rationale: str
    abstain_reason: str | None
    error: str | None
    raw: dict[str, Any] = field(repr=False)
    #: The verdict for a person, as ``maslens locate`` prints it (several lines).
    text: str = field(default="", repr=False)
    #: Other answers, best first: dicts with ``agent``, ``step``, ``probability``, ``kind``.
    alternatives: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: The model and the maslens revision that gave the verdict.
    model: str | None = None
    revision: str | None = None

    def __str__(self) -> str:
        if self.error is not None:
            return f"{self.trace}: error: {self.error}"
        return self.text or f"{self.trace}: {self.agent} at step {self.step}"

    @property
    def ok(self) -> bool:
        """A location was found."""
        return self.agent is not None and self.step is not None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw) if self.error is None else {"trace": self.trace, "error": self.error}

    def row(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "method": self.method,
            "agent": self.agent,
            "step": self.step,
            "step_agent": self.step_agent,
            "confidence": self.confidence,
            "rationale": self.rationale,
            "abstain_reason": self.abstain_reason,
            "error": self.error,
        }

    @staticmethod
    def _from(entry: dict[str, Any], steps_agents: dict[int, str] | None = None) -> Verdict:
        trace = str(entry.get("trace", ""))
        if "error" in entry:
            return Verdict(trace, "", None, None, None, None, "", None, str(entry["error"]), {})
        v: dict[str, Any] = entry.get("verdict") or {}
        step = v.get("step")
        step_agent = steps_agents.get(step) if step is not None and steps_agents is not None else None
        return Verdict(
            trace=trace,
            method=str(v.get("method", "")),
            agent=v.get("agent"),
            step=step,
            step_agent=step_agent if step_agent is not None else (v.get("agent") if step is not None else None),
            confidence=v.get("probability"),
            rationale=str(v.get("rationale") or ""),
            abstain_reason=v.get("abstain_reason"),
            error=None,
            raw=v,
            text="\n".join(str(line) for line in entry.get("text") or []),
            alternatives=list(v.get("alternatives") or []),
            model=v.get("model"),
            revision=v.get("revision"),
        )


class Verdicts(Results[Verdict]):
    """Verdicts in trace order. ``problems``: records skipped while loading (a prior file);
    ``stopped``: why the run stopped early (a budget), else ``None``."""

    problems: list[str]
    stopped: str | None

    def __init__(self, verdicts: Iterable[Verdict] = (), problems: list[str] | None = None, stopped: str | None = None) -> None:
        super().__init__(verdicts)
        self.problems = problems or []
        self.stopped = stopped

    def by_trace(self, trace_id: str) -> Verdict:
        for v in self:
            if v.trace == trace_id:
                return v
        raise KeyError(trace_id)


@dataclass(frozen=True)
class ImplicitFailure:
    """A local error that did not decide the outcome (MASIF): where, what type, how absorbed."""

    trace: str
    step: int
    agent: str
    error_type: str
    severity: str
    confidence: str
    description: str
    evidence: str
    absorption: str | None
    raw: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    def row(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "step": self.step,
            "agent": self.agent,
            "error_type": self.error_type,
            "severity": self.severity,
            "confidence": self.confidence,
            "absorption": self.absorption,
            "description": self.description,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class TraceScan:
    """One trace's scan: counted implicit failures, cost C, risk r = C / max(1, L)."""

    id: str
    outcome: str
    steps: int
    cost: float
    risk: float
    events: Results[ImplicitFailure]
    raw: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "outcome": self.outcome,
            "steps": self.steps,
            "implicit_failures": len(self.events),
            "cost": self.cost,
            "risk": self.risk,
        }


@dataclass(frozen=True)
class ScanResult:
    """A scan over traces: the corpus ``report`` and one :class:`TraceScan` per scanned trace;
    ``errors``: traces that could not be scanned. ``raw`` is the scan file (``maslens scan -o``)."""

    traces: Results[TraceScan]
    report: dict[str, Any]
    errors: list[str]
    raw: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    def to_pandas(self) -> pandas.DataFrame:
        """One row per trace."""
        return self.traces.to_pandas()

    def events(self) -> Results[ImplicitFailure]:
        """Every counted implicit failure of every trace."""
        out: Results[ImplicitFailure] = Results()
        for t in self.traces:
            out.extend(t.events)
        return out

    @staticmethod
    def _from(file: dict[str, Any]) -> ScanResult:
        scans: Results[TraceScan] = Results()
        for s in file.get("traces", []):
            events: Results[ImplicitFailure] = Results()
            for e in s.get("events", []):
                ab = e.get("absorption")
                events.append(
                    ImplicitFailure(
                        trace=s["id"],
                        step=int(e["step"]),
                        agent=str(e["agent"]),
                        error_type=str(e["error_type"]),
                        severity=str(e["severity"]),
                        confidence=str(e["confidence"]),
                        description=str(e.get("description", "")),
                        evidence=str(e.get("evidence", "")),
                        absorption=(ab.get("label") if isinstance(ab, dict) else None),
                        raw=e,
                    )
                )
            scans.append(
                TraceScan(
                    id=s["id"],
                    outcome=str(s.get("outcome", "unknown")),
                    steps=int(s.get("steps", 0)),
                    cost=float(s.get("cost", 0.0)),
                    risk=float(s.get("risk", 0.0)),
                    events=events,
                    raw=s,
                )
            )
        return ScanResult(traces=scans, report=file.get("report", {}), errors=list(file.get("errors", [])), raw=file)


@dataclass(frozen=True)
class TraceCredit:
    """Credit of one trace: per agent and segment the fused credit ``c`` (and critic scores
    ``q``, ``p``), and per segment the temporal credit."""

    trace: str
    agents: list[str]
    segments: list[str]
    c: list[list[float | None]]
    segment_score: list[float | None]
    raw: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    def rows(self) -> Iterator[dict[str, Any]]:
        for i, a in enumerate(self.agents):
            for j, s in enumerate(self.segments):
                yield {"trace": self.trace, "agent": a, "segment": s, "credit": self.c[i][j]}


@dataclass(frozen=True)
class CreditResult:
    """Structural (role) and temporal (segment) credit over traces. ``table``: the corpus table
    (``roles``, ``rounds``, ``cell``, ``role_credit``, ``round_credit``); ``errors``: traces the
    critics could not score. ``raw`` is the credit file (``maslens credit -o``). ``systems``: when
    the traces come from several multi-agent systems (traces sharing no agent name), one
    ``{"traces", "agents", "table"}`` per system (``table``, ``role_credit`` and ``weakest_role``
    then mix the systems' roles); empty for one system."""

    model: str
    table: dict[str, Any]
    traces: list[TraceCredit]
    errors: list[str]
    raw: dict[str, Any] = field(repr=False)
    systems: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    @property
    def role_credit(self) -> dict[str, float | None]:
        return dict(zip(self.table.get("roles", []), self.table.get("role_credit", []), strict=False))

    @property
    def weakest_role(self) -> str | None:
        scored = [(v, r) for r, v in self.role_credit.items() if v is not None]
        return min(scored)[1] if scored else None

    def to_pandas(self) -> pandas.DataFrame:
        """The corpus table: one row per role, one column per segment (fused credit)."""
        roles = self.table.get("roles", [])
        frame: pandas.DataFrame = _pandas().DataFrame(self.table.get("cell", []), index=roles, columns=self.table.get("rounds", []))
        return frame

    def cells_to_pandas(self) -> pandas.DataFrame:
        """Long form over every trace: trace, agent, segment, credit."""
        frame: pandas.DataFrame = _pandas().DataFrame([r for t in self.traces for r in t.rows()])
        return frame

    @staticmethod
    def _from(run: dict[str, Any]) -> CreditResult:
        traces = [
            TraceCredit(
                trace=t["trace_id"],
                agents=list(t.get("agents", [])),
                segments=list(t.get("segments", [])),
                c=t.get("c", []),
                segment_score=t.get("segment_score", []),
                raw=t,
            )
            for t in run.get("traces", [])
        ]
        return CreditResult(
            model=str(run.get("model", "")),
            table=run.get("table", {}),
            traces=traces,
            errors=list(run.get("errors", [])),
            raw=run,
            systems=list(run.get("systems", [])),
        )


@dataclass(frozen=True)
class Advantage:
    """IF-GRPO advantage of one trajectory (MASIF eq. 1-4)."""

    group: str
    id: str
    advantage: float

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "id": self.id, "advantage": self.advantage}

    def row(self) -> dict[str, Any]:
        return self.to_dict()


class Advantages(Results[Advantage]):
    """Advantages in input order; ``warnings``: records left out (file, record, field)."""

    warnings: list[str]

    def __init__(self, items: Iterable[Advantage] = (), warnings: list[str] | None = None) -> None:
        super().__init__(items)
        self.warnings = warnings or []


@dataclass(frozen=True)
class EvalReport:
    """``maslens eval locate``'s report (``report.json``): metrics with intervals, baselines,
    per-case rows. ``problems``: records skipped; ``markdown``: the report as Markdown."""

    report: dict[str, Any]
    problems: list[str]
    markdown: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.report)

    @property
    def cases(self) -> int:
        return int(self.report.get("cases", 0))

    def to_pandas(self) -> pandas.DataFrame:
        """One row per evaluated case (``report["per_case"]``)."""
        frame: pandas.DataFrame = _pandas().DataFrame(self.report.get("per_case", []))
        return frame


@dataclass(frozen=True)
class CompareReport:
    """``maslens eval compare``'s report (``compare.json``): per method its accuracy, usage and
    by-length rows (``report["methods"]``), the trivial baselines, and paired tests between every
    two methods (``report["paired"]``). ``problems``: records skipped or cases failed;
    ``markdown``: the report as Markdown."""

    report: dict[str, Any]
    problems: list[str]
    markdown: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.report)

    def to_pandas(self) -> pandas.DataFrame:
        """One row per method: name, cases, agent and step accuracy, calls, cost."""
        rows = []
        for m in self.report.get("methods", []):
            agent, step = m.get("agent_accuracy") or {}, m.get("step_accuracy") or {}
            usage = m.get("usage") or {}
            rows.append({
                "method": m["name"], "cases": m["cases"],
                "agent": agent.get("value"), "step": step.get("value"),
                "calls": usage.get("calls"), "cost_usd": usage.get("cost_usd"),
            })
        frame: pandas.DataFrame = _pandas().DataFrame(rows)
        return frame


@dataclass(frozen=True)
class ModesReport:
    """Failure modes across runs (``maslens modes``): per system, failed runs grouped by the
    responsible agent, the most severe implicit-failure type and the reason's words. ``report`` is
    the JSON report (``maslens modes -o``); ``purity`` how the modes line up with gold agents
    (``gold=True`` and traces that carry them), else ``None``."""

    report: dict[str, Any] = field(repr=False)
    markdown: str = field(repr=False)

    @property
    def systems(self) -> list[dict[str, Any]]:
        return list(self.report.get("systems", []))

    @property
    def modes(self) -> list[dict[str, Any]]:
        """Every mode of every system, each with its ``system`` added, largest first per system."""
        return [{"system": s["system"], **m} for s in self.systems for m in s.get("modes", [])]

    @property
    def purity(self) -> dict[str, Any] | None:
        return self.report.get("purity")

    @property
    def notes(self) -> list[str]:
        return list(self.report.get("notes", []))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.report)

    def to_pandas(self) -> pandas.DataFrame:
        """One row per mode: system, agent, failure_type, words, runs, share, members."""
        cols = ["system", "id", "agent", "failure_type", "words", "runs", "share", "members"]
        frame: pandas.DataFrame = _pandas().DataFrame([{k: m.get(k) for k in cols} for m in self.modes], columns=cols)
        return frame


@dataclass(frozen=True)
class FixProposal:
    """A prompt change proposed for one failure mode (:func:`maslens.propose_fix`, ``maslens modes
    --propose``, the UI's "Propose a fix"). ``proposal`` is its JSON (``maslens --json modes
    --propose``); ``markdown`` the text the CLI prints. A proposal, not a verified fix."""

    proposal: dict[str, Any] = field(repr=False)
    markdown: str = field(repr=False)

    @property
    def agent(self) -> str:
        return str(self.proposal["agent"])

    @property
    def before(self) -> str:
        """The agent's system prompt as the traces recorded it."""
        return str(self.proposal["before"])

    @property
    def after(self) -> str | None:
        """The proposed prompt, or ``None`` when the model gave none (see :attr:`rejected`)."""
        p = self.proposal.get("rewrite", {}).get("prompt")
        return None if p is None else str(p)

    @property
    def rejected(self) -> str | None:
        r = self.proposal.get("rewrite", {}).get("rejected")
        return None if r is None else str(r)

    @property
    def examples(self) -> list[str]:
        """The runs whose decisive steps the rewrite was shown."""
        return [str(e) for e in self.proposal.get("examples", [])]

    def __repr__(self) -> str:
        state = "proposed" if self.after is not None else f"rejected: {self.rejected}"
        return f"FixProposal(agent={self.agent!r}, mode={self.proposal.get('mode')!r}, {state})"
