"""Group commit and the tool threads: each caller gets its own answer, errors reach exactly
the callers of the failed flush, and callers that arrive during a flush share the next one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from ledger.runtime.batching import DaemonThreads, GroupCommit


def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_each_caller_gets_its_own_result_and_concurrent_callers_share_flushes() -> None:
    entered, release = threading.Event(), threading.Event()
    sizes: list[int] = []

    def flush(items: list[int]) -> list[int]:
        sizes.append(len(items))
        if len(sizes) == 1:  # hold the first flush until everybody else has queued
            entered.set()
            release.wait(10)
        return [i * 10 for i in items]

    group: GroupCommit[int, int] = GroupCommit(flush)
    results: dict[int, int] = {}
    first = threading.Thread(target=lambda: results.__setitem__(0, group.submit(0)))
    first.start()
    assert entered.wait(10)
    others = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, group.submit(i)))
        for i in range(1, 21)
    ]
    for thread in others:
        thread.start()
    until(lambda: len(group._queue) == 20)  # all queued behind the held flush
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert results == {i: i * 10 for i in range(21)}
    assert sizes == [1, 20] and group.flushes == 2


def test_many_callers_each_woken_once_to_lead_or_with_their_answer_never_hang() -> None:
    """The hand-off under contention, thousands of times: each caller is woken either to lead
    the next flush or with its own answer (a lost wake-up hangs a caller; a second one raises,
    as a ticket's latch is a lock released only while held)."""

    def flush(items: list[tuple[int, int]]) -> list[tuple[int, int]]:
        time.sleep(0)  # gives the other callers the interpreter: they queue meanwhile
        return [(t, i * 2) for t, i in items]

    group: GroupCommit[tuple[int, int], tuple[int, int]] = GroupCommit(flush, max_batch=8)
    answers: dict[int, list[tuple[int, int]]] = {}
    errors: list[BaseException] = []

    def caller(t: int) -> None:
        try:
            answers[t] = [group.submit((t, i)) for i in range(400)]
        except BaseException as exc:  # reported below, with the thread's own answers
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a caller was never woken"
    assert errors == []
    assert answers == {t: [(t, i * 2) for i in range(400)] for t in range(16)}
    assert group.flushes < 16 * 400  # callers shared flushes
    assert not group._busy and group._queue == []


def test_a_failed_flush_raises_in_its_callers_only_and_the_next_one_runs() -> None:
    calls: list[list[str]] = []

    def flush(items: list[str]) -> list[str]:
        calls.append(items)
        if "bad" in items:
            raise RuntimeError("the database went away")
        return [s.upper() for s in items]

    group: GroupCommit[str, str] = GroupCommit(flush)
    with pytest.raises(RuntimeError, match="went away"):
        group.submit("bad")
    assert group.submit("good") == "GOOD"
    assert calls == [["bad"], ["good"]]


def test_a_flush_that_answers_the_wrong_number_of_results_is_an_error() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda items: [])
    with pytest.raises(RuntimeError, match="answered 0"):
        group.submit(1)


def test_batches_are_capped() -> None:
    gate = threading.Event()
    sizes: list[int] = []

    def flush(items: list[int]) -> list[int]:
        sizes.append(len(items))
        gate.wait(10)
        return items

    group: GroupCommit[int, int] = GroupCommit(flush, max_batch=4)
    threads = [threading.Thread(target=group.submit, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    until(lambda: len(group._queue) == 9)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert sorted(sizes, reverse=True)[:1] == [4] and sum(sizes) == 10 and max(sizes) <= 4


def test_tool_threads_are_kept_and_reused() -> None:
    pool = DaemonThreads("test", idle_s=5)
    names: list[str] = []
    for _ in range(5):
        done = threading.Event()
        pool.run(lambda done=done: (names.append(threading.current_thread().name), done.set()))
        assert done.wait(5)
        until(lambda: pool._idle == 1)  # the thread is back, waiting for work
    assert len(set(names)) == 1 and names[0].startswith("test-")
    assert threading.current_thread().name not in names
