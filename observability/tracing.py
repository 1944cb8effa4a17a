"""Traces over OpenTelemetry: the core's tracing port (`ledger.tracing`) implemented on the
OpenTelemetry SDK, installed when the standard `OTEL_*` variables ask for an exporter
(docs/tracing.md). Without them nothing is installed: the core's no-op tracer stays, and a
span costs one attribute check.

- `OTEL_TRACES_EXPORTER`: `otlp` (the `[otlp]` extra: OTLP over HTTP/protobuf, or gRPC when
  `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` and its exporter is installed), `console`, `none`; a list
  is comma-separated. Unset, an `OTEL_EXPORTER_OTLP_ENDPOINT` (or its `_TRACES_` form) means
  `otlp`. `OTEL_SDK_DISABLED=true` turns it all off.
- The SDK reads the rest itself: the endpoint, headers, `OTEL_SERVICE_NAME`,
  `OTEL_RESOURCE_ATTRIBUTES`, the sampler (`OTEL_TRACES_SAMPLER`, parent-based by default),
  the batch processor's delays (`OTEL_BSP_*`).

The provider is also made OpenTelemetry's global one, so the MCP SDK's own server spans and a
tool's own instrumentation export through it, in the same traces.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from ledger import tracing
from ledger.errors import ConfigurationError
from ledger.tracing import Attributes, Span, TraceRecord

log = logging.getLogger(__name__)

INSTRUMENTATION = "outcome-ledger"
OTLP_EXTRA = "pip install 'outcome-ledger[otlp]'"


class OtelSpan:
    def __init__(self, span: trace.Span) -> None:
        self.span = span

    @property
    def record(self) -> TraceRecord | None:
        found = self.span.get_span_context()
        if not found.is_valid:
            return None
        state = found.trace_state.to_header() if found.trace_state else ""
        return TraceRecord(
            trace_id=format(found.trace_id, "032x"),
            parent_span_id=format(found.span_id, "016x"),
            sampled=found.trace_flags.sampled,
            state=state or None,
        )

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        self.span.set_attribute(key, value)

    def fail(self, reason: str) -> None:
        self.span.set_status(Status(StatusCode.ERROR, reason))

    def end(self) -> None:
        self.span.end()


class OtelTracer:
    """The port over one provider (tests pass one with an in-memory exporter)."""

    enabled = True

    def __init__(self, provider: trace.TracerProvider) -> None:
        self._tracer = provider.get_tracer(INSTRUMENTATION)

    def start(self, name: str, parent: TraceRecord | None, attributes: Attributes) -> Span:
        made = self._tracer.start_span(name, context=_context_of(parent), attributes=attributes)
        return OtelSpan(made)

    @contextmanager
    def current(self, span: Span) -> Iterator[None]:
        if not isinstance(span, OtelSpan):
            yield
            return
        token = otel_context.attach(trace.set_span_in_context(span.span))
        try:
            yield
        finally:
            otel_context.detach(token)


def _context_of(parent: TraceRecord | None) -> otel_context.Context | None:
    """Where a span hangs: under `parent`, or under the ambient span when that one is of the
    same trace (a nearer ancestor: the MCP SDK's server span of the call); None: the ambient
    context (a new trace when there is none)."""
    if parent is None:
        return None
    ambient = trace.get_current_span().get_span_context()
    if ambient.is_valid and format(ambient.trace_id, "032x") == parent.trace_id:
        return None
    remote = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.parent_span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if parent.sampled else TraceFlags.DEFAULT),
        trace_state=TraceState.from_header([parent.state]) if parent.state else None,
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


# --- installing from the environment ------------------------------------------------------


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The span exporters the environment asks for (empty: tracing stays off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    listed = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if listed:
        return [n for n in (p.strip().lower() for p in listed.split(",")) if n and n != "none"]
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        return ["otlp"]
    return []


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER names {name!r}: this ledger exports to otlp, console or none"
        )
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    try:
        if protocol.strip().lower() == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter as GrpcExporter,
            )

            grpc: SpanExporter = GrpcExporter()
            return grpc
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    except ImportError as exc:
        which = "opentelemetry-exporter-otlp-proto-grpc" if protocol == "grpc" else OTLP_EXTRA
        raise ConfigurationError(
            f"traces are to be exported over OTLP ({protocol or 'http/protobuf'}) but its "
            f"exporter is not installed: {which} ({exc.name})"
        ) from exc


def _resource(environ: Mapping[str, str], service: str) -> Resource:
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    return Resource.create({} if named else {SERVICE_NAME: service})


def install_from_env(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install OpenTelemetry tracing in this process when the environment asks for it
    (idempotent); `service`: the default service.name (OTEL_SERVICE_NAME wins). True when
    spans are exported. Raises ConfigurationError for an exporter it cannot make."""
    environ = os.environ if environ is None else environ
    if isinstance(tracing.tracer(), OtelTracer):
        return True
    names = exporter_names(environ)
    if not names:
        return False
    exporters = [_exporter(name, environ) for name in dict.fromkeys(names)]
    provider = TracerProvider(resource=_resource(environ, service))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracing.install(OtelTracer(provider))
    log.info("traces: exported to %s", ", ".join(names))
    return True
