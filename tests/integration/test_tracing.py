"""A real `outcomes worker` process continues the caller's trace: the decision and its
dispatch are traced in this process (the SDK's in-memory exporter), the claim, the tool's run
and the outcome in the worker, which exports them over OTLP/HTTP (OTEL_* in its environment,
the `[otlp]` extra) to a collector stand-in served here. Only the job id crossed the broker:
the worker found the trace in the job's decision."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ledger.decisions import JobRequest
from ledger.events import job_stream
from ledger.runtime.ledger import Ledger
from ledger.services.submit import submit
from ledger.tracing import parse_traceparent
from tests.plugins.deployments import AGENT, Deployment, deployments, wait_terminal, wait_until
from tests.serving import free_port
from tests.tools import ECHO
from tests.traces import CALLER_SPAN, CALLER_TRACE, TRACEPARENT, Seen, finished, recording

WORKER_SPANS = {"outcomes.claim", "outcomes.run", "outcomes.outcome"}


class Collector(ThreadingHTTPServer):
    """What an OTLP/HTTP collector receives at /v1/traces, decoded."""

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Receive)
        self.spans: list[Seen] = []
        self.services: set[str] = set()
        self.lock = threading.Lock()


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        exported = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for resource in exported.resource_spans:
                for attribute in resource.resource.attributes:
                    if attribute.key == "service.name":
                        self.server.services.add(attribute.value.string_value)
                for scope in resource.scope_spans:
                    self.server.spans.extend(_seen(span) for span in scope.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _seen(span: Any) -> Seen:
    values = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}
    return Seen(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex() or None,
        attributes=values,
    )


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector(free_port())
    thread = threading.Thread(target=server.serve_forever, name="otlp", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("deployment", deployments("embedded/sqlite"), indirect=True)
def test_a_worker_process_continues_the_callers_trace(
    deployment: Deployment, collector: Collector
) -> None:
    dep = deployment
    dep.env |= {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{collector.server_port}/v1/traces",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export within moments, not the default 5 s
        "OTEL_SERVICE_NAME": "itest-worker",
    }
    dep.start_workers(count=1, concurrency=2)
    with recording() as exporter:
        request = JobRequest(ECHO, {"text": "traced"})
        caller_trace = parse_traceparent(TRACEPARENT)
        view = submit(Ledger(dep.store), AGENT, request, dep.dispatcher, trace=caller_trace).view
        here = {s.name: s for s in finished(exporter)}
    job_id = view.job_id
    assert wait_terminal(dep.store, [job_id])[job_id].status.value == "succeeded"

    def exported() -> dict[str, Seen]:
        with collector.lock:
            mine = [s for s in collector.spans if s.attributes.get("outcomes.job_id") == job_id]
        return {s.name: s for s in mine}

    wait_until(lambda: set(exported()) >= WORKER_SPANS, 20, "the worker's spans at the collector")
    there = exported()
    assert set(here) == {"outcomes.submit", "outcomes.dispatch"}
    decision = here["outcomes.submit"]
    assert (decision.trace_id, decision.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    for name in WORKER_SPANS:
        span = there[name]
        assert (span.trace_id, span.parent_id) == (CALLER_TRACE, decision.span_id), name
        assert (span.attributes["outcomes.tool"], span.attributes["outcomes.account"]) == (
            ECHO,
            AGENT.account,
        )
    assert collector.services == {"itest-worker"}
    accepted = dep.store.read_stream(job_stream(job_id))[0]
    assert accepted.data["trace"]["trace_id"] == CALLER_TRACE
