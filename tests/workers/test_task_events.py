"""Celery task events for Flower (workers/task_events.py), without a broker: each delivery's
words and the event they stand for (never SUCCESS for a failure), the batched runner's events
for every kind of delivery on a ledger in memory, Celery's own request turning the task's
returned words into that event, a job's message named after the job, and heartbeats only with
task events. The real thing, Flower against two workers: tests/integration/test_flower.py."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tests.tools  # noqa: F401  (the canary tools, in this process too)
from ledger.codes import Code, Status
from ledger.decisions import Caller, JobRequest
from ledger.dispatch import Message
from ledger.runtime.ledger import Ledger
from ledger.services import brakes
from ledger.services.execute import Execution, Executor
from ledger.services.submit import submit
from ledger.services.work import ClaimResult
from tests.tools import ECHO
from workers.app import EXECUTE_TASK
from workers.batched import RUNNERS, BatchedRunner, BatchedStop, Delivery
from workers.dispatch import _headers
from workers.task_events import (
    CLAIM_FAILED,
    LATE,
    UNRECORDED,
    ExecuteRequest,
    TaskEvents,
    event_of,
    failure_text,
    settled_text,
)

AGENT = Caller(account="acme", token_id="tok-acme")
WAIT_S = 10.0


# --- the words and their events ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("execution", "words"),
    [
        (
            Execution("j", ClaimResult.CLAIMED, "work.succeeded", status=Status.SUCCEEDED),
            "succeeded",
        ),
        (Execution("j", ClaimResult.CLAIMED, "work.partial", status=Status.PARTIAL), "partial"),
        (Execution("j", ClaimResult.CLAIMED, "work.declined", status=Status.DECLINED), "declined"),
        (
            Execution("j", ClaimResult.CLAIMED, status=Status.FAILED, code=Code.TOOL_CRASHED),
            "failed: TOOL_CRASHED",
        ),
        (
            Execution(
                "j", ClaimResult.CLAIMED, status=Status.RETRYING, code=Code.SOURCE_UNRELIABLE
            ),
            "retrying: SOURCE_UNRELIABLE",
        ),
        (
            Execution("j", ClaimResult.HALTED, status=Status.REFUSED, code=Code.BRAKE_ENGAGED),
            "refused: BRAKE_ENGAGED",
        ),
        (Execution("j", ClaimResult.CLAIMED, "work.failed", late=True), LATE),
        (
            Execution(
                "j",
                ClaimResult.SKIPPED,
                status=Status.FAILED,
                code=Code.OUTCOME_MISSING,
                reason="x",
            ),
            "failed: OUTCOME_MISSING (recorded before this delivery, which ran nothing)",
        ),
        (
            Execution("j", ClaimResult.SKIPPED, status=Status.RUNNING, reason="job is running"),
            "skipped (job is running)",
        ),
        (Execution("j", ClaimResult.SKIPPED, reason="unknown job"), "skipped (unknown job)"),
    ],
)
def test_each_delivery_is_told_in_the_ledgers_words(execution: Execution, words: str) -> None:
    assert settled_text(execution) == words


@pytest.mark.parametrize(
    ("words", "event", "exception"),
    [
        ("succeeded", "task-succeeded", None),
        ("partial", "task-succeeded", None),
        ("failed: TOOL_CRASHED", "task-failed", "TOOL_CRASHED"),
        (
            "failed: OUTCOME_MISSING (recorded before this delivery, which ran nothing)",
            "task-failed",
            "OUTCOME_MISSING",
        ),
        (LATE, "task-failed", LATE),
        (UNRECORDED, "task-failed", UNRECORDED),
        (failure_text(RuntimeError("boom")), "task-failed", failure_text(RuntimeError())),
        ("retrying: SOURCE_UNRELIABLE", "task-retried", "SOURCE_UNRELIABLE"),
        ("declined", "task-revoked", None),
        ("refused: BRAKE_ENGAGED", "task-revoked", None),
        ("skipped (job is running)", "task-rejected", None),
        (CLAIM_FAILED, "task-rejected", None),
        ("anything else", "task-rejected", None),
    ],
)
def test_the_words_name_the_closest_celery_event(
    words: str, event: str, exception: str | None
) -> None:
    kind, fields = event_of(words)
    assert kind == event
    assert fields["result"] == words  # Flower's result column says the ledger's status
    assert fields.get("exception") == exception


# --- the batched runner -----------------------------------------------------------------------


class Dispatcher:
    """Celery's event dispatcher, as the runner's events see it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.flushed = 0
        self._lock = threading.Lock()

    def flush(self) -> None:
        self.flushed += 1

    def send(self, type: str, **fields: Any) -> None:  # Celery's names
        with self._lock:
            self.sent.append((type, fields))

    def of(self, task_id: str) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return [(t, f) for t, f in self.sent if f["uuid"] == task_id]


