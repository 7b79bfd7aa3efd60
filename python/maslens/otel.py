"""Send a running system's OpenTelemetry spans to ``maslens serve``.

    import maslens.otel
    maslens.otel.instrument(endpoint="http://127.0.0.1:4318")   # before the agents run

sets up the OpenTelemetry SDK's tracer provider with an OTLP/HTTP exporter to
``{endpoint}/v1/traces`` and turns on the OpenInference instrumentors that are installed
(AutoGen AgentChat, LangChain/LangGraph, OpenAI, CrewAI, OpenAI Agents SDK, smolagents). ``maslens
serve`` assembles the spans into traces, diagnoses each finished run and writes the diagnosis
back (docs/serve.md). Needs ``pip install 'maslens[otel]'`` (and the instrumentor packages of
the frameworks you use).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

#: OpenInference instrumentors tried by ``instrument(frameworks="auto")``: (name, module, class).
INSTRUMENTORS: tuple[tuple[str, str, str], ...] = (
    ("autogen-agentchat", "openinference.instrumentation.autogen_agentchat", "AutogenAgentChatInstrumentor"),
    ("langchain", "openinference.instrumentation.langchain", "LangChainInstrumentor"),
    ("openai", "openinference.instrumentation.openai", "OpenAIInstrumentor"),
    ("crewai", "openinference.instrumentation.crewai", "CrewAIInstrumentor"),
    ("openai-agents", "openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor"),
    ("smolagents", "openinference.instrumentation.smolagents", "SmolagentsInstrumentor"),
)


class Instrumented:
    """What :func:`instrument` set up: the tracer ``provider``, the traces ``url`` spans go to,
    and the ``instrumentors`` turned on (by name). ``flush()`` sends buffered spans now;
    ``shutdown()`` flushes, turns the instrumentors off and stops the provider."""

    def __init__(self, provider: Any, url: str, instrumentors: dict[str, Any]) -> None:
        self.provider = provider
        self.url = url
        self.instrumentors = instrumentors

    def flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.provider.force_flush(timeout_millis))

    def shutdown(self) -> None:
        for inst in self.instrumentors.values():
            try:
                inst.uninstrument()
            except Exception:  # noqa: BLE001 - an instrumentor that cannot undo itself must not stop the others
                pass
        self.provider.shutdown()

    def __repr__(self) -> str:
        return f"Instrumented(url={self.url!r}, instrumentors={sorted(self.instrumentors)})"


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a ``maslens serve`` base URL (``/v1/traces`` added unless
    present)."""
    e = endpoint.rstrip("/")
    return e if e.endswith("/v1/traces") else e + "/v1/traces"


def instrument(
    endpoint: str | None = None,
    *,
    service_name: str = "maslens-app",
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    frameworks: str | Sequence[str] = "auto",
    batch: bool = True,
    set_global: bool = True,
) -> Instrumented:
    """Export spans to ``maslens serve`` at ``endpoint`` (default ``$MASLENS_ENDPOINT``, else
    ``http://127.0.0.1:4318``).

    ``token``: the server's ``--token`` (sent as a bearer header). ``frameworks``: ``"auto"``
    (every installed OpenInference instrumentor), ``"none"``, or names from
    :data:`INSTRUMENTORS`; a named one that is not installed raises ``ImportError``.
    ``batch=False`` exports each span as it ends (tests, short scripts). ``set_global``
    installs the provider as OpenTelemetry's global one, which instrumentors use.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as e:
        raise ImportError("maslens.otel needs the OpenTelemetry SDK: pip install 'maslens[otel]'") from e

    url = traces_url(endpoint or os.environ.get("MASLENS_ENDPOINT") or "http://127.0.0.1:4318")
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = OTLPSpanExporter(endpoint=url, headers=hdrs)
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    if set_global:
        trace.set_tracer_provider(provider)

    if isinstance(frameworks, str):
        wanted = {"auto": None, "none": []}.get(frameworks, [frameworks])
    else:
        wanted = list(frameworks)
    known = {name for name, _, _ in INSTRUMENTORS}
    for name in wanted or []:
        if name not in known:
            raise ValueError(f"frameworks: unknown instrumentor {name!r} (known: {', '.join(sorted(known))})")
    on: dict[str, Any] = {}
    for name, module, cls in INSTRUMENTORS:
        if wanted is not None and name not in wanted:
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError:
            if wanted is not None:
                raise
            continue
        inst = getattr(mod, cls)()
        inst.instrument(tracer_provider=provider)
        on[name] = inst
    return Instrumented(provider, url, on)
