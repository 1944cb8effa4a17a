"""The pure core: codes, next actions, the job fold, the envelope, chains and digests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger.chain import Checkpoint, ProblemKind, event_hash, ledger_link
from ledger.chain_check import verify_chain
from ledger.codes import Code, NextAction, OutcomeMissingCause, Status, next_action
from ledger.digest import Digest
from ledger.error_info import ErrorInfo
from ledger.errors import DigestError, JobStreamError
from ledger.events import (
    JobOutcomeMissing,
    JobRefused,
    Payload,
    RecordedEvent,
    WorkFailed,
    WorkHalted,
    WorkLateOutcome,
    WorkPartial,
    WorkRetryScheduled,
    WorkSucceeded,
    job_stream,
)
from ledger.job_fold import evolve, status_after
from ledger.job_view import JobView, envelope
from tests.factories import ERROR_KEYS, accepted, failed, started

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_next_action_follows_the_seed_table() -> None:
    expected = {
        Status.QUEUED: NextAction.WAIT,
        Status.RUNNING: NextAction.WAIT,
        Status.RETRYING: NextAction.WAIT,
        Status.SUCCEEDED: NextAction.ACCEPT,
        Status.DECLINED: NextAction.ACCEPT,
        Status.PARTIAL: NextAction.USE_PARTIAL_AND_NARROW,
        Status.REFUSED: NextAction.SATISFY_PRECONDITION,
        Status.FAILED: NextAction.STOP_AND_REPORT,
    }
    for status, action in expected.items():
        assert next_action(status, None, spends=False) is action
        assert next_action(status, None, spends=True) is action


def test_silence_on_a_spending_tool_sends_the_agent_to_the_source() -> None:
    assert next_action(Status.FAILED, Code.OUTCOME_MISSING, True) is NextAction.VERIFY_AT_SOURCE
    assert next_action(Status.FAILED, Code.OUTCOME_MISSING, False) is NextAction.STOP_AND_REPORT
    assert next_action(Status.FAILED, Code.TOOL_CRASHED, True) is NextAction.STOP_AND_REPORT


def test_terminal_statuses() -> None:
    assert {s for s in Status if not s.terminal} == {
        Status.AWAITING_APPROVAL,
        Status.QUEUED,
        Status.RUNNING,
        Status.RETRYING,
    }


def test_error_object_always_has_its_ten_keys() -> None:
    error = ErrorInfo(code=Code.ACCESS_DENIED, message="I could not read the item.")
    assert set(error.model_dump()) == ERROR_KEYS


class Fold:
    """Records events for one job stream in memory, as the store would."""

    def __init__(self) -> None:
        self.stream = job_stream(uuid.uuid4())
        self.view: JobView | None = None
        self.version = 0

    def add(self, payload: Payload, minutes: int = 0) -> JobView:
        self.version += 1
        event = RecordedEvent(
            position=100 + self.version,
            stream_id=self.stream,
            stream_version=self.version,
            event_id=uuid.uuid4(),
            type=payload.type,
            data=payload.model_dump(mode="json"),
            code=payload.code,
            actor="t",
            recorded_at=NOW + timedelta(minutes=minutes),
            prev_hash=None,
            hash="x",
        )
        self.view = evolve(self.view, event)
        return self.view


def error(code: Code, **extra: Any) -> ErrorInfo:
    return ErrorInfo(code=code, message="m", **extra)


def test_a_job_folds_from_queued_to_succeeded() -> None:
    job = Fold()
    view = job.add(accepted().payload)
    assert (view.status, view.attempts, view.recorded_by) == (Status.QUEUED, 0, "api")
    view = job.add(started().payload, minutes=1)
    assert (view.status, view.attempts) == (Status.RUNNING, 1)
    view = job.add(WorkSucceeded(attempt=1, result={"title": "Bug"}), minutes=2)
    env = envelope(view)
    assert (env.status, env.terminal, env.next_action) == (Status.SUCCEEDED, True, "accept")
    assert env.result == {"title": "Bug"} and env.error is None
    assert env.recorded_by == "worker" and view.ledger_position == 103
    assert "ledger_position" not in env.model_dump()  # the ledger's volume is not the agent's
    assert env.created_at == NOW and env.updated_at == NOW + timedelta(minutes=2)


def test_refusal_has_no_attempts_and_names_the_precondition() -> None:
    job = Fold()
    refusal = error(Code.INPUT_MISSING, fix="send issue_ref")
    view = job.add(JobRefused(account="acme", tool="t", error=refusal))
    env = envelope(view)
    assert (env.status, env.attempts, env.next_action) == (
        Status.REFUSED,
        0,
        NextAction.SATISFY_PRECONDITION,
    )
    assert env.error is not None and env.error.fix == "send issue_ref"


def test_partial_carries_what_was_skipped() -> None:
    job = Fold()
    job.add(accepted().payload)
    job.add(started().payload)
    view = job.add(WorkPartial(attempt=1, result={}, processed=40, skipped=["a@x"], total=50))
    assert view.partial is not None and view.partial.skipped == ["a@x"]
    assert view.next_action is NextAction.USE_PARTIAL_AND_NARROW


def test_halted_reads_as_refused_brake_engaged() -> None:
    job = Fold()
    job.add(accepted().payload)
    job.add(started().payload)
    view = job.add(WorkHalted(attempt=1, error=error(Code.BRAKE_ENGAGED, cause="brake-1")))
    assert (view.status, view.code) == (Status.REFUSED, Code.BRAKE_ENGAGED)
    assert view.error is not None and view.error.cause == "brake-1"


@pytest.mark.parametrize(
    "payload",
    [
        WorkSucceeded(attempt=1, result={}),
        WorkPartial(attempt=1, result={}, processed=1, skipped=[], total=2),
        WorkHalted(attempt=1, error=error(Code.BRAKE_ENGAGED, cause="brake-1")),
        WorkFailed(attempt=1, error=error(Code.TOOL_CRASHED)),
    ],
)
def test_the_status_after_an_outcome_is_the_folds_own(payload: Payload) -> None:
    # One source for "what status does this event leave": the fold. The logs and the metrics
    # ask `status_after`, so a change to the fold changes them too.
    job = Fold()
    job.add(accepted().payload)
    running = job.add(started().payload)
    assert status_after(running, payload) is job.add(payload).status
    closed = job.view
    assert status_after(closed, payload) is closed.status  # a closed job keeps its status
    assert status_after(running, started(attempt=2).payload) is Status.RUNNING


def test_retry_then_worker_lost_on_a_spending_tool() -> None:
    job = Fold()
    job.add(accepted().payload)
    job.add(started().payload)
    due = NOW + timedelta(seconds=5)
    retrying = WorkRetryScheduled(attempt=1, error=error(Code.SOURCE_UNRELIABLE), due_at=due)
    view = job.add(retrying)
    assert (view.status, view.due_at, view.next_action) == (Status.RETRYING, due, "wait")
    job.add(started(attempt=2).payload)
    lost = JobOutcomeMissing(
        attempt=2,
        cause=OutcomeMissingCause.WORKER_LOST,
        error=error(Code.OUTCOME_MISSING, cause="worker_lost"),
    )
    view = job.add(lost)
    assert (view.status, view.attempts, view.recorded_by) == (Status.FAILED, 2, "reconciler")
    spending = view.model_copy(update={"spends": True})
    assert spending.next_action is NextAction.VERIFY_AT_SOURCE


def test_a_late_outcome_is_kept_but_never_flips_the_status() -> None:
    job = Fold()
    job.add(accepted().payload)
    job.add(started().payload)
    job.add(failed(Code.DEADLINE_EXCEEDED).payload)
    late = WorkLateOutcome(
        attempt=1, outcome_type="work.succeeded", outcome={"result": {"ok": True}}
    )
    view = job.add(late)
    assert view.status is Status.FAILED
    assert view.late_outcomes == [{"attempt": 1, "type": "work.succeeded", "result": {"ok": True}}]


def test_events_out_of_contract_order_are_rejected() -> None:
    job = Fold()
    with pytest.raises(JobStreamError):
        job.add(started().payload)
    job = Fold()
    job.add(accepted().payload)
    job.add(failed().payload)
    with pytest.raises(JobStreamError):
        job.add(started(attempt=2).payload)


def link(version: int, prev: str | None, data: dict[str, Any], position: int) -> RecordedEvent:
    fields: dict[str, Any] = {
        "event_id": str(uuid.UUID(int=position)),
        "stream_id": "s",
        "stream_version": version,
        "type": "t",
        "data": data,
        "code": None,
        "actor": "a",
        "recorded_at": NOW,
        "prev_hash": prev,
    }
    return RecordedEvent(position=position, hash=event_hash(**fields), **fields)


def chain(n: int) -> list[RecordedEvent]:
    links: list[RecordedEvent] = []
    for v in range(1, n + 1):
        new = link(v, links[-1].hash if links else None, {"n": v}, v * 10)
        prev_link = links[-1].ledger_hash if links else None
        links.append(new.model_copy(update={"ledger_hash": ledger_link(prev_link, new.hash)}))
    return links


def test_chain_verification_names_the_first_broken_position() -> None:
    links = chain(5)
    assert verify_chain(links).ok
    edited = list(links)
    edited[2] = links[2].model_copy(update={"data": {"n": 999}})
    report = verify_chain(edited)
    assert report.first_problem is not None
    assert (report.first_problem.kind, report.first_problem.position) == (
        ProblemKind.HASH_MISMATCH,
        30,
    )
    gap = links[:2] + links[3:]
    report = verify_chain(gap)
    assert report.first_problem is not None
    assert (report.first_problem.kind, report.first_problem.position) == (
        ProblemKind.VERSION_GAP,
        40,
    )


def test_digest_round_trips_and_rejects_a_doctored_copy() -> None:
    digest = Digest(created_at=NOW, position=50, events=5, heads={"s": (5, "ab" * 32)})
    again = Digest.loads(digest.dumps())
    assert again == digest
    doctored = digest.dumps().replace(b'"s": [\n      5', b'"s": [\n      4')
    assert doctored != digest.dumps()
    with pytest.raises(DigestError):
        Digest.loads(doctored)
    with pytest.raises(DigestError):
        Digest.loads(b"not json")
    with pytest.raises(DigestError):
        Digest.loads(b'{"format": "something else"}')


def test_a_truncated_stream_is_caught_against_a_digest() -> None:
    links = chain(4)
    checkpoint = Checkpoint(heads={"s": (4, links[-1].hash)}, position=40, events=4)
    assert verify_chain(links, checkpoint).ok
    report = verify_chain(links[:3], checkpoint)
    assert {p.kind for p in report.problems} == {
        ProblemKind.DIGEST_TRUNCATED,
        ProblemKind.DIGEST_COUNT,
    }


def test_an_event_slipped_into_the_digests_span_is_caught() -> None:
    links = chain(3)  # positions 10, 20, 30
    checkpoint = Checkpoint(heads={"s": (3, links[-1].hash)}, position=30, events=3)
    forged = link(1, None, {"forged": True}, 15)
    forged = forged.model_copy(update={"stream_id": "other"})
    forged = forged.model_copy(update={"hash": event_hash(**_fields(forged))})
    report = verify_chain(relinked([links[0], forged, links[1], links[2]]), checkpoint)
    kinds = {p.kind for p in report.problems}
    assert kinds == {ProblemKind.DIGEST_EXTRA, ProblemKind.DIGEST_COUNT}
    assert report.first_problem is not None and report.first_problem.position == 15
    # Appends after the digest's span are simply newer history.
    later = link(4, links[-1].hash, {"n": 4}, 45)
    assert verify_chain(relinked([*links, later]), checkpoint).ok


def relinked(events: list[RecordedEvent]) -> list[RecordedEvent]:
    """The ledger-wide chain recomputed over `events`, as a thorough forger would."""
    out: list[RecordedEvent] = []
    for event in events:
        prev = out[-1].ledger_hash if out else None
        out.append(event.model_copy(update={"ledger_hash": ledger_link(prev, event.hash)}))
    return out


def _fields(item: RecordedEvent) -> dict[str, Any]:
    exclude = {"position", "hash", "ledger_hash", "write_position"}
    return item.model_dump(exclude=exclude) | {"event_id": str(item.event_id)}


def test_a_digest_with_an_edited_span_is_refused() -> None:
    digest = Digest(created_at=NOW, position=50, events=5, heads={"s": (5, "ab" * 32)})
    doctored = digest.dumps().replace(b'"position": 50', b'"position": 40')
    assert doctored != digest.dumps()
    with pytest.raises(DigestError):
        Digest.loads(doctored)
