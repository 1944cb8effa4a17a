"""What the outbox holds and reports: a job's message waiting to be published (`OutboxJob`),
what one publish did (`Sent`), the dispatch spans around a publish, and a retry's delay
(`ledger.runtime.outbox` publishes them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ledger.dispatch import Message
from ledger.errors import DispatchError
from ledger.job_view import JobView
from ledger.tracing import Span, TraceRecord, job_attributes, tracer


@dataclass
class OutboxJob:
    job_id: str
    version: int  # the stream version whose message this is
    due: float  # time.monotonic() when the worker may start it (a retry's backoff)
    tool: str = ""  # shown by monitors (Flower); never an argument
    account: str = ""  # whose window it counts in ("": none)
    trace: TraceRecord | None = None  # the job's decision, which its dispatch span continues

    def message(self, moment: float) -> Message:
        return Message(self.job_id, max(0.0, self.due - moment), self.tool)


def job_of(view: JobView, due: float) -> OutboxJob:
    return OutboxJob(view.job_id, view.stream_version, due, view.tool, view.account, view.trace)


@dataclass
class Sent:
    """What one publish did (tests and the relay's report)."""

    confirmed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def dispatch_spans(jobs: Sequence[OutboxJob]) -> list[Span | None]:
    """One span a traced job, around the publish of its batch (their confirms are awaited
    together); none at all while tracing is off."""
    spans = tracer()
    if not spans.enabled:
        return []
    return [
        spans.start(
            "outcomes.dispatch", job.trace, job_attributes(job.job_id, job.tool, job.account)
        )
        if job.trace is not None
        else None
        for job in jobs
    ]


def end_dispatch_spans(spans: list[Span | None], fates: Sequence[DispatchError | None]) -> None:
    for made, fate in zip(spans, fates, strict=True):
        if made is None:
            continue
        made.set_attribute("outcomes.dispatch.confirmed", fate is None)
        if fate is not None:
            made.fail(str(fate).splitlines()[0] if str(fate) else type(fate).__name__)
        made.end()


def retry_delay(view: JobView, moment: datetime) -> float:
    if view.due_at is None:
        return 0.0
    return max(0.0, (view.due_at - moment).total_seconds())


def first_reason(fates: Sequence[DispatchError | None]) -> str:
    return next((str(f) for f in fates if f is not None), "")
