"""The sequencer under a race (Postgres): 16 writers commit without a ledger-wide lock (new jobs
checked against brakes, claims, rollbacks, replays of batches that landed, brake pulls and
releases), one transaction stays open across many ticks, 4 tailing readers read ledger order
without ever sequencing and 2 feed readers catch up as they read, and the sequencer process is
killed mid-run and replaced. Every reader sees every committed event exactly once, in one dense
order, the same for all."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.process import BaseProcess

import pytest
from sqlalchemy import func, select

from ledger.persistence.appends import AppendStatus, JobAppend
from ledger.persistence.schema import events
from ledger.persistence.sql_store import SqlStore
from ledger.queries import EventFilter
from ledger.runtime.ledger import Ledger
from ledger.runtime.sequencer import SequencerLoop
from ledger.services import brakes
from tests.concurrent_writers import accepted_event, wait_until
from tests.factories import open_sql, started, verify_store
from tests.store_helpers import read_after

pytestmark = pytest.mark.postgres

WRITERS = 16
RUN_S = 8.0
HELD_S = 3.0  # the open transaction spans many ticks
Seen = list[tuple[int, uuid.UUID]]


def _sequencer_process(url: str) -> None:
    """A reconciler's sequencer, alone in its process, until it is killed."""
    with open_sql(url, pool_size=1) as store:
        SequencerLoop(Ledger(store)).run()


def _start_sequencer(url: str) -> BaseProcess:
    process = get_context("spawn").Process(target=_sequencer_process, args=(url,), daemon=True)
    process.start()
    return process


@dataclass
class Tally:
    statuses: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[BaseException] = field(default_factory=list)

    def add(self, what: str) -> None:
        with self.lock:
            self.statuses[what] += 1


