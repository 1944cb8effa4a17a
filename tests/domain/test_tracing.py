"""W3C Trace Context as the ledger reads it (a malformed header is ignored, never an error),
and the decision's optional `trace`: absent, an event is stored (and hashed) as before."""

from __future__ import annotations

import pytest

from ledger.events import JobAccepted, parse_payload
from ledger.tracing import MAX_TRACESTATE, NoTracer, TraceRecord, parse_traceparent, span, tracer

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def test_a_valid_traceparent_is_read_with_its_flags_and_state() -> None:
    found = parse_traceparent(f"00-{TRACE}-{SPAN}-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert found == TraceRecord(
        trace_id=TRACE,
        parent_span_id=SPAN,
        sampled=True,
        state="rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    )
    assert found.traceparent() == f"00-{TRACE}-{SPAN}-01"
    unsampled = parse_traceparent(f"00-{TRACE}-{SPAN}-00")
    assert unsampled is not None and not unsampled.sampled
    # A later version may add fields after a dash: read as version 00 (W3C, forward compatible).
    assert parse_traceparent(f"cc-{TRACE}-{SPAN}-01-what-the-future-holds") is not None


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        f"00-{TRACE}-{SPAN}",  # no flags
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"00-{TRACE.upper()}-{SPAN}-01",  # uppercase hex
        f"00-{TRACE[:-1]}-{SPAN}-01",  # short trace id
        f"00-{TRACE}-{SPAN}-0x",
        f"cc-{TRACE}-{SPAN}-01x",  # a later version's extra fields begin with a dash
    ],
)
def test_a_malformed_traceparent_is_ignored(header: str) -> None:
    assert parse_traceparent(header, "rojo=1") is None


def test_a_tracestate_out_of_bounds_is_dropped_not_the_trace() -> None:
    found = parse_traceparent(f"00-{TRACE}-{SPAN}-01", "a=" + "x" * MAX_TRACESTATE)
    assert found is not None and found.state is None


def test_a_decision_without_a_trace_is_stored_as_before_and_one_with_it_round_trips() -> None:
    fields = {"account": "acme", "tool": "t", "args": {}}
    before = JobAccepted(**fields).model_dump(mode="json")
    assert "trace" not in before  # so the hash of an older decision is what it always was
    assert parse_payload(before).model_dump(mode="json") == before
    record = TraceRecord(trace_id=TRACE, parent_span_id=SPAN)
    traced = JobAccepted(**fields, trace=record).model_dump(mode="json")
    assert traced["trace"] == {"trace_id": TRACE, "parent_span_id": SPAN, "sampled": True}
    assert parse_payload(traced) == JobAccepted(**fields, trace=record)


def test_the_default_tracer_records_nothing_and_carries_the_parent_along() -> None:
    assert isinstance(tracer(), NoTracer) and not tracer().enabled
    parent = TraceRecord(trace_id=TRACE, parent_span_id=SPAN)
    with span("outcomes.submit", parent, {}) as made:
        assert made.record == parent
