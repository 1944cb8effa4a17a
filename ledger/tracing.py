"""The tracing port: the spans a job's way through the ledger makes (the decision, its
dispatch, the claim, the tool's run, the outcome), told to whatever the adapters installed
(`observability.tracing` installs OpenTelemetry when the standard `OTEL_*` variables ask for
it). The core knows no tracing library: the default records nothing and costs a check.

A job's trace crosses the broker in the ledger, not in the message: the decision records the
trace's id and the decision's span id (`TraceRecord`, in `job.accepted`), and the worker's
spans are children of that span. W3C Trace Context (`traceparent`, `tracestate`) is parsed
here; a malformed header is ignored, never an error (W3C: start a new trace instead).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

Attributes = Mapping[str, str | int | float | bool]

# W3C Trace Context level 1: version-traceid-parentid-flags, lowercase hex.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
MAX_TRACESTATE = 512  # W3C: a receiver may drop a longer one; it is kept only as a courtesy


class TraceRecord(BaseModel):
    """Where a job's spans belong: its trace and the span they descend from (the decision's,
    or the caller's when this process records no spans). Kept in the decision's event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace_id: str  # 32 lowercase hex digits
    parent_span_id: str  # 16 lowercase hex digits
    sampled: bool = True
    # The caller's `tracestate`, as received; left out while unset.
    state: str | None = Field(None, exclude_if=lambda v: v is None)

    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.parent_span_id}-{'01' if self.sampled else '00'}"


def parse_traceparent(traceparent: str | None, tracestate: str | None = None) -> TraceRecord | None:
    """The caller's trace context, or None when absent or malformed (W3C: ignored)."""
    if not traceparent:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None  # ff is invalid; version 00 has exactly four fields
    if rest and not rest.startswith("-"):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    state = tracestate.strip() if tracestate else None
    if state is not None and (not state or len(state) > MAX_TRACESTATE or not state.isascii()):
        state = None
    return TraceRecord(
        trace_id=trace_id, parent_span_id=span_id, sampled=bool(int(flags, 16) & 1), state=state
    )


class Span(Protocol):
    @property
    def record(self) -> TraceRecord | None:
        """This span as a parent (what a child elsewhere continues from)."""

    def set_attribute(self, key: str, value: str | int | float | bool) -> None: ...

    def fail(self, reason: str) -> None:
        """Mark the span's operation as failed (an error status), with a short reason."""

    def end(self) -> None: ...


class Tracer(Protocol):
    enabled: bool  # False: spans are never made (the hot path checks this first)

    def start(self, name: str, parent: TraceRecord | None, attributes: Attributes) -> Span:
        """A span begun now, under `parent` (None: the ambient span of this thread's
        context, if any, else a new trace). The caller ends it."""

    @contextmanager
    def current(self, span: Span) -> Iterator[None]:
        """Make `span` the ambient one in this thread while the block runs (a tool's own
        instrumentation then nests under it)."""
        yield


class NoSpan:
    """What a disabled tracer hands out: carries the caller's context along, records nothing."""

    def __init__(self, parent: TraceRecord | None = None) -> None:
        self._parent = parent

    @property
    def record(self) -> TraceRecord | None:
        return self._parent

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        pass

    def fail(self, reason: str) -> None:
        pass

    def end(self) -> None:
        pass


class NoTracer:
    enabled = False

    def start(self, name: str, parent: TraceRecord | None, attributes: Attributes) -> Span:
        return NoSpan(parent)

    @contextmanager
    def current(self, span: Span) -> Iterator[None]:
        yield


_installed: list[Tracer] = [NoTracer()]  # process-wide, like the exporter behind it


def install(tracer: Tracer) -> Tracer:
    """Make `tracer` the process's; returns the one it replaces."""
    previous = _installed[0]
    _installed[0] = tracer
    return previous


def tracer() -> Tracer:
    return _installed[0]


@contextmanager
def span(name: str, parent: TraceRecord | None, attributes: Attributes) -> Iterator[Span]:
    """A span around the block (ended when it leaves; failed if it raises)."""
    made = tracer().start(name, parent, attributes)
    try:
        yield made
    except BaseException as exc:
        made.fail(type(exc).__name__)
        raise
    finally:
        made.end()


def job_attributes(job_id: str, tool: str, account: str) -> dict[str, str]:
    """The attributes every span of a job carries (docs/tracing.md)."""
    return {"outcomes.job_id": job_id, "outcomes.tool": tool, "outcomes.account": account}