class KombuMessage:
    """What the runner reads of a kombu message: a job's, as workers/dispatch.py sends it."""

    def __init__(self, job_id: str, tool: str) -> None:
        self.headers = _headers(Message(job_id, 0.0, tool))
        self.delivery_info = {"routing_key": "outcomes"}

    def ack_log_error(self, logger: Any, errors: Any) -> None:
        pass


def test_the_batched_runner_sends_each_deliverys_events(memory_ledger: Ledger) -> None:
    secret = f"sk-live-{uuid.uuid4().hex}"

    def job(tool: str, args: dict[str, Any]) -> str:
        return submit(memory_ledger, AGENT, JobRequest(tool=tool, args=args)).view.job_id

    jobs = {
        "ok": (ECHO, job(ECHO, {"text": "hi"})),
        "crash": ("canary.crash", job("canary.crash", {"secret": secret})),
        "declined": ("canary.decline", job("canary.decline", {"secret": secret})),
        "retrying": ("canary.flaky", job("canary.flaky", {"secret": secret})),
        "held": ("canary.refuse", job("canary.refuse", {"secret": secret})),
        "unknown": (ECHO, str(uuid.uuid4())),
    }
    brakes.pull(memory_ledger, "tool:canary.refuse", "incident", "ops")  # after its decision
    dispatcher = Dispatcher()
    executor = Executor(memory_ledger, "events-worker")
    runner = BatchedRunner(
        lambda: executor, 4, events=TaskEvents(SimpleNamespace(event_dispatcher=dispatcher))
    )
    acked: list[str] = []

    def deliver(tool: str, job_id: str) -> None:
        runner.deliver(
            Delivery(KombuMessage(job_id, tool), job_id, lambda *_: acked.append(job_id), "h", ())
        )

    def wait_acked(count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(acked) < count:
            assert time.monotonic() < deadline, f"{len(acked)} of {count} acked"
            time.sleep(0.005)

    for tool, job_id in jobs.values():
        deliver(tool, job_id)
    wait_acked(len(jobs))
    deliver(*jobs["ok"])  # once more, after its job is done: it runs nothing
    wait_acked(len(jobs) + 1)
    assert runner.stop(WAIT_S)

    def kinds(name: str) -> list[str]:
        return [kind for kind, _ in dispatcher.of(jobs[name][1])]

    assert kinds("ok") == [
        *("task-received", "task-started", "task-succeeded"),
        *("task-received", "task-succeeded"),  # the ledger's outcome, told again
    ]
    assert kinds("crash") == ["task-received", "task-started", "task-failed"]
    assert kinds("declined") == ["task-received", "task-started", "task-revoked"]
    assert kinds("retrying") == ["task-received", "task-started", "task-retried"]
    assert kinds("held") == ["task-received", "task-revoked"]  # halted at its claim
    assert kinds("unknown") == ["task-received", "task-rejected"]

    crash_id = jobs["crash"][1]
    received, _, failed = (fields for _, fields in dispatcher.of(crash_id))
    assert received["name"] == EXECUTE_TASK
    assert (received["args"], received["kwargs"]) == (repr([crash_id]), "{'tool': 'canary.crash'}")
    assert (failed["exception"], failed["result"]) == ("TOOL_CRASHED", "failed: TOOL_CRASHED")
    assert failed["runtime"] >= 0
    held = dispatcher.of(jobs["held"][1])[-1][1]
    assert held["result"] == "refused: BRAKE_ENGAGED"
    again = dispatcher.of(jobs["ok"][1])[-1][1]["result"]
    assert again == "succeeded (recorded before this delivery, which ran nothing)"
    assert secret not in repr(dispatcher.sent)


def test_a_stopping_consumer_flushes_its_runners_last_events(memory_ledger: Ledger) -> None:
    dispatcher = Dispatcher()
    consumer = SimpleNamespace(event_dispatcher=dispatcher)
    executor = Executor(memory_ledger, "stopping-worker")
    RUNNERS[id(consumer)] = BatchedRunner(lambda: executor, 2, events=TaskEvents(consumer))
    try:
        BatchedStop.stop(BatchedStop.__new__(BatchedStop), consumer)
    finally:
        del RUNNERS[id(consumer)]
    assert dispatcher.flushed == 1
    TaskEvents(SimpleNamespace(event_dispatcher=None)).flush()  # a consumer between connections


def test_a_runner_without_events_sends_none(memory_ledger: Ledger) -> None:
    job_id = submit(memory_ledger, AGENT, JobRequest(tool=ECHO, args={"text": "hi"})).view
    executor = Executor(memory_ledger, "quiet-worker")
    runner = BatchedRunner(lambda: executor, 2)  # task events off: no events object at all
    acked = threading.Event()
    message = KombuMessage(job_id.job_id, ECHO)
    runner.deliver(Delivery(message, job_id.job_id, lambda *_: acked.set(), "h", ()))
    assert acked.wait(WAIT_S)
    assert runner.stop(WAIT_S)


# --- Celery's own request (prefork, solo, a delayed message) ----------------------------------


class Eventer:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, type: str, **fields: Any) -> None:  # Celery's names
        self.sent.append((type, fields))


