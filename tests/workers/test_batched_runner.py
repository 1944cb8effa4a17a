"""The batched runner (workers/batched.py) on a ledger in memory, with stand-in broker
messages: claims in groups up to the free slots, every message acked once and only after its
job is settled in the ledger, nothing run twice, a brake honoured, the ledger's outage waited
out with the messages held, one bad claim costing no other, and a stop that waits for the
claimed jobs. Real worker processes on RabbitMQ and Postgres: tests/integration/
test_batched_worker.py."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from ledger.decisions import Caller, JobRequest
from ledger.errors import StorageUnavailableError
from ledger.events import job_stream
from ledger.outcomes import Succeeded
from ledger.runtime.batching import DaemonThreads
from ledger.runtime.ledger import Ledger
from ledger.runtime.watchdog import Watchdog
from ledger.services import brakes
from ledger.services.execute import Executor
from ledger.services.submit import submit
from ledger.services.work import Claim
from ledger.tools import ToolContext, tool
from tests.factories import get_job
from workers.batched import STEADY_S, BatchedRunner, Delivery

AGENT = Caller(account="acme", token_id="tok-acme")
WAIT_S = 10.0

GATE = threading.Event()
RUNNING: set[str] = set()
RAN: list[str] = []
MOST_AT_ONCE = [0]
_LOCK = threading.Lock()


class Nothing(BaseModel):
    pass


@tool("batched.gated")
def gated(args: Nothing, ctx: ToolContext) -> Succeeded:
    with _LOCK:
        RUNNING.add(ctx.job_id)
        MOST_AT_ONCE[0] = max(MOST_AT_ONCE[0], len(RUNNING))
    try:
        GATE.wait(WAIT_S)
    finally:
        with _LOCK:
            RUNNING.discard(ctx.job_id)
            RAN.append(ctx.job_id)
    return Succeeded()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    GATE.clear()
    RUNNING.clear()
    RAN.clear()
    MOST_AT_ONCE[0] = 0
    yield
    GATE.set()  # no tool thread outlives its test waiting on the gate


class Message:
    """What the runner reads of a kombu message, and the direct ack it may use."""

    def __init__(self) -> None:
        self.headers = {"id": str(uuid.uuid4())}
        self.delivery_info = {"routing_key": "outcomes"}
        self.direct_acks = 0

    def ack_log_error(self, logger: Any, errors: Any) -> None:
        self.direct_acks += 1


class Acks:
    """The event loop's acks, with each job's state in the ledger at the moment of its ack."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.acked: list[tuple[str, bool]] = []  # (job id, terminal when acked)
        self._lock = threading.Lock()

    def delivery(self, job_id: str, message: Message | None = None) -> Delivery:
        def ack(logger: Any, errors: Any) -> None:
            terminal = get_job(self.ledger, job_id).terminal
            with self._lock:
                self.acked.append((job_id, terminal))

        return Delivery(message or Message(), job_id, ack, "test@host", ())

    def jobs(self) -> list[str]:
        with self._lock:
            return [job_id for job_id, _ in self.acked]


