"""The outbox on a ledger in memory: a submit's answer never waits for the broker, what the
broker confirmed is recorded, what it refused is held and tried again together (one round per
retry, not one connection attempt per job) until it takes them, and the relay publishes what no
process confirmed."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from ledger.decisions import Caller, JobRequest
from ledger.dispatch import Message
from ledger.errors import DispatchError
from ledger.queueing import Confirmation
from ledger.runtime.ledger import Ledger
from ledger.runtime.outbox import MAX_HELD, Outbox
from ledger.runtime.outbox_records import ConfirmationRecords
from ledger.services.submit import submit
from tests.plugins.deployments import wait_until
from tests.tools import ECHO

AGENT = Caller(account="acme", token_id="tok")


class Broker:
    """A batch dispatcher that can be away, and remembers each round it was asked."""

    def __init__(self) -> None:
        self.away = threading.Event()
        self.rounds: list[list[str]] = []
        self.taken: list[str] = []
        self._lock = threading.Lock()

    def dispatch(self, job_id: str, delay_s: float = 0.0) -> None:
        failed = self.dispatch_many([Message(job_id, delay_s)])[0]
        if failed is not None:
            raise failed

    def dispatch_many(self, messages: Sequence[Message]) -> list[DispatchError | None]:
        with self._lock:
            self.rounds.append([m.job_id for m in messages])
            if self.away.is_set():
                return [DispatchError("broker away") for _ in messages]
            self.taken.extend(m.job_id for m in messages)
            return [None] * len(messages)


def submitted(ledger: Ledger, outbox: Outbox, n: int) -> list[str]:
    request = JobRequest(ECHO, {"text": "x"})
    return [submit(ledger, AGENT, request, outbox).view.job_id for _ in range(n)]


def confirmed(ledger: Ledger, job_ids: list[str]) -> bool:
    with ledger.store.reading() as reads:
        return all(reads.dispatch_state(j) is not None for j in job_ids)


def test_the_outbox_publishes_after_the_answer_and_records_what_was_confirmed(
    memory_ledger: Ledger,
) -> None:
    broker = Broker()
    outbox = Outbox(memory_ledger, broker)
    try:
        ids = submitted(memory_ledger, outbox, 20)
        assert outbox.flush(timeout_s=10)
    finally:
        outbox.close()
    assert sorted(broker.taken) == sorted(ids)
    assert confirmed(memory_ledger, ids)


def test_while_the_broker_is_away_what_is_held_is_tried_together_then_published(
    memory_ledger: Ledger,
) -> None:
    broker = Broker()
    broker.away.set()
    outbox = Outbox(memory_ledger, broker)
    try:
        ids = submitted(memory_ledger, outbox, 30)
        wait_until(lambda: outbox.held == len(ids), 10, "every job to be held")
        tried = len(broker.rounds)
        wait_until(lambda: len(broker.rounds) >= tried + 3, 10, "three more rounds")
        # Each round after the first failure takes every held job at once.
        later = broker.rounds[tried:]
        assert all(len(round_) == len(ids) for round_ in later), [len(r) for r in later]
        assert not confirmed(memory_ledger, ids[:1])
        broker.away.clear()  # back
        wait_until(lambda: outbox.held == 0, 10, "the held jobs to be published")
        assert outbox.flush(timeout_s=10)
        new = submitted(memory_ledger, outbox, 2)  # and new ones go at once again
        assert outbox.flush(timeout_s=10)
    finally:
        outbox.close()
    assert sorted(set(broker.taken)) == sorted(ids + new)
    assert confirmed(memory_ledger, ids + new)


def test_the_relay_publishes_what_no_process_confirmed(memory_ledger: Ledger) -> None:
    ids = submitted(memory_ledger, None, 3)  # type: ignore[arg-type]  # decided, unpublished
    broker = Broker()
    outbox = Outbox(memory_ledger, broker, background=False)
    assert outbox.relay_once(relay_after_s=3600).confirmed == []  # their deciders' time
    time.sleep(0.01)  # the relay's delay is measured on the real clock
    sent = outbox.relay_once(relay_after_s=0.005)
    assert sorted(sent.confirmed) == sorted(ids) and confirmed(memory_ledger, ids)
    assert outbox.relay_once(relay_after_s=0.005).confirmed == []  # confirmed: left alone


class CountingRecords(ConfirmationRecords):
    """Confirmation records that note how many confirmations each record wrote together."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger, MAX_HELD)
        self.records: list[int] = []

    def record(self, confirmed: list[Confirmation]) -> None:
        if confirmed:
            self.records.append(len(confirmed))
        super().record(confirmed)