def _request(eventer: Eventer) -> ExecuteRequest:
    request = ExecuteRequest.__new__(ExecuteRequest)
    request._eventer = eventer
    request._task = SimpleNamespace(send_events=True)
    request.id = "job-1"
    return request


@pytest.mark.parametrize(
    ("returned", "event"),
    [
        ("'succeeded'", "task-succeeded"),
        ("'failed: TOOL_CRASHED'", "task-failed"),
        ("'declined'", "task-revoked"),
        ("'retrying: SOURCE_UNRELIABLE'", "task-retried"),
    ],
)
def test_celerys_request_sends_the_event_the_task_returned(returned: str, event: str) -> None:
    eventer = Eventer()
    # Celery hands the request the repr of what the task returned.
    _request(eventer).send_event("task-succeeded", result=returned, runtime=0.5)
    [(kind, fields)] = eventer.sent
    assert (kind, fields["uuid"], fields["runtime"]) == (event, "job-1", 0.5)
    assert fields["result"] == returned.strip("'")


def test_celerys_request_passes_its_other_events_on() -> None:
    eventer = Eventer()
    _request(eventer).send_event("task-started")
    _request(eventer).send_event("task-succeeded", result="None", runtime=0.1)  # not our words
    assert eventer.sent == [
        ("task-started", {"uuid": "job-1"}),
        ("task-succeeded", {"uuid": "job-1", "result": "None", "runtime": 0.1}),
    ]


def test_the_execute_task_returns_its_words_and_has_the_request() -> None:
    from workers.tasks import execute

    assert execute.Request == "workers.task_events:ExecuteRequest"


# --- a job's message --------------------------------------------------------------------------


def test_a_jobs_message_is_named_after_the_job_and_names_its_tool_only() -> None:
    headers = _headers(Message("job-7", 0.0, "tracker.read_issue"))
    assert (headers["id"], headers["root_id"]) == ("job-7", "job-7")
    assert (headers["argsrepr"], headers["kwargsrepr"]) == (
        "['job-7']",
        "{'tool': 'tracker.read_issue'}",
    )
    assert "eta" not in headers
    assert _headers(Message("job-7", 2.0))["kwargsrepr"] == "{}"  # a sender without the tool
    assert "eta" in _headers(Message("job-7", 2.0))


# --- heartbeats -------------------------------------------------------------------------------


@pytest.mark.parametrize(("events", "heartbeats"), [("0", False), ("1", True)])
def test_workers_send_heartbeats_only_with_task_events(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, events: str, heartbeats: bool
) -> None:
    monkeypatch.chdir(tmp_path)  # the embedded broker's folder
    for name in ("OUTCOMES_BROKER_URL", "OUTCOMES_METRICS_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OUTCOMES_TASK_EVENTS", events)
    from workers import main

    started: list[list[str]] = []
    monkeypatch.setattr(main.app, "start", lambda argv: started.append(argv) or 0)
    main.run_worker(2, "threads", "INFO")
    [argv] = started
    assert ("--without-heartbeat" not in argv) is heartbeats
    assert {"--without-gossip", "--without-mingle"} <= set(argv)
