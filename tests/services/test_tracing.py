"""One call's spans (the decision, its dispatch, the claim, the tool's run, the outcome) in one
trace, on a ledger in memory with the worker's executor in this process and the SDK's
in-memory exporter: the caller's trace when it sent a `traceparent`, a new one otherwise. The
job's decision records the trace, which is how the worker continues it (the broker carries
only the job id). A real worker process exporting over OTLP: tests/integration/test_tracing.py."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from pydantic import BaseModel

from ledger.decisions import Caller, JobRequest
from ledger.errors import ConfigurationError
from ledger.events import job_stream
from ledger.outcomes import Succeeded
from ledger.runtime.ledger import Ledger
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.tools import ToolContext, tool
from ledger.tracing import parse_traceparent, tracer
from observability.tracing import exporter_names, install_from_env
from tests.factories import Recorder
from tests.traces import (
    CALLER_SPAN,
    CALLER_TRACE,
    JOB_SPANS,
    TRACEPARENT,
    Seen,
    finished,
    recording,
)

AGENT = Caller(account="acme", token_id="tok-acme")
AMBIENT: dict[str, str] = {}  # job id -> the span id current while its tool ran


class Nothing(BaseModel):
    pass


@tool("trace.ok")
def traced(args: Nothing, ctx: ToolContext) -> Succeeded:
    # What a tool's own OpenTelemetry instrumentation would nest under.
    AMBIENT[ctx.job_id] = format(trace.get_current_span().get_span_context().span_id, "016x")
    return Succeeded(result={"ok": True})


def decide(ledger: Ledger, traceparent: str | None = None, tracestate: str | None = None) -> str:
    caller_trace = parse_traceparent(traceparent, tracestate)
    request = JobRequest("trace.ok", {})
    return submit(ledger, AGENT, request, Recorder(), trace=caller_trace).view.job_id


def by_name(spans: list[Seen], job_id: str) -> dict[str, Seen]:
    mine = [s for s in spans if s.attributes.get("outcomes.job_id") == job_id]
    named = {s.name: s for s in mine}
    assert len(named) == len(mine), f"a span twice: {[s.name for s in mine]}"
    return named


def test_one_calls_spans_continue_the_callers_trace_and_its_decision_records_it(
    memory_ledger: Ledger,
) -> None:
    with recording() as exporter:
        job_id = decide(memory_ledger, TRACEPARENT, "rojo=00f067aa0ba902b7")
        Executor(memory_ledger, "w-1").execute(job_id)
        spans = by_name(finished(exporter), job_id)

    assert sorted(spans) == sorted(JOB_SPANS)
    assert {s.trace_id for s in spans.values()} == {CALLER_TRACE}
    decision = spans["outcomes.submit"]
    assert decision.parent_id == CALLER_SPAN
    # The worker's spans descend from the decision, across the broker, through the ledger.
    assert {s.parent_id for n, s in spans.items() if n != "outcomes.submit"} == {decision.span_id}
    for span in spans.values():
        assert (span.attributes["outcomes.tool"], span.attributes["outcomes.account"]) == (
            "trace.ok",
            "acme",
        )
    assert spans["outcomes.dispatch"].attributes["outcomes.dispatch.confirmed"] is True
    assert spans["outcomes.claim"].attributes["outcomes.claim"] == "claimed"
    assert spans["outcomes.outcome"].attributes["outcomes.outcome"] == "work.succeeded"
    assert AMBIENT[job_id] == spans["outcomes.run"].span_id  # the tool ran inside its span

    accepted = memory_ledger.store.read_stream(job_stream(job_id))[0]
    assert accepted.data["trace"] == {
        "trace_id": CALLER_TRACE,
        "parent_span_id": decision.span_id,
        "sampled": True,
        "state": "rojo=00f067aa0ba902b7",
    }


def test_without_a_traceparent_a_new_trace_links_every_span(memory_ledger: Ledger) -> None:
    with recording() as exporter:
        first, second = decide(memory_ledger), decide(memory_ledger)
        executor = Executor(memory_ledger, "w-1")
        claims = executor.claim_batch([first, second])  # one claim for both: a span each
        for job_id, claimed in zip((first, second), claims, strict=True):
            executor.finish(job_id, claimed)
        spans = finished(exporter)

    traces = []
    for job_id in (first, second):
        mine = by_name(spans, job_id)
        assert sorted(mine) == sorted(JOB_SPANS)
        (trace_id,) = {s.trace_id for s in mine.values()}
        assert mine["outcomes.submit"].parent_id is None  # a new trace begins at the decision
        recorded = memory_ledger.store.read_stream(job_stream(job_id))[0].data["trace"]
        assert recorded["trace_id"] == trace_id != CALLER_TRACE
        traces.append(trace_id)
    assert traces[0] != traces[1]  # each call its own trace, though claimed together


def test_a_malformed_traceparent_is_ignored_and_a_new_trace_begins(memory_ledger: Ledger) -> None:
    with recording() as exporter:
        job_id = decide(memory_ledger, f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-extra")
        (decision,) = [s for s in finished(exporter) if s.name == "outcomes.submit"]
    assert decision.trace_id != CALLER_TRACE and decision.parent_id is None
    recorded = memory_ledger.store.read_stream(job_stream(job_id))[0].data["trace"]
    assert recorded["trace_id"] == decision.trace_id


def test_with_tracing_off_the_callers_context_is_recorded_and_no_span_is_made(
    memory_ledger: Ledger,
) -> None:
    with recording() as exporter:
        pass  # installed, then put back: the process's no-op tracer again
    given = decide(memory_ledger, TRACEPARENT)
    plain = decide(memory_ledger)
    for job_id in (given, plain):
        Executor(memory_ledger, "w-1").execute(job_id)
    assert exporter.get_finished_spans() == ()
    recorded = memory_ledger.store.read_stream(job_stream(given))[0].data["trace"]
    assert (recorded["trace_id"], recorded["parent_span_id"]) == (CALLER_TRACE, CALLER_SPAN)
    # No context given and none made: the decision is stored exactly as before traces were.
    assert "trace" not in memory_ledger.store.read_stream(job_stream(plain))[0].data


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({}, []),  # nothing asked: nothing installed (the SDK's own default, otlp, is not ours)
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, ["console", "otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, []),
    ],
)
def test_the_standard_variables_say_which_exporters(
    environ: dict[str, str], names: list[str]
) -> None:
    assert exporter_names(environ) == names


def test_an_exporter_it_cannot_make_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match="otlp, console or none"):
        install_from_env("test", {"OTEL_TRACES_EXPORTER": "zipkin"})
    assert not tracer().enabled  # nothing was installed
    assert install_from_env("test", {}) is False
