"""Spans recorded in this process, on the OpenTelemetry SDK's in-memory exporter, through the
ledger's tracing port (`observability.tracing.OtelTracer`): for the tracing tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ledger import tracing
from observability.tracing import OtelTracer

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
JOB_SPANS = (
    "outcomes.submit",
    "outcomes.dispatch",
    "outcomes.claim",
    "outcomes.run",
    "outcomes.outcome",
)


@dataclass(frozen=True)
class Seen:
    """One finished span, in W3C's hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, object]


def seen(span: ReadableSpan) -> Seen:
    assert span.context is not None
    parent = span.parent
    return Seen(
        name=span.name,
        trace_id=format(span.context.trace_id, "032x"),
        span_id=format(span.context.span_id, "016x"),
        parent_id=format(parent.span_id, "016x") if parent is not None else None,
        attributes=dict(span.attributes or {}),
    )


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Install a tracer exporting to memory for the block (the process's own is put back)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.install(OtelTracer(provider))
    try:
        yield exporter
    finally:
        tracing.install(previous)
        provider.shutdown()


def finished(exporter: InMemorySpanExporter) -> list[Seen]:
    return [seen(span) for span in exporter.get_finished_spans()]