class CountingExecutor(Executor):
    """A real executor that remembers the size of each claim transaction, and can be made
    to fail its next claims."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger, "batch-worker")
        self.batches: list[int] = []
        self.failures: list[Exception] = []
        self.refuse: Callable[[Sequence[str]], Exception | None] = lambda ids: None

    def claim_batch(self, job_ids: Sequence[str]) -> list[Claim]:
        if self.failures:
            raise self.failures.pop(0)
        if (error := self.refuse(job_ids)) is not None:
            raise error
        self.batches.append(len(job_ids))
        return super().claim_batch(job_ids)


def _submit(ledger: Ledger, count: int) -> list[str]:
    request = JobRequest(tool="batched.gated", args={})
    return [submit(ledger, AGENT, request).view.job_id for _ in range(count)]


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def _runner(executor: Executor, slots: int) -> BatchedRunner:
    return BatchedRunner(lambda: executor, slots)


def test_claims_up_to_the_free_slots_and_acks_each_job_once_it_is_settled(
    memory_ledger: Ledger,
) -> None:
    executor = CountingExecutor(memory_ledger)
    delivered = threading.Event()
    # The first claim waits until all seven have arrived: the next takes what has gathered.
    executor.refuse = lambda ids: None if delivered.wait(WAIT_S) else RuntimeError("slow")
    runner = _runner(executor, slots=3)
    acks = Acks(memory_ledger)
    jobs = _submit(memory_ledger, 7)
    for job_id in jobs:
        runner.deliver(acks.delivery(job_id))
    delivered.set()
    _wait(lambda: len(RUNNING) == 3, "three tools running")
    assert acks.jobs() == []  # nothing acked while its tool runs
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 7, "every message acked")
    assert sorted(acks.jobs()) == sorted(jobs)
    assert all(terminal for _, terminal in acks.acked)  # acked only after the outcome
    assert sorted(RAN) == sorted(jobs)
    assert MOST_AT_ONCE[0] == 3  # never more tools than slots
    assert sum(executor.batches) == 7
    # While the first claim was held, the rest gathered: some claim took several at once,
    # and none took more than the free slots.
    assert 2 <= max(executor.batches) <= 3
    assert all(get_job(memory_ledger, j).status.value == "succeeded" for j in jobs)
    assert runner.stop(WAIT_S)


def test_a_job_delivered_twice_runs_once_and_both_messages_are_acked(
    memory_ledger: Ledger,
) -> None:
    runner = _runner(CountingExecutor(memory_ledger), slots=4)
    acks = Acks(memory_ledger)
    (job_id,) = _submit(memory_ledger, 1)
    runner.deliver(acks.delivery(job_id))
    _wait(lambda: job_id in RUNNING, "the tool running")
    runner.deliver(acks.delivery(job_id))  # a redelivery while the first runs
    _wait(lambda: len(acks.jobs()) == 1, "the redelivery acked")
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 2, "both acked")
    assert [job_id] == RAN
    assert runner.stop(WAIT_S)


def test_a_pulled_brake_halts_the_claim_nothing_runs_and_the_message_is_acked(
    memory_ledger: Ledger,
) -> None:
    runner = _runner(CountingExecutor(memory_ledger), slots=4)
    acks = Acks(memory_ledger)
    jobs = _submit(memory_ledger, 3)
    brakes.pull(memory_ledger, "tool:batched.gated", "incident", "ops")
    for job_id in jobs:
        runner.deliver(acks.delivery(job_id))
    _wait(lambda: len(acks.jobs()) == 3, "every message acked")
    assert RAN == []
    for job_id in jobs:  # halted at its claim: refused, with the brake as the reason
        view = get_job(memory_ledger, job_id)
        assert view.status.value == "refused"
        assert view.error is not None and view.error.code.value == "BRAKE_ENGAGED"
    assert runner.stop(WAIT_S)


def test_the_ledger_down_at_claim_holds_the_messages_until_it_is_back(
    memory_ledger: Ledger,
) -> None:
    executor = CountingExecutor(memory_ledger)
    executor.failures = [StorageUnavailableError("down"), StorageUnavailableError("still down")]
    runner = _runner(executor, slots=4)
    acks = Acks(memory_ledger)
    jobs = _submit(memory_ledger, 2)
    for job_id in jobs:
        runner.deliver(acks.delivery(job_id))
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 2, "both acked once the ledger is back")
    assert executor.failures == []  # both outages were waited out, not skipped
    assert all(terminal for _, terminal in acks.acked)
    assert sorted(RAN) == sorted(jobs)
    assert runner.stop(WAIT_S)


def test_one_claim_that_fails_costs_the_others_nothing(memory_ledger: Ledger) -> None:
    executor = CountingExecutor(memory_ledger)
    jobs = _submit(memory_ledger, 3)
    bad = jobs[1]
    executor.refuse = lambda ids: RuntimeError("bad row") if bad in ids else None
    runner = _runner(executor, slots=4)
    acks = Acks(memory_ledger)
    GATE.set()
    for job_id in jobs:
        runner.deliver(acks.delivery(job_id))
    _wait(lambda: len(acks.jobs()) == 3, "every message acked")
    assert sorted(RAN) == sorted(j for j in jobs if j != bad)
    assert get_job(memory_ledger, bad).status.value == "queued"  # left to the reconciler
    assert runner.stop(WAIT_S)


def test_stop_waits_for_the_claimed_jobs_and_leaves_the_rest_unacked(
    memory_ledger: Ledger,
) -> None:
    runner = _runner(CountingExecutor(memory_ledger), slots=2)
    acks = Acks(memory_ledger)
    jobs = _submit(memory_ledger, 3)
    messages = [Message() for _ in jobs]
    for job_id, message in zip(jobs, messages, strict=True):
        runner.deliver(acks.delivery(job_id, message))
    _wait(lambda: len(RUNNING) == 2, "two tools running")
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(runner.stop(WAIT_S)))
    stopper.start()
    stopper.join(0.2)  # a stop that did not wait would be done by now
    assert stopper.is_alive() and stopped == []  # still waiting for the two running jobs
    GATE.set()
    stopper.join(WAIT_S)
    assert stopped == [True]
    # The running two finished and were acked directly (the event loop has stopped); the
    # third was never claimed, so its message stays with the broker.
    assert sorted(RAN) == sorted(jobs[:2])
    assert [m.direct_acks for m in messages] == [1, 1, 0]
    assert get_job(memory_ledger, jobs[2]).status.value == "queued"


def test_stopping_while_the_ledger_is_down_acks_nothing(memory_ledger: Ledger) -> None:
    executor = CountingExecutor(memory_ledger)
    executor.failures = [StorageUnavailableError("down")] * 1000  # down for good
    runner = _runner(executor, slots=4)
    acks = Acks(memory_ledger)
    jobs = _submit(memory_ledger, 2)
    messages = [Message() for _ in jobs]
    for job_id, message in zip(jobs, messages, strict=True):
        runner.deliver(acks.delivery(job_id, message))
    _wait(lambda: len(executor.failures) < 999, "a claim to meet the outage")
    assert runner.stop(WAIT_S)
    # Nothing was claimed, so nothing is acked: the broker gives both to another worker.
    assert acks.jobs() == [] and [m.direct_acks for m in messages] == [0, 0]
    assert RAN == [] and runner.busy == 0


class HeldRecordExecutor(CountingExecutor):
    """Holds each outcome between its tool's return and its recording until `record` is set."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.record = threading.Event()

    def start(
        self,
        job_id: str,
        claimed: Claim,
        tool_done: Callable[[], None],
        settled: Callable[[Any], None],
    ) -> None:
        def then_hold() -> None:
            tool_done()
            self.record.wait(WAIT_S)

        super().start(job_id, claimed, then_hold, settled)