def _writer(store: SqlStore, stop: threading.Event, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    ledger = Ledger(store)
    landed: list[tuple[JobAppend, JobAppend | None]] = []  # (the submit, its claim if any)
    try:
        while not stop.is_set():
            roll = rng.random()
            if roll < 0.45 or not landed:
                item = JobAppend(
                    str(uuid.uuid4()), [accepted_event(seed)], None, brake_scopes=("global",)
                )
                (done,) = store.append_jobs([item])
                tally.add(f"submit:{done.status}")
                if done.status is AppendStatus.OK:
                    landed.append((item, None))
            elif roll < 0.65:
                index = rng.randrange(len(landed))
                item, claim = landed[index]
                if claim is None:
                    with store.reading() as reads:
                        view = reads.job(item.job_id)
                    claim = JobAppend(item.job_id, [started()], view, brakes_lock=True)
                    (done,) = store.append_jobs([claim])
                    tally.add(f"claim:{done.status}")
                    landed[index] = (item, claim)
                else:  # the claim's batch is delivered again: it must not land twice
                    (done,) = store.append_jobs([claim])
                    tally.add(f"replay:{done.status}")
            elif roll < 0.80:
                try:
                    with store.transaction() as tx:
                        tx.append(f"job-{uuid.uuid4()}", [accepted_event(seed)], 0)
                        raise _RolledBack
                except _RolledBack:
                    tally.add("rolled_back")
            elif roll < 0.90:
                (done,) = store.append_jobs([landed[rng.randrange(len(landed))][0]])
                tally.add(f"replay:{done.status}")
            else:
                pulled = brakes.pull(ledger, "global", "race", "operator:race")
                tally.add("pulled")
                time.sleep(rng.random() / 100)
                brakes.release(ledger, pulled.brake_id, "race", "operator:race")
                tally.add("released")
    except BaseException as exc:  # reported by the test
        tally.errors.append(exc)


def _waiting(store: SqlStore) -> int:
    state = store.sequencer_state()
    assert state is not None
    return state.waiting


class _RolledBack(Exception):
    pass


def _holder(store: SqlStore, tally: Tally) -> None:
    try:
        with store.transaction() as tx:
            tx.append(f"job-{uuid.uuid4()}", [accepted_event(-1)], 0)
            time.sleep(HELD_S)
        tally.add("held_committed")
    except BaseException as exc:
        tally.errors.append(exc)


def _reader(
    read: Callable[[int], Seen], stop: threading.Event, seen: Seen, gaps: list[str]
) -> None:
    after = 0
    while True:
        finishing = stop.is_set()  # decided before the read: a last whole read after it
        page = read(after)
        for position, event_id in page:
            if position != after + 1:
                gaps.append(f"{after} then {position}")
            seen.append((position, event_id))
            after = position
        if finishing and not page:
            return
        if not page:
            time.sleep(0.005)


def test_every_reader_sees_every_committed_event_once_in_one_dense_order(
    pg_app_url: str,
) -> None:
    store = open_sql(pg_app_url, pool_size=WRITERS + 8)
    sequencers = [_start_sequencer(pg_app_url)]
    try:
        tally, stop_writers = Tally(), threading.Event()
        stop_tailing, stop_feeds = threading.Event(), threading.Event()

        def tailing(after: int) -> Seen:  # ledger order as it stands: never sequences
            with store.reading() as reads:
                found = reads.find_events(EventFilter(after=after, limit=500))
            return [(e.position, e.event_id) for e in found]

        def feed(after: int) -> Seen:  # catches up first, as the changes feed does
            return [(e.position, e.event_id) for e in read_after(store, after, 500)]

        readers: list[tuple[Seen, list[str], threading.Thread]] = []
        for read, stop in [(tailing, stop_tailing)] * 4 + [(feed, stop_feeds)] * 2:
            seen: Seen = []
            gaps: list[str] = []
            thread = threading.Thread(target=_reader, args=(read, stop, seen, gaps))
            readers.append((seen, gaps, thread))
        writers = [
            threading.Thread(target=_writer, args=(store, stop_writers, tally, n))
            for n in range(WRITERS)
        ]
        holder = threading.Thread(target=_holder, args=(store, tally))
        for _, _, thread in readers:
            thread.start()
        for thread in [*writers, holder]:
            thread.start()

        time.sleep(RUN_S / 2)
        assert sequencers[0].pid is not None
        os.kill(sequencers[0].pid, signal.SIGKILL)  # mid-run, mid-tick perhaps
        sequencers[0].join(timeout=10)
        sequencers.append(_start_sequencer(pg_app_url))
        time.sleep(RUN_S / 2)
        stop_writers.set()
        for thread in [*writers, holder]:
            thread.join(timeout=60)
        assert not tally.errors, tally.errors
        stop_feeds.set()  # the only readers that tick
        for _, _, thread in readers[4:]:
            thread.join(timeout=60)
        # A last write only the replacement can sequence: the tailing readers never tick.
        store.append(f"job-{uuid.uuid4()}", [accepted_event(-2)], 0)
        wait_until(lambda: _waiting(store) == 0, 30, "the replacement sequencer")
        stop_tailing.set()
        for _, _, thread in readers[:4]:
            thread.join(timeout=60)

        truth = [(e.position, e.event_id) for e in read_after(store, 0, 10**6)]
        with store.connection() as conn:
            committed = conn.execute(select(func.count()).select_from(events)).scalar_one()
        assert [p for p, _ in truth] == list(range(1, committed + 1))  # dense, each once
        assert len({event_id for _, event_id in truth}) == committed
        for seen, gaps, _ in readers[:4]:
            assert gaps == []
            assert seen == truth
        for seen, gaps, _ in readers[4:]:  # stopped before the last write
            assert gaps == []
            assert seen == truth[: len(seen)] and len(seen) >= len(truth) - 1
        statuses = tally.statuses
        assert statuses["rolled_back"] > 0 and statuses["held_committed"] == 1
        assert statuses["pulled"] > 0 and statuses["submit:braked"] > 0
        assert statuses["replay:duplicate"] + statuses["replay:conflict"] > 0
        assert statuses["replay:ok"] == 0  # a batch that landed never lands twice
        assert verify_store(store).ok
    finally:
        for process in sequencers:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGKILL)
            process.join(timeout=10)
        store.close()
