"""Shared OpenTelemetry plumbing for the producer scripts in tests/otel/.

One TracerProvider whose spans go to an OTLP/HTTP endpoint (protobuf or JSON, optionally gzip) and/or to a
dump file of OTLP/JSON lines (one ExportTraceServiceRequest per line, camelCase keys, hex trace/span ids,
64-bit integers as strings, enums as integers: the OTLP/JSON encoding of the OTLP specification).
Export failures are counted so the scripts can exit non-zero.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)


def add_export_args(parser: argparse.ArgumentParser, *, default_service: str) -> None:
    g = parser.add_argument_group("export")
    g.add_argument("--endpoint", help="full OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces")
    g.add_argument(
        "--also-endpoint",
        action="append",
        default=[],
        metavar="URL",
        help="send the same spans (protobuf) to this traces URL too (repeatable), e.g. Phoenix and maslens",
    )
    g.add_argument(
        "--encoding",
        choices=["protobuf", "json"],
        default="protobuf",
        help="request body: application/x-protobuf (default) or application/json "
        "(json needs the opentelemetry-exporter-otlp-json-http package)",
    )
    g.add_argument("--gzip", action="store_true", help="send Content-Encoding: gzip")
    g.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra HTTP header for the OTLP requests (repeatable), e.g. 'Authorization=Bearer TOKEN'",
    )
    g.add_argument("--timeout", type=float, default=10.0, help="seconds per export request (default 10)")
    g.add_argument(
        "--processor",
        choices=["batch", "simple"],
        default="batch",
        help="BatchSpanProcessor (few requests, default) or SimpleSpanProcessor (one request per span)",
    )
    g.add_argument(
        "--dump",
        metavar="FILE",
        help="also write every exported batch as one OTLP/JSON ExportTraceServiceRequest per line "
        "('-' for stdout is not allowed: stdout carries the summary)",
    )
    g.add_argument("--service-name", default=default_service, help=f"resource service.name (default {default_service})")


def _hex(b64: str) -> str:
    return base64.b64decode(b64).hex()


def proto_to_otlp_json(request: Any) -> dict[str, Any]:
    """ExportTraceServiceRequest (protobuf message) -> OTLP/JSON dict.

    google.protobuf.json_format already gives lowerCamelCase names, int64 as strings and (with
    use_integers_for_enums) integer enums; OTLP/JSON differs from the protobuf JSON mapping only in that
    traceId/spanId/parentSpanId are hex strings rather than base64.
    """
    from google.protobuf.json_format import MessageToDict

    d = MessageToDict(request, use_integers_for_enums=True)
    for rs in d.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in span:
                        span[k] = _hex(span[k])
                for link in span.get("links", []):
                    for k in ("traceId", "spanId"):
                        if k in link:
                            link[k] = _hex(link[k])
    return d


def spans_to_otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """SDK spans -> one OTLP/JSON ExportTraceServiceRequest (a single line of JSON)."""
    try:
        # The OpenTelemetry JSON encoder (beta package) when installed ...
        from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

        return json.dumps(json.loads(encode_spans(spans).to_json()), separators=(",", ":"))
    except ImportError:
        # ... otherwise the protobuf encoder + our hex fix-up.
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_pb

        return json.dumps(proto_to_otlp_json(encode_pb(spans)), separators=(",", ":"))


class TeeExporter(SpanExporter):
    """Sends each batch to an OTLP exporter and/or appends it to a dump file; counts failures and ids."""

    def __init__(self, otlp: SpanExporter | None, dump_path: str | None) -> None:
        self._otlp = otlp
        self._dump = open(dump_path, "w", encoding="utf-8") if dump_path else None
        self._lock = threading.Lock()
        self.failed_batches = 0
        self.exported_spans = 0
        self.trace_ids: list[str] = []  # in first-seen order
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            for s in spans:
                tid = format(s.context.trace_id, "032x")
                if tid not in self.trace_ids:
                    self.trace_ids.append(tid)
            self.spans.extend(spans)
            ok = True
            if self._dump is not None:
                self._dump.write(spans_to_otlp_json(spans) + "\n")
                self._dump.flush()
            if self._otlp is not None:
                ok = self._otlp.export(spans) == SpanExportResult.SUCCESS
            if ok:
                self.exported_spans += len(spans)
            else:
                self.failed_batches += 1
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        if self._otlp is not None:
            self._otlp.shutdown()
        if self._dump is not None:
            self._dump.close()
            self._dump = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _parse_headers(items: list[str]) -> dict[str, str]:
    headers = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--header expects KEY=VALUE, got {item!r}")
        headers[key.strip()] = value.strip()
    return headers


def make_otlp_exporter(endpoint: str, encoding: str, gzip: bool, headers: dict[str, str], timeout: float) -> SpanExporter:
    if encoding == "json":
        try:
            from opentelemetry.exporter.otlp.common.http import Compression as JsonCompression
            from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
        except ImportError as e:  # pragma: no cover - depends on the venv
            raise SystemExit(
                f"--encoding json needs the opentelemetry-exporter-otlp-json-http package ({e}); "
                "run scripts/pyenv.sh or use --encoding protobuf"
            )
        return JsonExporter(
            endpoint=endpoint,
            headers=headers or None,
            timeout=timeout,
            compression=JsonCompression.GZIP if gzip else JsonCompression.NONE,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=endpoint,
        headers=headers or None,
        timeout=timeout,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )


class Pipeline:
    """TracerProvider + processor + TeeExporter built from the parsed export arguments."""

    def __init__(self, args: argparse.Namespace, extra_resource: dict[str, Any] | None = None) -> None:
        if not args.endpoint and not args.dump:
            print("give --endpoint URL and/or --dump FILE", file=sys.stderr)
            raise SystemExit(2)
        otlp = None
        if args.endpoint:
            otlp = make_otlp_exporter(
                args.endpoint, args.encoding, args.gzip, _parse_headers(args.header), args.timeout
            )
        self.tee = TeeExporter(otlp, args.dump)
        attrs: dict[str, Any] = {"service.name": args.service_name}
        attrs.update(extra_resource or {})
        self.provider = TracerProvider(resource=Resource.create(attrs))
        if args.processor == "simple":
            self.processor = SimpleSpanProcessor(self.tee)
        else:
            # Large queue so that a long run (--runs) never drops spans before force_flush.
            self.processor = BatchSpanProcessor(self.tee, max_queue_size=65536, max_export_batch_size=512)
        self.provider.add_span_processor(self.processor)
        for url in getattr(args, "also_endpoint", []) or []:
            also = make_otlp_exporter(url, "protobuf", args.gzip, _parse_headers(args.header), args.timeout)
            self.provider.add_span_processor(BatchSpanProcessor(also, max_queue_size=65536, max_export_batch_size=512))

    def tracer(self, name: str, version: str | None = None):
        return self.provider.get_tracer(name, version)

    def flush(self, timeout_millis: int = 60000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def finish(self) -> int:
        """Flush and shut down; return the process exit code (0 ok, 1 some export failed)."""
        flushed = self.provider.force_flush(60000)
        self.provider.shutdown()
        if not flushed:
            print("export: force_flush timed out; some spans may not have been sent", file=sys.stderr)
            return 1
        if self.tee.failed_batches:
            print(f"export: {self.tee.failed_batches} batch(es) failed to export", file=sys.stderr)
            return 1
        return 0


def served_model(base_url: str, timeout: float = 10.0) -> str:
    """The first model id that an OpenAI-compatible endpoint lists at GET {base_url}/models."""
    import urllib.request

    with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout) as r:
        data = json.load(r)
    models = [m.get("id") for m in data.get("data", []) if m.get("id")]
    if not models:
        raise SystemExit(f"{base_url}/models lists no model; pass --model")
    return models[0]


def span_summary(spans: Sequence[ReadableSpan]) -> list[dict[str, Any]]:
    """A compact view of spans (name, kind, parent) for debugging: not part of any output format."""
    out = []
    for s in sorted(spans, key=lambda s: s.start_time or 0):
        out.append(
            {
                "name": s.name,
                "span_id": format(s.context.span_id, "016x"),
                "parent": format(s.parent.span_id, "016x") if s.parent else None,
                "kind": (s.attributes or {}).get("openinference.span.kind")
                or (s.attributes or {}).get("gen_ai.operation.name"),
            }
        )
    return out