def test_a_slot_is_free_once_its_tool_returns_while_its_outcome_is_recorded(
    memory_ledger: Ledger,
) -> None:
    executor = HeldRecordExecutor(memory_ledger)
    runner = _runner(executor, slots=1)
    acks = Acks(memory_ledger)
    first, second = _submit(memory_ledger, 2)
    runner.deliver(acks.delivery(first))
    _wait(lambda: first in RUNNING, "the first tool running")
    runner.deliver(acks.delivery(second))
    assert second not in RUNNING  # one slot: the second waits while the first tool runs
    GATE.set()
    # The first tool returned; its outcome is held, unrecorded and unacked, and the second
    # tool runs in the slot the first left.
    _wait(lambda: second in RAN, "the second tool to run")
    assert acks.jobs() == [] and runner.busy == 2
    assert MOST_AT_ONCE[0] == 1  # never two tools at once
    executor.record.set()
    _wait(lambda: len(acks.jobs()) == 2, "both acked")
    assert all(terminal for _, terminal in acks.acked)  # each acked after its outcome
    assert runner.stop(WAIT_S)


LATE_GATE = threading.Event()


@tool("batched.overdue", timeout_s=0.3, max_attempts=1)
def overdue(args: Nothing, ctx: ToolContext) -> Succeeded:
    LATE_GATE.wait(WAIT_S)  # outlives its deadline, then returns a success nobody records
    with _LOCK:
        RAN.append(ctx.job_id)
    return Succeeded()