class CountingOutbox(Outbox):
    def __init__(self, ledger: Ledger, broker: Broker) -> None:
        super().__init__(ledger, broker)
        self._records = self.counting = CountingRecords(ledger)

    @property
    def records(self) -> list[int]:
        return self.counting.records


def test_confirmations_published_one_by_one_are_recorded_together(
    memory_ledger: Ledger,
) -> None:
    """One agent's calls publish one message at a time: the record still waits out FLUSH_S,
    so the confirmations gathered meanwhile cost one statement, not one each."""
    broker = Broker()
    outbox = CountingOutbox(memory_ledger, broker)
    try:
        ids = []
        for _ in range(8):
            ids += submitted(memory_ledger, outbox, 1)
            # Published before the next submit: every message its own publish.
            deadline = time.monotonic() + 10
            while len(broker.taken) < len(ids) and time.monotonic() < deadline:
                time.sleep(0.001)  # a finer wait than wait_until's: eight in one window
        wait_until(lambda: confirmed(memory_ledger, ids), 10, "the records")
    finally:
        outbox.close()
    assert len(broker.rounds) == 8
    assert sum(outbox.records) == 8
    # Eight publishes within a window or two of FLUSH_S: far fewer records than publishes.
    assert len(outbox.records) <= 3, outbox.records


class CountingCondition(threading.Condition):
    """Counts the waits on it, by thread name."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[str] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(threading.current_thread().name)
        return super().wait(timeout)


def test_a_send_wakes_a_publisher_and_nobody_else(memory_ledger: Ledger) -> None:
    """The recorder does not wait on the publishers' condition (a send's one wake-up could
    go to it, and the job would wait for the next send), and a publish that leaves nothing
    to do wakes no idle publisher: one agent's call costs one thread's wake-up."""
    broker = Broker()
    outbox = Outbox(memory_ledger, broker, publishers=2)
    outbox._cond = condition = CountingCondition()
    try:
        ids: list[str] = []
        for count in range(1, 9):
            ids += submitted(memory_ledger, outbox, 1)
            wait_until(lambda n=count: len(broker.taken) == n, 10, "the publish")
        wait_until(lambda: confirmed(memory_ledger, ids), 10, "the records")
    finally:
        outbox.close()
    assert sorted(broker.taken) == sorted(ids)
    assert "outbox-record" not in condition.waits
    # Each publisher's first wait, then at most one a job (the one its send woke).
    assert len(condition.waits) <= 2 + len(ids), condition.waits


def test_no_submit_waits_for_a_sample_of_the_backlog(
    memory_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backlog's figures are sampled on the recorder's thread only: a submit reads them as
    they are, however old (a sample was 15-30 ms at 1M jobs, and the submit that found the
    figures stale paid it, once a second: the agents' p99)."""
    broker = Broker()
    outbox = Outbox(memory_ledger, broker)
    gauge = outbox.backlog
    assert gauge is not None
    sampled_on: list[str] = []
    on_thread = threading.current_thread
    monkeypatch.setattr(gauge, "_sample", lambda: sampled_on.append(on_thread().name))
    gauge.sample_s = 0.0  # always due: whoever samples on a due gauge shows here
    try:
        submitted(memory_ledger, outbox, 5)
        wait_until(lambda: bool(sampled_on), 10, "the recorder's thread to sample")
    finally:
        outbox.close()
    assert set(sampled_on) == {"outbox-record"}, sampled_on