@tool("batched.long")
def long_running(args: Nothing, ctx: ToolContext) -> Succeeded:
    GATE.wait(WAIT_S)
    return Succeeded()


def test_a_tool_past_its_deadline_is_settled_on_time_and_its_late_return_dropped(
    memory_ledger: Ledger,
) -> None:
    LATE_GATE.clear()
    runner = _runner(CountingExecutor(memory_ledger), slots=1)
    acks = Acks(memory_ledger)
    late, after = (
        submit(memory_ledger, AGENT, JobRequest(tool=name, args={})).view.job_id
        for name in ("batched.overdue", "batched.gated")
    )
    runner.deliver(acks.delivery(late))
    runner.deliver(acks.delivery(after))
    GATE.set()
    try:
        # The deadline settles the job while its tool still runs: recorded, acked, and the
        # slot goes to the next job.
        _wait(lambda: len(acks.jobs()) == 2, "both acked, the overdue tool still running")
        assert [after] == RAN
        view = get_job(memory_ledger, late)
        assert view.status.value == "failed" and view.error is not None
        assert view.error.code.value == "DEADLINE_EXCEEDED"
    finally:
        LATE_GATE.set()
    _wait(lambda: late in RAN, "the overdue tool to return")
    assert runner.stop(WAIT_S)
    types = [e.type for e in memory_ledger.store.read_stream(job_stream(late))]
    assert types[-1] == "work.failed" and types.count("work.failed") == 1  # nothing after it
    assert get_job(memory_ledger, late).status.value == "failed"


def test_the_watchdog_renews_the_lease_of_a_tool_nobody_waits_on(memory_ledger: Ledger) -> None:
    executor = CountingExecutor(memory_ledger)
    executor.lease_s = 0.3  # renewed every 0.1 s
    executor._watchdog = Watchdog(0.1, executor._heartbeat, DaemonThreads())
    flushes = executor.renewals.flushes
    runner = _runner(executor, slots=1)
    acks = Acks(memory_ledger)
    job = submit(memory_ledger, AGENT, JobRequest(tool="batched.long", args={})).view.job_id
    runner.deliver(acks.delivery(job))
    _wait(lambda: executor.renewals.flushes >= flushes + 3, "three renewals")
    with memory_ledger.store.reading() as reads:
        late = datetime.now(UTC) + timedelta(seconds=0.05)
        assert job not in {o.view.job_id for o in reads.overdue_jobs(late, late)}
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 1, "the job acked")
    assert get_job(memory_ledger, job).status.value == "succeeded"
    assert not executor._watchdog._watched  # a settled job is watched (and renewed) no more
    assert runner.stop(WAIT_S)


def test_a_claim_waits_for_running_tools_to_return_when_more_is_waiting(
    memory_ledger: Ledger,
) -> None:
    """With a backlog, a claim takes the slots of every tool returning about then, not only
    the first one's: the runner waits (here up to 10 s; 5 ms in a worker) for room."""
    executor = CountingExecutor(memory_ledger)
    runner = BatchedRunner(lambda: executor, 4, gather_s=10.0)
    acks = Acks(memory_ledger)
    first, backlog = _submit(memory_ledger, 4), _submit(memory_ledger, 4)
    for job_id in first:
        runner.deliver(acks.delivery(job_id))
    _wait(lambda: len(RUNNING) == 4, "four tools running")
    claimed_before = len(executor.batches)  # one claim or several: they arrived one by one
    for job_id in backlog:
        runner.deliver(acks.delivery(job_id))
    GATE.set()  # the four return one after another
    _wait(lambda: len(acks.jobs()) == 8, "every message acked")
    assert executor.batches[claimed_before:] == [4]  # the backlog in one claim, not 1 then 3
    assert runner.stop(WAIT_S)


def test_with_room_enough_a_claim_does_not_wait(memory_ledger: Ledger) -> None:
    executor = CountingExecutor(memory_ledger)
    runner = BatchedRunner(lambda: executor, 4, gather_s=60.0)
    acks = Acks(memory_ledger)
    running, more = _submit(memory_ledger, 2)
    runner.deliver(acks.delivery(running))
    _wait(lambda: running in RUNNING, "the first tool running")
    runner.deliver(acks.delivery(more))  # three slots free for one delivery: no reason to wait
    _wait(lambda: more in RUNNING, "the second tool running beside the first")
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 2, "both acked")
    assert executor.batches == [1, 1]
    assert runner.stop(WAIT_S)


def test_while_deliveries_keep_coming_a_claim_waits_for_a_few_more(
    memory_ledger: Ledger,
) -> None:
    """One producer's jobs arrive one by one: right after a claim, the next waits (here up to
    10 s; 5 ms in a worker) until there are enough deliveries for its room, so one claim
    serves them instead of one claim each."""
    executor = CountingExecutor(memory_ledger)
    runner = BatchedRunner(lambda: executor, 4, linger_s=10.0, steady_s=10.0)
    acks = Acks(memory_ledger)
    first, *rest = _submit(memory_ledger, 4)
    runner.deliver(acks.delivery(first))  # nothing claimed before it: no reason to wait
    _wait(lambda: first in RUNNING, "the first tool running")
    second, *others = rest
    runner.deliver(acks.delivery(second))  # three slots free: the claim waits for three
    given = time.monotonic()  # time enough to claim it alone, were the runner not waiting
    _wait(lambda: time.monotonic() - given > 0.2, "0.2 s for a claim of the second alone")
    assert second not in RUNNING
    for job_id in others:
        runner.deliver(acks.delivery(job_id))
    _wait(lambda: len(RUNNING) == 4, "four tools running")
    assert executor.batches == [1, 3]
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 4, "every message acked")
    assert runner.stop(WAIT_S)


@pytest.mark.parametrize(
    ("steady_s", "pause_s"),
    [
        pytest.param(0.05, 0.1, id="after a quiet spell longer than steady_s"),
        # An agent that waits for each outcome sends its next call tens of milliseconds after
        # the last: right after a claim, but nothing follows it, so its claim must not wait
        # (it did, 5 ms on every call, while a claim had been taken within 50 ms).
        pytest.param(STEADY_S, 0.02, id="an agent's next call, 20 ms later"),
    ],
)
def test_a_lone_delivery_is_claimed_at_once(
    memory_ledger: Ledger, steady_s: float, pause_s: float
) -> None:
    executor = CountingExecutor(memory_ledger)
    runner = BatchedRunner(lambda: executor, 4, linger_s=60.0, steady_s=steady_s)
    acks = Acks(memory_ledger)
    first, second = _submit(memory_ledger, 2)
    runner.deliver(acks.delivery(first))
    _wait(lambda: first in RUNNING, "the first tool running")
    paused_from = time.monotonic()
    _wait(lambda: time.monotonic() - paused_from > pause_s, f"{pause_s} s without a delivery")
    runner.deliver(acks.delivery(second))  # were it to linger, it would wait 60 s
    _wait(lambda: second in RUNNING, "the second tool running without a wait")
    assert executor.batches == [1, 1]
    GATE.set()
    _wait(lambda: len(acks.jobs()) == 2, "both acked")
    assert runner.stop(WAIT_S)


def test_an_ack_that_raises_costs_no_other_delivery_and_the_claims_thread_lives_on(
    memory_ledger: Ledger,
) -> None:
    """An ack on a connection that just died can raise (through Celery's ack promise); the
    job is settled already, so the runner logs it and goes on claiming the others."""
    runner = _runner(CountingExecutor(memory_ledger), slots=2)
    acks = Acks(memory_ledger)
    first, second = _submit(memory_ledger, 2)

    def broken_ack(logger: Any, errors: Any) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    GATE.set()
    runner.deliver(Delivery(Message(), first, broken_ack, "test@host", ()))
    _wait(lambda: get_job(memory_ledger, first).terminal, "the first job settled")
    _wait(lambda: runner.busy == 0, "the first delivery released despite its ack")
    runner.deliver(acks.delivery(second))
    _wait(lambda: acks.jobs() == [second], "the next delivery claimed and acked")
    assert sorted(RAN) == sorted([first, second])
    assert runner.stop(WAIT_S)
